"""aiter's ``fused_mxfp8_quant`` forms on the Triton backend: RMSNorm or a flatten fused with
MXFP8 quantization. Defined, with the rest of the MX / NV family, in
``aiter_lite.ops.triton.quant.mx_quant`` (its module doc has the formats and layouts)."""

from aiter_lite.ops.triton.quant.mx_quant import fused_flatten_mxfp8_quant, fused_rms_mxfp8_quant

__all__ = ["fused_rms_mxfp8_quant", "fused_flatten_mxfp8_quant"]
