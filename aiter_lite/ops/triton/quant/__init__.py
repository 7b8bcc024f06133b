"""fp8 / int8 activation quantization on the Triton backend, alone and fused with a norm or a gated
activation."""

from aiter_lite.ops.triton.quant.dtypes import (  # noqa: F401
    QUANT_DTYPES,
    get_fp8_e4m3_dtype,
    quant_range,
    supported_quant_dtypes,
)
from aiter_lite.ops.triton.quant.quant import (  # noqa: F401
    dynamic_per_tensor_quant_fp8_i8,
    dynamic_per_token_int8_azp_quant,
    dynamic_per_token_quant_fp8_i8,
    per_token_group_quant,
    per_token_group_quant_fp8,
    per_token_group_quant_int8,
    scaled_fp8_quant,
    static_per_tensor_int8_azp_quant,
    static_per_tensor_quant_fp8_i8,
)
from aiter_lite.ops.triton.quant.act_quant import (  # noqa: F401
    act_mul_and_fp8_group_quant,
    act_mul_and_fp8_quant,
    silu_and_mul_quant,
)
from aiter_lite.ops.triton.quant.norm_quant import (  # noqa: F401
    fused_add_rms_norm_static_fp8_quant,
    layernorm2d_fwd_with_add_dynamicquant,
    layernorm2d_fwd_with_add_smoothquant,
    layernorm2d_fwd_with_dynamicquant,
    layernorm2d_fwd_with_smoothquant,
    rms_norm_dynamic_per_token_quant,
    rms_norm_static_fp8_quant,
    rmsnorm2d_fwd_with_add_dynamicquant,
    rmsnorm2d_fwd_with_add_smoothquant,
    rmsnorm2d_fwd_with_dynamicquant,
    rmsnorm2d_fwd_with_smoothquant,
)
from aiter_lite.ops.triton.quant.fused_fp8_quant import (  # noqa: F401
    fused_flatten_fp8_group_quant,
    fused_reduce_act_mul_fp8_group_quant,
    fused_reduce_rms_fp8_group_quant,
    fused_rms_fp8_group_quant,
    fused_rms_fp8_per_tensor_static_quant,
    fused_rms_gated_fp8_group_quant,
    fused_silu_mul_fp8_per_tensor_static_quant,
    get_fp8_min_max_bounds,
)
from aiter_lite.ops.triton.quant.mx_quant import (  # noqa: F401
    dynamic_mxfp4_quant,
    dynamic_mxfp8_quant,
    dynamic_nvfp4_quant,
    fused_flatten_mxfp4_quant,
    fused_flatten_mxfp8_quant,
    fused_rms_mxfp4_quant,
    fused_rms_mxfp8_quant,
)
