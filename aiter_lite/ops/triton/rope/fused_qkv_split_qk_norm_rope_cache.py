"""aiter's module of the QKV split + QK-norm + RoPE + KV-cache write:
``aiter.ops.triton.rope.fused_qkv_split_qk_norm_rope_cache``, where code written against aiter
imports ``fused_qkv_split_qk_norm_rope_cache`` and ``infer_rope_cache_triton_block_t``. The op
lives in ``aiter_lite.ops.triton.fusions.fused_qkv_split_qk_norm_rope_cache``."""

from aiter_lite.ops.triton.fusions.fused_qkv_split_qk_norm_rope_cache import (
    fused_qkv_split_qk_norm_rope_cache,
    infer_rope_cache_triton_block_t,
)

__all__ = ["fused_qkv_split_qk_norm_rope_cache", "infer_rope_cache_triton_block_t"]
