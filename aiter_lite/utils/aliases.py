"""Names importable at aiter's module paths.

aiter defines some ops in other modules than aiter_lite does (``layer_norm`` in
``aiter.ops.triton.normalization.norm``, the norm + quant ops in ``normalization.rmsnorm``,
``act_mul_and_fp8_group_quant`` in ``activation``). Where aiter_lite's module at that path
cannot import the op at its top (the op's own module imports this one), the module declares
the name here and imports it on first use (PEP 562): ``from
aiter_lite.ops.triton.normalization.norm import layer_norm`` gives the op itself.
"""

from __future__ import annotations

import importlib
from typing import Callable


def lazy_aliases(module_globals: dict, where: dict[str, str]) -> Callable[[str], object]:
    """A module ``__getattr__`` that imports each name of ``where`` from the module path it
    maps to, on first access (then kept in the module)."""
    module = module_globals["__name__"]

    def __getattr__(name: str):
        path = where.get(name)
        if path is None:
            raise AttributeError(f"module {module!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(path), name)
        module_globals[name] = value
        return value

    return __getattr__
