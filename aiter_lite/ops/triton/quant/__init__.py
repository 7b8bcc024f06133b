"""fp8 / int8 activation quantization on the Triton backend."""

from aiter_lite.ops.triton.quant.dtypes import (  # noqa: F401
    QUANT_DTYPES,
    get_fp8_e4m3_dtype,
    quant_range,
    supported_quant_dtypes,
)
from aiter_lite.ops.triton.quant.quant import (  # noqa: F401
    dynamic_per_tensor_quant_fp8_i8,
    dynamic_per_token_quant_fp8_i8,
    per_token_group_quant,
    per_token_group_quant_fp8,
    per_token_group_quant_int8,
    scaled_fp8_quant,
    static_per_tensor_quant_fp8_i8,
)
