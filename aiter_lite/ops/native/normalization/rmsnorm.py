"""RMSNorm in plain PyTorch: fp32 math, results cast to the output's dtype.

Same names and argument order as ``aiter_lite.ops.triton.normalization.rmsnorm``.
Differentiable through autograd, which makes it the backward reference too.
"""

from __future__ import annotations

import torch


def _rms(x: torch.Tensor, weight, epsilon: float, weight_offset: float) -> torch.Tensor:
    y = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + epsilon)
    return y if weight is None else y * (weight.float() + weight_offset)


def rms_norm(input: torch.Tensor, weight: torch.Tensor | None, epsilon: float,
             weight_offset: float = 0.0) -> torch.Tensor:
    return _rms(input.float(), weight, epsilon, weight_offset).to(input.dtype)


def rmsnorm2d_fwd_with_add(out, input, residual_in, residual_out, weight, epsilon, weight_offset=0.0):
    s = input.float() + residual_in.float()
    residual_out.copy_(s)
    out.copy_(_rms(s, weight, epsilon, weight_offset))
    return out


def fused_add_rms_norm(input, residual, weight, epsilon, weight_offset=0.0) -> None:
    s = input.float() + residual.float()
    residual.copy_(s)
    input.copy_(_rms(s, weight, epsilon, weight_offset))
