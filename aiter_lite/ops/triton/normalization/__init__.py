"""RMSNorm and LayerNorm on the Triton backend."""

from aiter_lite.ops.triton.normalization import fused_add_rmsnorm_pad, layernorm, rmsnorm  # noqa: F401
