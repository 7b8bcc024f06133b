"""aiter's older flat module ``aiter.ops.triton.fused_fp8_quant``, natively: the reference of
``aiter_lite.ops.triton.fused_fp8_quant``. The ops themselves live in
``aiter_lite.ops.native.quant.fused_fp8_quant``."""

from aiter_lite.ops.native.quant.fused_fp8_quant import *  # noqa: F401,F403
from aiter_lite.ops.native.quant.fused_fp8_quant import __all__  # noqa: F401
