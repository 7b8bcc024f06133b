"""One launcher per kernel, for every caller: eager, torch.compile, a pinned launch config.

A launcher (``_launch_<kernel>`` in a wrapper module) takes tensors it reads, tensors it
writes, scalars and flags, and optionally a launch config (a frozen dataclass, the
family's ``<family>_launch_config`` result, or one a test or a tuning script pins); it
picks the config when none is given and launches. It returns nothing: its outputs are
the tensors it is given. :func:`launcher` registers it as
``torch.ops.aiter_lite.launch_<kernel>``, derived from the function itself:

* the schema from its type annotations (``torch.library.infer_schema``), with the
  tensors named in ``mutates`` written; a launch-config parameter travels as a string;
* the fake kernel: none needed, a launch writes only its ``mutates`` arguments.

Eager calls go straight to the function (no dispatcher on the launch path); while
torch.compile traces, calls go through the registered op, which the compiler keeps
opaque: the config is chosen at run time from concrete shapes, so dynamic shapes need
no guards on launch heuristics.
"""

from __future__ import annotations

import ast
import dataclasses
import functools
import inspect
import typing

import torch

__all__ = ["launcher", "infer_schema", "config_class", "encode_config", "decode_config", "LAUNCHERS"]

LAUNCHERS: dict[str, object] = {}  # registered op name -> the launcher, every one the wrappers define


def config_class(hint) -> type | None:
    """The launch-config dataclass an annotation names (``Cfg`` or ``Cfg | None``), or None."""
    for t in (hint, *typing.get_args(hint)):
        if dataclasses.is_dataclass(t) and isinstance(t, type):
            return t
    return None


def _paths(cls: type, prefix: tuple = ()) -> tuple[tuple[str, ...], ...]:
    """Every leaf field of a (nested) launch-config dataclass, as attribute paths."""
    hints = typing.get_type_hints(cls)
    out = []
    for f in dataclasses.fields(cls):
        t = hints[f.name]
        out += _paths(t, (*prefix, f.name)) if dataclasses.is_dataclass(t) else [(*prefix, f.name)]
    return tuple(out)


def encode_config(cfg, paths: tuple) -> str | None:
    """A launch config as the registered op takes it: ``a=1;b.c='x'`` over its leaf fields
    (plain attribute reads and reprs of ints, bools and strings, which torch.compile traces
    to a constant). None stays None."""
    if cfg is None:
        return None
    parts = []
    for path in paths:
        value = cfg
        for name in path:
            value = getattr(value, name)
        parts.append(f"{'.'.join(path)}={value!r}")
    return ";".join(parts)


def decode_config(cls: type, text: str | None):
    """The config :func:`encode_config` wrote."""
    if text is None:
        return None
    fields: dict = {}
    for part in text.split(";"):
        path, value = part.split("=", 1)
        *outer, leaf = path.split(".")
        node = fields
        for name in outer:
            node = node.setdefault(name, {})
        node[leaf] = ast.literal_eval(value)
    return _build(cls, fields)


def _build(cls: type, fields: dict):
    hints = typing.get_type_hints(cls)
    return cls(**{k: _build(hints[k], v) if isinstance(v, dict) else v for k, v in fields.items()})


def infer_schema(signature: inspect.Signature, mutates: tuple[str, ...]) -> str:
    """``torch.library.infer_schema`` of a signature (annotations as types), with no default up
    to the last written argument: the dispatcher leaves out trailing arguments equal to their
    defaults, and torch's mutation bookkeeping (torch 2.11) indexes the written ones."""
    params = list(signature.parameters.values())
    last = max((i for i, p in enumerate(params) if p.name in mutates), default=-1)
    params = [p.replace(default=inspect.Parameter.empty) if i <= last else p for i, p in enumerate(params)]

    def shim(*args, **kwargs):
        raise NotImplementedError

    shim.__signature__ = signature.replace(parameters=params)
    return torch.library.infer_schema(shim, mutates_args=mutates)


def launcher(*, mutates: tuple[str, ...]):
    """Register the decorated launch (fully annotated, returning None) as
    ``torch.ops.aiter_lite.<its name without the leading underscore>``; return a function
    that calls it directly in eager mode and through the op while torch.compile traces."""

    def wrap(fn):
        sig = inspect.signature(fn)
        hints = typing.get_type_hints(fn)
        if hints.get("return", type(None)) is not type(None):
            raise TypeError(f"{fn.__name__}: a launcher returns None (its outputs are arguments it writes)")
        if "mode" in sig.parameters:  # torch's dispatch to modes passes a keyword of that name
            raise TypeError(f"{fn.__name__}: a registered op's argument cannot be named 'mode'")
        configs = {name: cls for name in sig.parameters if (cls := config_class(hints.get(name))) is not None}
        params = [p.replace(annotation=(str | None) if p.name in configs else hints[p.name])
                  for p in sig.parameters.values()]
        schema = infer_schema(sig.replace(parameters=params, return_annotation=None), mutates)
        names = list(sig.parameters)
        defaults = [p.default for p in sig.parameters.values()]
        config_at = {names.index(name): cls for name, cls in configs.items()}
        config_paths = {i: _paths(cls) for i, cls in config_at.items()}

        def every(args, kwargs) -> list:
            """Every argument positionally: the caller's, or its default."""
            return [*args, *(kwargs.get(n, defaults[i]) for i, n in enumerate(names) if i >= len(args))]

        def impl(*args, **kwargs):
            args = every(args, kwargs)
            for i, cls in config_at.items():
                args[i] = decode_config(cls, args[i])
            fn(*args)

        op = torch.library.custom_op(f"aiter_lite::{fn.__name__.lstrip('_')}", impl, mutates_args=mutates,
                                     schema=schema)
        op.register_fake(lambda *args: None)

        @functools.wraps(fn)
        def call(*args, **kwargs):
            if not torch.compiler.is_compiling():
                return fn(*args, **kwargs)
            args = every(args, kwargs)
            for i, paths in config_paths.items():
                args[i] = encode_config(args[i], paths)
            return op(*args)

        call.op = op
        LAUNCHERS[fn.__name__.lstrip("_")] = call
        return call

    return wrap
