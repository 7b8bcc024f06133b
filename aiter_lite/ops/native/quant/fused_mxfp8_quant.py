"""aiter's ``fused_mxfp8_quant`` forms in plain PyTorch: the reference of
``aiter_lite.ops.triton.quant.fused_mxfp8_quant``, defined in ``aiter_lite.ops.native.quant.mx_quant``."""

from aiter_lite.ops.native.quant.mx_quant import fused_flatten_mxfp8_quant, fused_rms_mxfp8_quant

__all__ = ["fused_rms_mxfp8_quant", "fused_flatten_mxfp8_quant"]
