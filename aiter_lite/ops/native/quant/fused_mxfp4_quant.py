"""aiter's ``fused_mxfp4_quant`` forms in plain PyTorch: the reference of
``aiter_lite.ops.triton.quant.fused_mxfp4_quant``, defined in ``aiter_lite.ops.native.quant.mx_quant``."""

from aiter_lite.ops.native.quant.mx_quant import fused_flatten_mxfp4_quant, fused_rms_mxfp4_quant

__all__ = ["fused_rms_mxfp4_quant", "fused_flatten_mxfp4_quant"]
