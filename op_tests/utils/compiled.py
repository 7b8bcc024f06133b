"""The public Triton ops swapped for compiled ones (AITER_TEST_COMPILE=1, see op_tests/conftest.py).

Every function that ``aiter_lite.library`` registers is replaced, in its module and in
every ``aiter_lite.ops.triton`` package that re-exports it, by
``torch.compile(fn, fullgraph=True)``: a test that imports or looks up the op gets
the compiled one, and a graph break fails the call. Arguments a check refuses raise
its TypeError / ValueError: dynamo reports an exception raised while tracing as its
own error, so the eager call is made to raise the check's (and where the eager call
succeeds, the compiler's error stands).
"""

from __future__ import annotations

import functools
import sys

import torch

import aiter_lite.library as library
from op_benchmarks.utils.harness import raise_recompile_limits

__all__ = ["swap_in_compiled"]


def _compiled(fn, backend: str):
    compiled = torch.compile(fn, backend=backend, fullgraph=True, dynamic=False)

    @functools.wraps(fn)
    def call(*args, **kwargs):
        try:
            return compiled(*args, **kwargs)
        except torch._dynamo.exc.TorchDynamoException:
            fn(*args, **kwargs)  # where a check refused an argument while tracing: its own error
            raise  # the eager call succeeds: the compiler failed

    call.eager = fn
    return call


def swap_in_compiled(backend: str):
    """Swap every registered op's Triton function for its compiled form; returns a
    function that puts the originals back."""
    raise_recompile_limits(1 << 16)  # a compile per shape and dtype
    # The registered ops' public functions as the modules hold them.
    modules = [m for n, m in list(sys.modules.items()) if n.startswith("aiter_lite.ops.triton") and m is not None]
    swaps = {}
    for m in modules:
        for n in library.OPS:
            fn = getattr(m, n, None)
            if callable(fn) and id(fn) not in swaps:
                swaps[id(fn)] = _compiled(fn, backend)
    undo = []
    for m in modules:
        for attr, value in list(vars(m).items()):
            if id(value) in swaps and not attr.startswith("__"):
                setattr(m, attr, swaps[id(value)])
                undo.append((m, attr, value))

    def restore():
        for m, attr, value in undo:
            setattr(m, attr, value)

    return restore
