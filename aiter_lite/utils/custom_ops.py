"""Kernel launches as torch.library custom ops, for torch.compile.

Under torch.compile a launch must be an op the compiler can treat as opaque
(``fullgraph=True``, no graph break on Triton's launcher); in eager mode the
dispatcher would only add host time. :func:`launch_op` gives both: one
registration per launch, and a function that picks the path per call.
"""

from __future__ import annotations

import functools

import torch


def _writes_only(*args) -> None:
    return None


def launch_op(name: str, *, mutates_args: tuple[str, ...] = (), fake=None):
    """Register the decorated launch (positional, fully type-annotated) as
    ``torch.ops.aiter_lite.<name>_launch`` (the public ops own the plain names, see
    :mod:`aiter_lite.library`); return a function that calls it directly in
    eager mode and through the op while torch.compile traces.

    ``fake`` gives the outputs' shapes and dtypes from the inputs' (torch's
    ``register_fake``); the default fits launches that only write into the
    ``mutates_args`` they are given.
    """

    def wrap(fn):
        qualname = f"aiter_lite::{name}" if name.endswith("_launch") else f"aiter_lite::{name}_launch"
        op = torch.library.custom_op(qualname, fn, mutates_args=mutates_args)
        op.register_fake(fake or _writes_only)

        @functools.wraps(fn)
        def call(*args):
            return op(*args) if torch.compiler.is_compiling() else fn(*args)

        return call

    return wrap
