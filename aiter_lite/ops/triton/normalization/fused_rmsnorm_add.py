"""aiter's ``fused_rmsnorm_add`` (``aiter.ops.triton.normalization.fused_rmsnorm_add``): RMSNorm
of x, or of ``x + res1`` with that sum returned too, as new tensors.

``fused_rmsnorm_add(x, weight, epsilon)`` is ``rms_norm(x, weight, epsilon)``;
``fused_rmsnorm_add(x, weight, epsilon, res1)`` returns ``(out, out_res1)`` with ``out_res1 =
x + res1`` and ``out = rms_norm(out_res1)`` (``rmsnorm2d_fwd_with_add``'s one launch). A
dispatcher over those two registered ops, as aiter's is over two custom ops (one op cannot
return a tensor or a tuple); any rank (aiter: 2-D), any row stride, differentiable. x and
res1 are never written."""

from __future__ import annotations

import torch

from aiter_lite.ops.triton.normalization.norm import check_vector
from aiter_lite.ops.triton.normalization.rmsnorm import rms_norm, rmsnorm2d_fwd_with_add
from aiter_lite.utils.checks import check_row_input, check_same_device

__all__ = ["fused_rmsnorm_add"]


def fused_rmsnorm_add(x: torch.Tensor, weight: torch.Tensor, epsilon: float, res1: torch.Tensor | None = None):
    """``out`` = RMSNorm of x; with ``res1``: ``(out, out_res1)``, the norm of ``out_res1 = x + res1``."""
    op = "fused_rmsnorm_add"
    check_row_input(op, "x", x, " (normalized over the last)")
    if weight is None:
        raise TypeError(f"{op}: weight must be a torch.Tensor, got None")
    check_vector(op, "weight", weight, x.shape[-1], x, "x")
    if res1 is None:
        return rms_norm(x, weight, epsilon)
    check_row_input(op, "res1", res1)
    if res1.shape != x.shape or res1.dtype != x.dtype:
        raise ValueError(f"{op}: res1 must have x's shape {tuple(x.shape)} and dtype {x.dtype}, got "
                         f"{tuple(res1.shape)} {res1.dtype}")
    check_same_device(op, "res1", res1, "x", x)
    out = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    out_res1 = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    out = rmsnorm2d_fwd_with_add(out, x, res1, out_res1, weight, epsilon)
    return out, out_res1
