"""aiter's ``fused_fp8_quant`` forms in plain PyTorch (fp32 math): RMSNorm of a row (after
an optional residual add or split-K sum; or gated) or a gated activation, quantized per
group of columns or by a static scale, and the further inputs normalized or summed
alongside. The reference of
``aiter_lite.ops.triton.quant.fused_fp8_quant``; same names and signatures.
"""

from __future__ import annotations

import torch

from aiter_lite.ops.native.quant.quant import per_token_group_quant, quantize, round_to
from aiter_lite.spec.quant import GROUP_EPS, get_fp8_e4m3_dtype, get_fp8_min_max_bounds, quant_range

__all__ = ["fused_rms_fp8_group_quant", "fused_rms_fp8_per_tensor_static_quant", "fused_reduce_rms_fp8_group_quant",
           "fused_reduce_act_mul_fp8_group_quant", "fused_rms_gated_fp8_group_quant", "fused_flatten_fp8_group_quant",
           "fused_silu_mul_fp8_per_tensor_static_quant", "get_fp8_min_max_bounds"]


def _rms(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight.float()


def _norms(inp1, inp1_weight, inp1_epsilon, inp2, inp2_weight, inp2_epsilon, res1, output_unquantized_inp1):
    """(the fp32 norm of inp1 (+ res1), out1, out2, out_res1) as aiter returns them."""
    x = inp1.float()
    out_res1 = None
    if res1 is not None:
        x = x + res1.float()
        out_res1 = x.to(inp1.dtype)
    y = _rms(x, inp1_weight, inp1_epsilon)
    out1 = y.to(inp1.dtype) if output_unquantized_inp1 else None
    out2 = None if inp2 is None else _rms(inp2.float(), inp2_weight, inp2_epsilon).to(inp1.dtype)
    return y, out1, out2, out_res1


def fused_rms_fp8_group_quant(inp1, inp1_weight, inp1_epsilon, inp2=None, inp2_weight=None, inp2_epsilon=None,
                              group_size=128, dtype_quant=None, res1=None, output_unquantized_inp1=False,
                              transpose_scale=False, is_x_scale_strided=False, gemm_out_zero_init=None):
    y, out1, out2, out_res1 = _norms(inp1, inp1_weight, inp1_epsilon, inp2, inp2_weight, inp2_epsilon, res1,
                                     output_unquantized_inp1)
    if gemm_out_zero_init is not None:
        gemm_out_zero_init.zero_()
    return _group(y, group_size, dtype_quant, transpose_scale, is_x_scale_strided), out1, out2, out_res1


def _group(y: torch.Tensor, group_size: int, dtype_quant, transpose_scale=False, is_x_scale_strided=False):
    """(q, scale) of fp32 rows ``y`` quantized per group, the scales in aiter's layouts:
    row-major; with ``transpose_scale`` column-major bytes presented (M, G), re-viewed
    contiguous or strided (``is_x_scale_strided``)."""
    dtype = dtype_quant or get_fp8_e4m3_dtype(y.device)
    m, n = y.shape
    groups = -(-n // group_size)
    q = torch.empty((m, n), dtype=dtype, device=y.device)
    scale = torch.empty((m, groups), dtype=torch.float32, device=y.device)
    per_token_group_quant(q, y, scale, group_size, GROUP_EPS)
    if transpose_scale:
        scale = scale.t().contiguous()
        scale = scale.t() if is_x_scale_strided else scale.view(m, groups)
    return q, scale


def fused_rms_fp8_per_tensor_static_quant(inp1, inp1_weight, inp1_epsilon, inp1_scale, inp2=None, inp2_weight=None,
                                          inp2_epsilon=None, dtype_quant=None, res1=None,
                                          output_unquantized_inp1=False, rmsnorm_convert_to_inp1_type=False):
    y, out1, out2, out_res1 = _norms(inp1, inp1_weight, inp1_epsilon, inp2, inp2_weight, inp2_epsilon, res1,
                                     output_unquantized_inp1)
    if rmsnorm_convert_to_inp1_type:
        y = y.to(inp1.dtype).float()
    dtype = dtype_quant or get_fp8_e4m3_dtype(inp1.device)
    return quantize(y, inp1_scale.float().reshape(()), dtype), out1, out2, out_res1


def _sum_splits(t):
    """A 2-D input as fp32, a 3-D (SPK, M, N) one summed over its splits in fp32."""
    return t.float().sum(0) if t.dim() == 3 else t.float()


def fused_reduce_rms_fp8_group_quant(inp1, inp1_weight, inp1_epsilon, inp2=None, inp2_weight=None, inp2_epsilon=None,
                                     inp3=None, group_size=128, dtype_quant=None, dtype=None, res1=None,
                                     output_unquantized_inp1=False, out3=None, transpose_scale=False,
                                     is_x_scale_strided=False):
    out_dtype = dtype or inp1.dtype
    x = _sum_splits(inp1)
    out_res1 = None
    if res1 is not None:
        x = x + res1.float()
        out_res1 = x.to(out_dtype)
    y = _rms(x, inp1_weight, inp1_epsilon)
    out1 = y.to(out_dtype) if output_unquantized_inp1 else None
    out2 = None if inp2 is None else _rms(_sum_splits(inp2), inp2_weight, inp2_epsilon).to(out_dtype)
    q, scale = _group(y, group_size, dtype_quant, transpose_scale, is_x_scale_strided)
    if inp3 is not None:
        s3 = inp3.float().sum(0)
        if out3 is None:
            out3 = s3.to(out_dtype)
        else:
            out3.copy_(s3)
    return (q, scale), out1, out2, out_res1, out3


def _act(x: torch.Tensor, activation: str) -> torch.Tensor:
    if activation == "silu":
        return torch.nn.functional.silu(x)
    return torch.nn.functional.gelu(x, approximate="tanh" if activation == "gelu_tanh" else "none")


def fused_reduce_act_mul_fp8_group_quant(x, activation="silu", x2=None, group_size=128, dtype_quant=None,
                                         dtype=torch.bfloat16):
    xs = _sum_splits(x)
    n = xs.shape[-1] // 2
    y = _act(xs[:, :n], activation) * xs[:, n:]
    q, scale = _group(y, group_size, dtype_quant)
    y2 = None if x2 is None else x2.float().sum(0).to(dtype or torch.bfloat16)
    return (q, scale), y2


def fused_rms_gated_fp8_group_quant(x, weight, bias, z, eps, *, norm_before_gate=True, use_ue8m0=False,
                                    activation="silu", out_dtype=None, fp8_min=None, fp8_max=None,
                                    fp8_min_scaling_factor=None, group_size=None):
    dtype = out_dtype or get_fp8_e4m3_dtype(x.device)
    if fp8_min is None:
        fp8_min, fp8_max = get_fp8_min_max_bounds(dtype) if dtype.is_floating_point else quant_range(dtype)
    floor = 1.0 / (fp8_max * 512.0) if fp8_min_scaling_factor is None else fp8_min_scaling_factor
    xf = x.float()
    gate = None
    if z is not None:
        zf = z.float()
        gate = zf * torch.sigmoid(zf) if activation in ("silu", "swish") else torch.sigmoid(zf)
        if not norm_before_gate:
            xf = xf * gate
    y = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps) * weight.float()
    if bias is not None:
        y = y + bias.float()
    if gate is not None and norm_before_gate:
        y = y * gate
    m, n = y.shape
    gs = n if group_size is None else group_size
    g = y.view(m, n // gs, gs) if n else y.view(m, 0, 1)
    scale = g.abs().amax(-1) / torch.full((), fp8_max, device=x.device) if n else g.new_zeros(m, 0)
    if use_ue8m0:  # the least power of 2 >= scale, exactly (frexp: scale = m * 2^e, 0.5 <= m < 1)
        m_, e_ = torch.frexp(scale)
        scale = torch.where((m_ == 0.5) | (scale == 0) | ~scale.isfinite(), scale, torch.ldexp(torch.ones_like(scale), e_))
    scale = torch.where(scale.isnan(), scale, scale.clamp(min=floor))
    q = round_to(g * (1.0 / scale)[..., None], dtype, fp8_min, fp8_max).view(m, n)
    return q, scale if group_size is not None else scale.view(m)


def fused_flatten_fp8_group_quant(x, group_size, dtype_quant=None, transpose_scale=False):
    m, n1, n2 = x.shape
    q, scale = _group(x.reshape(m, n1 * n2).float(), group_size, dtype_quant)
    if transpose_scale:  # column-major, strides (1, M)
        scale = scale.t().contiguous().t()
    return q, scale


def fused_silu_mul_fp8_per_tensor_static_quant(inp, inp_scale, dtype_quant=None, silu_convert_to_inp_type=False):
    x = inp.float()
    n = x.shape[-1] // 2
    y = torch.nn.functional.silu(x[..., :n]) * x[..., n:]
    if silu_convert_to_inp_type:
        y = y.to(inp.dtype).float()
    return quantize(y, inp_scale.float().reshape(()), dtype_quant or get_fp8_e4m3_dtype(inp.device))
