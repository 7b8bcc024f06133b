"""Gated activation then fp8 / int8 quantization in plain PyTorch (fp32 math).

Same names and signatures as ``aiter_lite.ops.triton.quant.act_quant``: the activation
rounded to x's dtype (what ``act_and_mul`` stores), then the quant reference.
"""

from __future__ import annotations

import torch

from aiter_lite.ops.native.activation import gated
from aiter_lite.ops.native.quant import quant
from aiter_lite.spec.quant import get_fp8_e4m3_dtype

__all__ = ["act_mul_and_fp8_group_quant", "act_mul_and_fp8_quant", "silu_and_mul_quant"]


def act_mul_and_fp8_group_quant(x, activation, group_size, dtype_quant=None, column_major_scales=False):
    dtype = dtype_quant or get_fp8_e4m3_dtype(x.device)
    return quant.per_token_group_quant_fp8(gated(x, activation), group_size, dtype=dtype,
                                           column_major_scales=column_major_scales)


def act_mul_and_fp8_quant(x, activation, scale=None, dtype_quant=None, scale_ub=None):
    dtype = dtype_quant or get_fp8_e4m3_dtype(x.device)
    return quant.scaled_fp8_quant(gated(x, activation), scale, scale_ub, use_per_token_if_dynamic=True, dtype=dtype)


def silu_and_mul_quant(out: torch.Tensor, input: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    return quant.static_per_tensor_quant_fp8_i8(out, gated(input, "silu"), scale)
