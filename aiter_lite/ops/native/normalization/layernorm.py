"""LayerNorm in plain PyTorch: fp32 math, results cast to the output's dtype.

Same names and argument order as ``aiter_lite.ops.triton.normalization.layernorm``.
Differentiable through autograd, which makes it the backward reference too.
"""

from __future__ import annotations

import torch

from aiter_lite.spec.normalization import LAYER_NORM_EPS


def _ln(x, weight, bias, eps, weight_offset):
    mean = x.mean(-1, keepdim=True)
    var = (x - mean).pow(2).mean(-1, keepdim=True)
    y = (x - mean) * torch.rsqrt(var + eps)
    if weight is not None:
        y = y * (weight.float() + weight_offset)
    return y if bias is None else y + bias.float()


def layer_norm(input, weight, bias, eps=LAYER_NORM_EPS, x_bias=None, weight_offset=0.0) -> torch.Tensor:
    x = input.float() if x_bias is None else input.float() + x_bias.float()
    return _ln(x, weight, bias, eps, weight_offset).to(input.dtype)


def layernorm2d_fwd_with_add(out, input, residual_in, residual_out, weight, bias, epsilon, x_bias=None,
                             weight_offset=0.0):
    s = input.float() + residual_in.float()
    if x_bias is not None:
        s = s + x_bias.float()
    residual_out.copy_(s)
    out.copy_(_ln(s, weight, bias, epsilon, weight_offset))
    return out
