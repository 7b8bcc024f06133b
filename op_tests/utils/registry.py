"""Every registered op (``aiter_lite.library.OPS``) called the same way: arguments from
op_benchmarks.utils.op_args on the test device, copies, and bit-exact comparisons of
what two calls returned and wrote."""

from __future__ import annotations

import torch

from aiter_lite.library import OPS
from aiter_lite.ops.triton.quant import get_fp8_e4m3_dtype
from aiter_lite.utils.registry import flat_tensors
from op_benchmarks.utils.op_args import TINY, Dims, decode_dims, op_args
from op_tests.utils.device import DEVICE, ON_GPU

__all__ = ["OPS", "SIZES", "sample", "clone_args", "tensors", "assert_same_bits"]

# Tiny (five tokens, a few channels) and, on a GPU, one decode token at real model widths.
SIZES = {"tiny": TINY, "decode": decode_dims(1)} if ON_GPU else {"tiny": TINY}


def sample(name: str, dims: Dims = TINY, gpu_dtypes: bool = ON_GPU) -> tuple:
    """Fresh arguments for op ``name``: bf16 activations and fp8 quantized outputs with
    ``gpu_dtypes`` (what serving passes), else fp32 and int8 (opcheck's arithmetic)."""
    if gpu_dtypes:
        return op_args(name, dims, DEVICE, torch.bfloat16, get_fp8_e4m3_dtype())
    return op_args(name, dims, DEVICE)


def clone_args(args: tuple) -> tuple:
    return tuple(a.clone() if isinstance(a, torch.Tensor) else a for a in args)


def tensors(result) -> list[torch.Tensor]:
    """The tensors of a result: one, tuples (nested) or a list of them, or None."""
    return flat_tensors(result)


def _bits(t: torch.Tensor) -> torch.Tensor:
    return t.contiguous().reshape(-1).view(torch.uint8) if t.numel() else t


def assert_same_bits(got, want, what: str) -> None:
    """Every returned tensor and every tensor argument (written ones included) identical,
    bit for bit (NaN payloads too)."""
    got, want = tensors(got), tensors(want)
    assert len(got) == len(want), f"{what}: {len(got)} tensors returned, expected {len(want)}"
    for i, (a, b) in enumerate(zip(got, want)):
        assert (a.shape, a.dtype) == (b.shape, b.dtype), f"{what}: result {i} is {a.shape} {a.dtype}, " \
                                                         f"expected {b.shape} {b.dtype}"
        assert torch.equal(_bits(a), _bits(b)), f"{what}: result {i} differs"
