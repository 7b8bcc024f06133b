"""RMSNorm and LayerNorm in plain PyTorch (fp32 math), also the "native" backend."""

from aiter_lite.ops.native.normalization import layernorm, rmsnorm  # noqa: F401
