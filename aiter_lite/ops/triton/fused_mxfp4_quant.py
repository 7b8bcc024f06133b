"""aiter's older flat module of the fused MXFP4 forms: ``aiter.ops.triton.fused_mxfp4_quant``,
where SGLang imports them. The ops themselves live in ``aiter_lite.ops.triton.quant.mx_quant``."""

from aiter_lite.ops.triton.quant.fused_mxfp4_quant import fused_flatten_mxfp4_quant, fused_rms_mxfp4_quant

__all__ = ["fused_flatten_mxfp4_quant", "fused_rms_mxfp4_quant"]
