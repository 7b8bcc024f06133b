"""aiter's older flat module ``aiter.ops.triton.fused_fp8_quant``, natively: the reference of
``aiter_lite.ops.triton.fused_fp8_quant``. The ops themselves live in
``aiter_lite.ops.native.quant.fused_fp8_quant``."""

from aiter_lite.ops.native.quant.fused_fp8_quant import (
    fused_flatten_fp8_group_quant,
    fused_reduce_act_mul_fp8_group_quant,
    fused_reduce_rms_fp8_group_quant,
    fused_rms_fp8_group_quant,
    fused_rms_fp8_per_tensor_static_quant,
    fused_rms_gated_fp8_group_quant,
    fused_silu_mul_fp8_per_tensor_static_quant,
    get_fp8_min_max_bounds,
)

__all__ = ["fused_flatten_fp8_group_quant", "fused_reduce_act_mul_fp8_group_quant", "fused_reduce_rms_fp8_group_quant",
           "fused_rms_fp8_group_quant", "fused_rms_fp8_per_tensor_static_quant", "fused_rms_gated_fp8_group_quant",
           "fused_silu_mul_fp8_per_tensor_static_quant", "get_fp8_min_max_bounds"]
