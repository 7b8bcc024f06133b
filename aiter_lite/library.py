"""Every public op as a ``torch.library`` op: ``torch.ops.aiter_lite.<name>``.

Importing :mod:`aiter_lite` registers them, from their declarations (``@public_op`` in
``aiter_lite.utils.registry``): nothing here is written per op.

* the schema is the public function's signature, from its annotations
  (``torch.library.infer_schema``): the arguments it writes (``mutates``) are declared
  ``Tensor(a!)`` and the registered op returns nothing; an allocating op's optional output
  buffers (``buffers``) and launch-config arguments (a dataclass) are left out (the op
  allocates, and picks its config); ``Literal`` strings are ``str``; keyword-only
  arguments are positional (a custom op takes no keyword-only tensor), and arguments up to
  the last written one have no default (torch's mutation bookkeeping indexes them);
* the real kernel is the public function (checks, then its launch); an argument it hands
  back is copied (an op returns new tensors only); a ``nested`` op's result (tuples within
  tuples, None where an output is not asked for) is returned as the list of its tensors,
  depth first (``Tensor[]``);
* the fake kernel is the native reference of the same name at the mirrored module path
  (``aiter_lite.ops.native...``) run on fake tensors, so torch.compile and
  ``torch.library.opcheck`` see the shapes and dtypes eager gives.

Eager code should call the Python functions (no dispatcher on the launch path); these
ops serve graphs and stacks that call kernels through ``torch.ops``.
"""

from __future__ import annotations

import functools
import importlib
import inspect
import re
import typing
from dataclasses import dataclass
from typing import Callable

import torch

import aiter_lite.ops.triton  # noqa: F401  (its modules declare the public ops)
from aiter_lite.utils.launcher import config_class, infer_schema
from aiter_lite.utils.registry import PUBLIC_OPS, PublicOp, flat_tensors

__all__ = ["OPS", "OpSpec"]


@dataclass(frozen=True)
class OpSpec:
    """One registered op: its schema (``name(args) -> returns``), the Triton function that
    runs it and the native one its fake runs."""

    schema: str
    triton: Callable  # both take the registered op's arguments, positionally in the schema's order
    native: Callable

    @property
    def name(self) -> str:
        return self.schema.split("(", 1)[0]

    @property
    def mutates(self) -> tuple[str, ...]:
        return tuple(re.findall(r"Tensor\(\w+!\)\??\s+(\w+)", self.schema))

    @property
    def returns_nothing(self) -> bool:
        return self.schema.rstrip().endswith("-> ()")


def _schema_type(hint):
    """An annotation as ``infer_schema`` takes it: ``Literal`` strings are ``str``; a
    ``torch.Tensor | float`` operand (aiter's ``fused_mul_add``) a ``Tensor`` (the registered
    op takes a number as a one-element tensor), as is ``torch.Tensor | int`` / ``float``
    (sampling's ``top_k`` / ``top_p``: a tensor of one a row)."""
    if typing.get_origin(hint) is typing.Literal:
        return str
    args = typing.get_args(hint)
    if torch.Tensor in args and (float in args or int in args):  # a number or one a row (sampling's top_k)
        return torch.Tensor
    if args and any(typing.get_origin(a) is typing.Literal for a in args):  # Literal[...] | None
        return str | None
    return hint


def _registered_signature(op: PublicOp) -> inspect.Signature:
    """The registered op's signature (annotations as types)."""
    fn = op.python
    sig, hints = inspect.signature(fn), typing.get_type_hints(fn)
    params = [p.replace(annotation=_schema_type(hints[p.name]), kind=inspect.Parameter.POSITIONAL_OR_KEYWORD)
              for p in sig.parameters.values() if p.name not in op.buffers and config_class(hints[p.name]) is None]
    returns = None if op.mutates else list[torch.Tensor] if op.nested else hints["return"]
    return sig.replace(parameters=params, return_annotation=returns)


def _native(op: PublicOp) -> Callable:
    """The native reference of the same name, at the mirrored module path."""
    module = importlib.import_module(op.module.replace("aiter_lite.ops.triton", "aiter_lite.ops.native", 1))
    return getattr(module, op.name)


def _fresh(result, args, nested: bool = False):
    """``result`` as the op returns it: tensors that are not arguments (an argument handed
    back is copied); a nested result as the list of its tensors."""
    if nested:
        result = flat_tensors(result)
    outs = result if isinstance(result, (tuple, list)) else (result,)
    ids = {id(a) for a in args if isinstance(a, torch.Tensor)}
    outs = tuple(o.clone() if id(o) in ids else o for o in outs)
    return list(outs) if nested else tuple(outs) if isinstance(result, tuple) else outs[0]


def _register(op: PublicOp) -> OpSpec:
    signature = _registered_signature(op)
    schema = infer_schema(signature, op.mutates)
    names = list(signature.parameters)
    defaults = [p.default for p in signature.parameters.values()]
    native = _native(op)

    def bind(args, kwargs) -> dict:
        """Every registered argument by name, the caller's or its default: the dispatcher
        leaves out trailing arguments that equal their defaults."""
        return {n: args[i] if i < len(args) else kwargs.get(n, defaults[i]) for i, n in enumerate(names)}

    def impl(*args, **kwargs):
        bound = bind(args, kwargs)
        result = op.fn(**bound)
        return None if op.mutates else _fresh(result, bound.values(), op.nested)

    def fake(*args, **kwargs):
        if op.mutates:
            return None
        bound = bind(args, kwargs)
        return _fresh(native(**bound), bound.values(), op.nested)

    custom = torch.library.custom_op(f"aiter_lite::{op.name}", impl, mutates_args=op.mutates, schema=schema)
    custom.register_fake(fake)
    return OpSpec(f"{op.name}{schema}", _positional(op.fn, signature), _positional(native, signature))


def _positional(fn: Callable, signature: inspect.Signature) -> Callable:
    """``fn`` called with the registered op's arguments in the schema's order: itself where
    those are its leading positional parameters, else by name (an output buffer left out
    between them, keyword-only parameters)."""
    names = list(signature.parameters)
    params = list(inspect.signature(fn).parameters.values())[:len(names)]
    if [p.name for p in params] == names and all(p.kind == p.POSITIONAL_OR_KEYWORD for p in params):
        return fn

    @functools.wraps(fn)
    def by_name(*args, **kwargs):
        if len(args) > len(names):
            raise TypeError(f"{fn.__name__}: takes at most {len(names)} positional arguments (the registered "
                            f"op's), got {len(args)}")
        return fn(**dict(zip(names, args)), **kwargs)

    by_name.__signature__ = signature
    return by_name


OPS: dict[str, OpSpec] = {name: _register(op) for name, op in sorted(PUBLIC_OPS.items())}
