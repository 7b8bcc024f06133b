"""aiter's older flat module of the fused norm / activation fp8 quant forms:
``aiter.ops.triton.fused_fp8_quant``, where vLLM and SGLang import them. The ops themselves
live in ``aiter_lite.ops.triton.quant.fused_fp8_quant``."""

from aiter_lite.ops.triton.quant.fused_fp8_quant import *  # noqa: F401,F403
from aiter_lite.ops.triton.quant.fused_fp8_quant import __all__  # noqa: F401
