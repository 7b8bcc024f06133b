"""aiter's older flat module ``aiter.ops.triton.fused_add_rmsnorm_pad``, natively: the reference of
``aiter_lite.ops.triton.fused_add_rmsnorm_pad``. The ops themselves live in
``aiter_lite.ops.native.normalization.fused_add_rmsnorm_pad``."""

from aiter_lite.ops.native.normalization.fused_add_rmsnorm_pad import fused_add_rmsnorm_pad

__all__ = ["fused_add_rmsnorm_pad"]
