"""RMSNorm and LayerNorm on the Triton backend."""

from aiter_lite.ops.triton.normalization import layernorm, rmsnorm  # noqa: F401
