"""Every public op declared where it is defined.

    @public_op(mutates=("out",))
    def silu_and_mul(out: torch.Tensor, input: torch.Tensor) -> torch.Tensor:
        ...

:func:`public_op` gives the function its launch plans (``utils.fast_launch``) and enters it
in :data:`PUBLIC_OPS`, from which ``aiter_lite.library`` registers it as
``torch.ops.aiter_lite.<name>``: the schema from the function's own signature and
annotations, the fake kernel from the native reference of the same name at the mirrored
module path (``aiter_lite.ops.native.<same path>``). What the declaration adds is what the
signature cannot say: the tensors the op writes (``mutates``: the registered op returns
nothing), the optional output buffers of an allocating op (``buffers``: left out of the
registered op, which allocates), and a switch that asks for host checks (``unless``).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Callable

from aiter_lite.utils.fast_launch import planned

__all__ = ["PublicOp", "PUBLIC_OPS", "public_op"]


@dataclass(frozen=True)
class PublicOp:
    name: str
    fn: Callable  # the public function as callers get it (launch plans included)
    mutates: tuple[str, ...]  # arguments it writes
    buffers: tuple[str, ...]  # optional output buffers of an allocating op
    module: str  # where it is defined (aiter_lite.ops.triton...)

    @property
    def python(self) -> Callable:
        """The function under its launch plans."""
        return self.fn.__wrapped__


PUBLIC_OPS: dict[str, PublicOp] = {}


def public_op(fn: Callable | None = None, *, mutates: tuple[str, ...] = (), buffers: tuple[str, ...] = (),
              unless: Callable[[], bool] | None = None):
    """Declare a public op (see the module doc); returns it with launch plans."""
    if fn is None:
        return functools.partial(public_op, mutates=mutates, buffers=buffers, unless=unless)
    if fn.__name__ in PUBLIC_OPS:
        raise ValueError(f"public_op: {fn.__name__} is declared twice ({PUBLIC_OPS[fn.__name__].module}, "
                         f"{fn.__module__})")
    wrapped = planned(fn, unless=unless)
    PUBLIC_OPS[fn.__name__] = PublicOp(fn.__name__, wrapped, tuple(mutates), tuple(buffers), fn.__module__)
    return wrapped
