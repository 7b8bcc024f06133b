"""LayerNorm on the Triton backend, with aiter's names and argument order.

``y = (x - mean) / sqrt(var + eps) * (weight + weight_offset) + bias`` over the
last dim, x optionally shifted by ``x_bias`` first; weight and bias may be None.
Inputs of any rank, rows may be strided (unit stride in the last dim);
fp32/fp16/bf16 in, the output's dtype out; math in fp32. ``eps`` (``epsilon``) is a
finite real >= 0; a row holding a NaN or an inf normalizes to NaN, as the reference.
"""

from __future__ import annotations

import torch

from aiter_lite.ops.triton.normalization.norm import norm, norm_with_add
from aiter_lite.spec.normalization import LAYER_NORM_EPS
from aiter_lite.utils.registry import public_op

__all__ = ["layer_norm", "layernorm2d_fwd_with_add"]


@public_op
def layer_norm(input: torch.Tensor, weight: torch.Tensor | None, bias: torch.Tensor | None,
               eps: float = LAYER_NORM_EPS, x_bias: torch.Tensor | None = None,
               weight_offset: float = 0.0) -> torch.Tensor:
    """LayerNorm of ``input`` (+ x_bias) as a new tensor; differentiable in input, weight, bias, x_bias."""
    return norm("layer_norm", input, weight, bias, eps, is_rms=False, x_bias=x_bias, weight_offset=weight_offset,
                eps_name="eps")


@public_op(mutates=("out", "residual_out"),
           aliases={"out": ("input",), "residual_out": ("residual_in", "input")})
def layernorm2d_fwd_with_add(out: torch.Tensor, input: torch.Tensor, residual_in: torch.Tensor,
                             residual_out: torch.Tensor, weight: torch.Tensor | None, bias: torch.Tensor | None,
                             epsilon: float, x_bias: torch.Tensor | None = None,
                             weight_offset: float = 0.0) -> torch.Tensor:
    """``residual_out = input + residual_in (+ x_bias)``; ``out = layer_norm(residual_out)``; returns ``out``."""
    norm_with_add("layernorm2d_fwd_with_add", out, input, residual_in, residual_out, weight, bias, epsilon,
                  is_rms=False, x_bias=x_bias, weight_offset=weight_offset)
    return out
