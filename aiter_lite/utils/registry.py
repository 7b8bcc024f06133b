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
registered op, which allocates), the exact aliases it allows between an output and an
input (``aliases``: ``out=input`` of an in-place norm), a switch that asks for host checks
(``unless``), and whether the function's result nests tuples with None where an output is
not asked for (``nested``: aiter's fused quant forms, ``((q, scale), out1, None, res)``;
no op schema returns that, so the registered op returns the result's tensors as a list,
depth first, :func:`flat_tensors`).

Every call's checked path (``utils.fast_launch``) first refuses a written tensor (``mutates``
and ``buffers``) whose elements overlap one another or overlap another argument other than
as a declared alias (``utils.overlap``): what torch refuses of its own outputs.
"""

from __future__ import annotations

import functools
import inspect
from dataclasses import dataclass, field
from typing import Callable

import torch

from aiter_lite.utils.fast_launch import planned
from aiter_lite.utils.overlap import check_written

__all__ = ["PublicOp", "PUBLIC_OPS", "public_op", "flat_tensors"]


@dataclass(frozen=True)
class PublicOp:
    name: str
    fn: Callable  # the public function as callers get it (launch plans included)
    mutates: tuple[str, ...]  # arguments it writes
    buffers: tuple[str, ...]  # optional output buffers of an allocating op
    module: str  # where it is defined (aiter_lite.ops.triton...)
    aliases: dict[str, tuple[str, ...]] = field(default_factory=dict)  # output -> the inputs it may be
    no_grad: str | None = None  # why a call autograd would record is refused (no gradient)
    nested: bool = False  # the result nests tuples (None in them): registered as its tensors' list

    @property
    def python(self) -> Callable:
        """The function under its launch plans."""
        return self.fn.__wrapped__


PUBLIC_OPS: dict[str, PublicOp] = {}


def public_op(fn: Callable | None = None, *, mutates: tuple[str, ...] = (), buffers: tuple[str, ...] = (),
              aliases: dict[str, tuple[str, ...]] | None = None, unless: Callable[[], bool] | None = None,
              no_grad: str | None = None, nested: bool = False):
    """Declare a public op (see the module doc); returns it with launch plans. ``no_grad``:
    why the op has no gradient (its outputs are quantized values, indices or cache
    writes); a call that autograd would record then raises rather than return a result
    with no gradient path. ``nested``: the result nests tuples (module doc)."""
    if fn is None:
        return functools.partial(public_op, mutates=mutates, buffers=buffers, aliases=aliases, unless=unless,
                                 no_grad=no_grad, nested=nested)
    if fn.__name__ in PUBLIC_OPS:
        raise ValueError(f"public_op: {fn.__name__} is declared twice ({PUBLIC_OPS[fn.__name__].module}, "
                         f"{fn.__module__})")
    aliases = {k: tuple(v) for k, v in (aliases or {}).items()}
    checked = _written_apart(fn, frozenset(mutates) | frozenset(buffers), aliases)
    wrapped = planned(checked if no_grad is None else _refusing_grad(checked, fn, no_grad), unless=unless)
    PUBLIC_OPS[fn.__name__] = PublicOp(fn.__name__, wrapped, tuple(mutates), tuple(buffers), fn.__module__, aliases,
                                       no_grad, nested)
    return wrapped


def flat_tensors(result) -> list[torch.Tensor]:
    """The tensors of a result, depth first through its tuples and lists, None left out."""
    if isinstance(result, torch.Tensor):
        return [result]
    if isinstance(result, (tuple, list)):
        return [t for item in result for t in flat_tensors(item)]
    return []


def _refusing_grad(inner: Callable, fn: Callable, reason: str) -> Callable:
    """``inner`` after a ``ValueError`` where autograd would record the call (grad enabled
    and a tensor argument that requires grad): ``fn`` has no gradient, for ``reason``."""
    names = tuple(inspect.signature(fn).parameters)
    op = fn.__name__

    @functools.wraps(inner)
    def checked(*args, **kwargs):
        if torch.is_grad_enabled() and not torch.compiler.is_compiling():
            for name, a in (*zip(names, args), *kwargs.items()):
                if isinstance(a, torch.Tensor) and a.requires_grad:
                    raise ValueError(f"{op}: {name} requires grad, but {op} has no gradient ({reason}); call it "
                                     f"under torch.no_grad() / torch.inference_mode(), or pass {name}.detach()")
        return inner(*args, **kwargs)

    return checked


def _written_apart(fn: Callable, written: frozenset[str], aliases: dict[str, tuple[str, ...]]) -> Callable:
    """``fn`` after :func:`~aiter_lite.utils.overlap.check_written` on its tensor arguments
    (not while torch.compile traces: a traced graph's tensors have no memory yet)."""
    names = tuple(inspect.signature(fn).parameters)
    unknown = (written | set(aliases) | {a for v in aliases.values() for a in v}) - set(names)
    if unknown:
        raise ValueError(f"public_op: {fn.__name__} declares {sorted(unknown)}, which are not its arguments")
    if not written:
        return fn
    op = fn.__name__

    @functools.wraps(fn)
    def checked(*args, **kwargs):
        if not torch.compiler.is_compiling():
            tensors = [(names[i], a) for i, a in enumerate(args) if isinstance(a, torch.Tensor)]
            tensors += [(k, a) for k, a in kwargs.items() if isinstance(a, torch.Tensor)]
            check_written(op, tensors, written, aliases)
        return fn(*args, **kwargs)

    return checked
