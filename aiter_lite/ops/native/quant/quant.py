"""fp8 / int8 quantization in plain PyTorch (fp32 math).

Same names and signatures as ``aiter_lite.ops.triton.quant.quant``; the reference the tests
compare against and the "native" backend. A NaN in a dynamic scale's rows makes that scale
NaN (``amax`` and ``clamp`` keep NaN): NaN values in fp8, 0 in int8.
"""

from __future__ import annotations

import torch

from aiter_lite import envs
from aiter_lite.spec.quant import GROUP_EPS, get_fp8_e4m3_dtype, min_scale, quant_range

__all__ = ["static_per_tensor_quant_fp8_i8", "dynamic_per_tensor_quant_fp8_i8", "dynamic_per_token_quant_fp8_i8",
           "per_token_group_quant", "static_per_tensor_int8_azp_quant",
           "dynamic_per_token_int8_azp_quant", "scaled_fp8_quant", "per_token_group_quant_fp8", "per_token_group_quant_int8"]


def quantize(x: torch.Tensor, scale: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """``x * (1 / scale)`` (scale broadcast) saturated to dtype's range; int8 rounded to
    nearest even (toward zero with ``AITER_INT8_ROUNDING=truncate``). By the reciprocal, as
    the kernels (and vLLM's) do: ``x / scale`` can round to the other side of an fp8 tie.
    NaN (a NaN input, or any value under a NaN scale) stays NaN in fp8 and is 0 in int8,
    which has no NaN (its scale carries it)."""
    lo, hi = quant_range(dtype)
    return round_to(x.float() * (1.0 / scale), dtype, lo, hi)


def round_to(y: torch.Tensor, dtype: torch.dtype, lo: float, hi: float) -> torch.Tensor:
    """fp32 ``y`` saturated to [lo, hi] in ``dtype``: int8 by the configured rounding, NaN 0."""
    y = y.clamp(lo, hi)
    if dtype.is_floating_point:
        return y.to(dtype)
    return (y.trunc() if envs.int8_truncates() else y.round()).nan_to_num(nan=0.0).to(dtype)


def _scale(amax: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """``amax / q_max`` by an IEEE division (a Python-number divisor would make torch's
    CUDA kernels multiply by its reciprocal, one ulp off vLLM's and this project's scales)."""
    return amax / torch.full((), quant_range(dtype)[1], device=amax.device)


def static_per_tensor_quant_fp8_i8(qx, x_in, scale_in):
    qx.copy_(quantize(x_in, scale_in.reshape(()), qx.dtype))
    return qx


def dynamic_per_tensor_quant_fp8_i8(qx, x_in, scale_out):
    amax = x_in.float().abs().amax() if x_in.numel() else torch.zeros((), device=x_in.device)
    scale = _scale(amax, qx.dtype).clamp(min=min_scale(qx.dtype))
    scale_out.copy_(scale.reshape(scale_out.shape))
    qx.copy_(quantize(x_in, scale, qx.dtype))
    return qx, scale_out


def dynamic_per_token_quant_fp8_i8(qx, x_in, scale_out, scale_ub=None):
    x = x_in.float()
    amax = x.abs().amax(-1, keepdim=True) if x.shape[-1] else x.new_zeros((*x.shape[:-1], 1))
    if scale_ub is not None:
        amax = amax.clamp(max=scale_ub.reshape(()))
    scale = _scale(amax, qx.dtype).clamp(min=min_scale(qx.dtype))
    scale_out.copy_(scale.reshape(scale_out.shape))
    qx.copy_(quantize(x, scale, qx.dtype))
    return qx, scale_out


def per_token_group_quant(qx, x_in, scale_out, group_size, eps=GROUP_EPS):
    x = x_in.float()
    n = x.shape[-1]
    full = n - n % group_size
    amax = x[..., :full].unflatten(-1, (full // group_size, group_size)).abs().amax(-1)
    if full < n:  # a partial last group
        amax = torch.cat([amax, x[..., full:].abs().amax(-1, keepdim=True)], -1)
    scale = _scale(amax.clamp(min=eps), qx.dtype)
    scale_out.copy_(scale)
    qx.copy_(quantize(x, scale.repeat_interleave(group_size, -1)[..., :n], qx.dtype))
    return qx, scale_out


def _azp_round(x: torch.Tensor, inv_scale: torch.Tensor, azp: torch.Tensor) -> torch.Tensor:
    """vLLM's ``sat8(sat32(rint(x * inv_scale)) + azp)``; NaN is 0 before the zero point."""
    y = (x.float() * inv_scale).nan_to_num(nan=0.0).clamp(-2.0**22, 2.0**22).round()
    return (y + azp.float()).clamp(-128, 127).to(torch.int8)


def static_per_tensor_int8_azp_quant(qx, x_in, scale_in, azp_in):
    qx.copy_(_azp_round(x_in, 1.0 / scale_in.reshape(()), azp_in.reshape(())))
    return qx


def dynamic_per_token_int8_azp_quant(qx, x_in, scale_out, azp_out):
    x = x_in.float()
    nan = x.isnan()  # skipped by the min and max, as the GPUs' reductions skip it
    hi = x.masked_fill(nan, -float("inf")).amax(-1, keepdim=True)
    lo = x.masked_fill(nan, float("inf")).amin(-1, keepdim=True)
    scale = (hi - lo) / torch.full((), 255.0, device=x.device)
    azp = (-128.0 - lo / scale).nan_to_num(nan=0.0).clamp(-2.0**22, 2.0**22).round()
    scale_out.copy_(scale.reshape(scale_out.shape))
    azp_out.copy_(azp.reshape(azp_out.shape).to(torch.int32))
    qx.copy_(_azp_round(x, 1.0 / scale, azp))
    return qx, scale_out, azp_out


def scaled_fp8_quant(input, scale=None, scale_ub=None, use_per_token_if_dynamic=False, output=None, dtype=None):
    dtype = dtype or (output.dtype if output is not None else get_fp8_e4m3_dtype())
    q = torch.empty(input.shape, dtype=dtype, device=input.device) if output is None else output
    if scale is not None:
        return static_per_tensor_quant_fp8_i8(q, input, scale), scale
    if use_per_token_if_dynamic:
        s = torch.empty((*input.shape[:-1], 1), dtype=torch.float32, device=input.device)
        return dynamic_per_token_quant_fp8_i8(q, input, s, scale_ub)
    return dynamic_per_tensor_quant_fp8_i8(q, input, torch.empty(1, dtype=torch.float32, device=input.device))


def per_token_group_quant_fp8(x, group_size, eps=GROUP_EPS, dtype=None, column_major_scales=False, out_q=None):
    dtype = dtype or get_fp8_e4m3_dtype()
    q = torch.empty(x.shape, dtype=dtype, device=x.device) if out_q is None else out_q
    n_groups = -(-x.shape[-1] // group_size)
    if column_major_scales:
        s = torch.empty((n_groups, x.shape[0]), dtype=torch.float32, device=x.device).t()
    else:
        s = torch.empty((*x.shape[:-1], n_groups), dtype=torch.float32, device=x.device)
    return per_token_group_quant(q, x, s, group_size, eps)


def per_token_group_quant_int8(x, group_size, eps=GROUP_EPS, dtype=torch.int8):
    return per_token_group_quant_fp8(x, group_size, eps, dtype)


# aiter's MX / NV block formats at this path (defined in quant.mx_quant)
from aiter_lite.ops.native.quant.mx_quant import (  # noqa: E402,F401
    dynamic_mxfp4_quant,
    dynamic_mxfp8_quant,
    dynamic_nvfp4_quant,
)
