"""aiter's older flat module ``aiter.ops.triton.fused_mxfp4_quant``, natively: the reference of
``aiter_lite.ops.triton.fused_mxfp4_quant``. The ops themselves live in
``aiter_lite.ops.native.quant.fused_mxfp4_quant``."""

from aiter_lite.ops.native.quant.fused_mxfp4_quant import fused_flatten_mxfp4_quant, fused_rms_mxfp4_quant

__all__ = ["fused_flatten_mxfp4_quant", "fused_rms_mxfp4_quant"]
