"""aiter's ``fused_mxfp4_quant`` forms on the Triton backend: RMSNorm (with a residual add and
a second input normalized alongside) or a flatten, fused with MXFP4 quantization. Defined,
with the rest of the MX / NV family, in ``aiter_lite.ops.triton.quant.mx_quant`` (its
module doc has the formats, layouts and where aiter's kernels differ)."""

from aiter_lite.ops.triton.quant.mx_quant import fused_flatten_mxfp4_quant, fused_rms_mxfp4_quant

__all__ = ["fused_rms_mxfp4_quant", "fused_flatten_mxfp4_quant"]
