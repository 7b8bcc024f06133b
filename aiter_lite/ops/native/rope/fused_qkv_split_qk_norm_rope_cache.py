"""aiter's module of the QKV split + QK-norm + RoPE + KV-cache write:
``aiter.ops.triton.rope.fused_qkv_split_qk_norm_rope_cache``. The reference lives in
``aiter_lite.ops.native.fusions.fused_qkv_split_qk_norm_rope_cache``."""

from aiter_lite.ops.native.fusions.fused_qkv_split_qk_norm_rope_cache import fused_qkv_split_qk_norm_rope_cache

__all__ = ["fused_qkv_split_qk_norm_rope_cache"]
