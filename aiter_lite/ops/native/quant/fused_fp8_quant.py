"""aiter's ``fused_fp8_quant`` forms in plain PyTorch (fp32 math): RMSNorm of a row (after
an optional residual add), quantized per group of columns or by a static scale, and an
optional second input normalized alongside. The reference of
``aiter_lite.ops.triton.quant.fused_fp8_quant``; same names and signatures.
"""

from __future__ import annotations

import torch

from aiter_lite.ops.native.quant.quant import per_token_group_quant, quantize
from aiter_lite.spec.quant import GROUP_EPS, get_fp8_e4m3_dtype, get_fp8_min_max_bounds

__all__ = ["fused_rms_fp8_group_quant", "fused_rms_fp8_per_tensor_static_quant", "get_fp8_min_max_bounds"]


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
    dtype = dtype_quant or get_fp8_e4m3_dtype(inp1.device)
    m, n = inp1.shape
    groups = -(-n // group_size)
    q = torch.empty((m, n), dtype=dtype, device=inp1.device)
    scale = torch.empty((m, groups), dtype=torch.float32, device=inp1.device)
    per_token_group_quant(q, y, scale, group_size, GROUP_EPS)
    if transpose_scale:  # column-major bytes, presented (M, G): strided, or re-viewed contiguous
        scale = scale.t().contiguous()
        scale = scale.t() if is_x_scale_strided else scale.view(m, groups)
    if gemm_out_zero_init is not None:
        gemm_out_zero_init.zero_()
    return (q, scale), out1, out2, out_res1


def fused_rms_fp8_per_tensor_static_quant(inp1, inp1_weight, inp1_epsilon, inp1_scale, inp2=None, inp2_weight=None,
                                          inp2_epsilon=None, dtype_quant=None, res1=None,
                                          output_unquantized_inp1=False, rmsnorm_convert_to_inp1_type=False):
    y, out1, out2, out_res1 = _norms(inp1, inp1_weight, inp1_epsilon, inp2, inp2_weight, inp2_epsilon, res1,
                                     output_unquantized_inp1)
    if rmsnorm_convert_to_inp1_type:
        y = y.to(inp1.dtype).float()
    dtype = dtype_quant or get_fp8_e4m3_dtype(inp1.device)
    return quantize(y, inp1_scale.float().reshape(()), dtype), out1, out2, out_res1
