"""RMSNorm and LayerNorm in plain PyTorch (fp32 math), also the "native" backend."""

from aiter_lite.ops.native.normalization import fused_add_rmsnorm_pad, layernorm, rmsnorm  # noqa: F401
