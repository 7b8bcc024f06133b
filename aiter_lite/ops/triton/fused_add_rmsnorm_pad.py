"""aiter's older flat module of the padded fused add + RMSNorm:
``aiter.ops.triton.fused_add_rmsnorm_pad``, where vLLM imports ``fused_add_rmsnorm_pad``. The op
itself lives in ``aiter_lite.ops.triton.normalization.fused_add_rmsnorm_pad``."""

from aiter_lite.ops.triton.normalization.fused_add_rmsnorm_pad import fused_add_rmsnorm_pad

__all__ = ["fused_add_rmsnorm_pad"]
