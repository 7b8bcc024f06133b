"""RMSNorm / LayerNorm fused with quantization, in plain PyTorch: the unfused sequence
(this package's norm, its output in the input's dtype, then its quantization).

Same names and argument order as ``aiter_lite.ops.triton.quant.norm_quant``.
"""

from __future__ import annotations

import torch

from aiter_lite.ops.native.normalization.layernorm import layer_norm, layernorm2d_fwd_with_add
from aiter_lite.ops.native.normalization.rmsnorm import rms_norm, rmsnorm2d_fwd_with_add
from aiter_lite.ops.native.quant.quant import dynamic_per_token_quant_fp8_i8, static_per_tensor_quant_fp8_i8
from aiter_lite.spec.normalization import LAYER_NORM_EPS

__all__ = ["rmsnorm2d_fwd_with_dynamicquant", "rmsnorm2d_fwd_with_smoothquant",
           "rmsnorm2d_fwd_with_add_dynamicquant", "rmsnorm2d_fwd_with_add_smoothquant",
           "layernorm2d_fwd_with_dynamicquant", "layernorm2d_fwd_with_smoothquant",
           "layernorm2d_fwd_with_add_dynamicquant", "layernorm2d_fwd_with_add_smoothquant",
           "rms_norm_static_fp8_quant", "fused_add_rms_norm_static_fp8_quant", "rms_norm_dynamic_per_token_quant"]


def _normed(input, weight, bias, eps, is_rms, residual_in=None, residual_out=None, x_bias=None):
    """The unfused norm's output, in input's dtype; with a residual, its sum stored first."""
    if residual_in is None:
        return rms_norm(input, weight, eps) if is_rms else layer_norm(input, weight, bias, eps, x_bias)
    y = torch.empty_like(input)
    if is_rms:
        rmsnorm2d_fwd_with_add(y, input, residual_in, residual_out, weight, eps)
    else:
        layernorm2d_fwd_with_add(y, input, residual_in, residual_out, weight, bias, eps, x_bias)
    return y


def norm_quant(out, input, weight, bias, epsilon, *, is_rms, yscale=None, scale=None, xscale=None, residual_in=None,
               residual_out=None, x_bias=None, scale_ub=None, dump=False):
    y = _normed(input, weight, bias, epsilon, is_rms, residual_in, residual_out, x_bias)
    if scale is not None:
        static_per_tensor_quant_fp8_i8(out, y, scale)
    else:
        dynamic_per_token_quant_fp8_i8(out, y if xscale is None else y.float() * xscale.float(), yscale, scale_ub)
    return y if dump else None


def rmsnorm2d_fwd_with_dynamicquant(out, input, yscale, weight, epsilon, scale_ub=None, clamp_out=False,
                                    dump_rms_norm=False):
    return norm_quant(out, input, weight, None, epsilon, is_rms=True, yscale=yscale, scale_ub=scale_ub,
                      dump=dump_rms_norm)


def rmsnorm2d_fwd_with_smoothquant(out, input, xscale, yscale, weight, epsilon):
    norm_quant(out, input, weight, None, epsilon, is_rms=True, yscale=yscale, xscale=xscale)


def rmsnorm2d_fwd_with_add_dynamicquant(out, input, residual_in, residual_out, yscale, weight, epsilon):
    norm_quant(out, input, weight, None, epsilon, is_rms=True, yscale=yscale, residual_in=residual_in,
               residual_out=residual_out)


def rmsnorm2d_fwd_with_add_smoothquant(out, input, residual_in, residual_out, xscale, yscale, weight, epsilon):
    norm_quant(out, input, weight, None, epsilon, is_rms=True, yscale=yscale, xscale=xscale,
               residual_in=residual_in, residual_out=residual_out)


def layernorm2d_fwd_with_dynamicquant(out, input, yscale, weight, bias, epsilon=LAYER_NORM_EPS, x_bias=None):
    norm_quant(out, input, weight, bias, epsilon, is_rms=False, yscale=yscale, x_bias=x_bias)


def layernorm2d_fwd_with_smoothquant(out, input, xscale, yscale, weight, bias, epsilon=LAYER_NORM_EPS, x_bias=None):
    norm_quant(out, input, weight, bias, epsilon, is_rms=False, yscale=yscale, xscale=xscale, x_bias=x_bias)


def layernorm2d_fwd_with_add_dynamicquant(out, input, residual_in, residual_out, yscale, weight, bias,
                                          epsilon=LAYER_NORM_EPS, x_bias=None):
    norm_quant(out, input, weight, bias, epsilon, is_rms=False, yscale=yscale, residual_in=residual_in,
               residual_out=residual_out, x_bias=x_bias)


def layernorm2d_fwd_with_add_smoothquant(out, input, residual_in, residual_out, xscale, yscale, weight, bias,
                                         epsilon=LAYER_NORM_EPS, x_bias=None):
    norm_quant(out, input, weight, bias, epsilon, is_rms=False, yscale=yscale, xscale=xscale,
               residual_in=residual_in, residual_out=residual_out, x_bias=x_bias)


def rms_norm_static_fp8_quant(out, input, weight, scale, epsilon):
    norm_quant(out, input, weight, None, epsilon, is_rms=True, scale=scale)


def fused_add_rms_norm_static_fp8_quant(out, input, residual, weight, scale, epsilon):
    norm_quant(out, input, weight, None, epsilon, is_rms=True, scale=scale, residual_in=residual,
               residual_out=residual)


def rms_norm_dynamic_per_token_quant(out, input, weight, scales, epsilon, scale_ub=None, residual=None):
    norm_quant(out, input, weight, None, epsilon, is_rms=True, yscale=scales, scale_ub=scale_ub,
               residual_in=residual, residual_out=residual)
