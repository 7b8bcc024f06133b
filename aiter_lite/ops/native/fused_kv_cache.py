"""aiter's older flat module of the RoPE + KV-cache fusions:
``aiter.ops.triton.fused_kv_cache``, where code written against aiter imports
``cat_and_cache_mla``, ``fused_qk_rope_reshape_and_cache``, ``fused_qk_rope_cat_and_cache_mla``. The ops themselves live in
``aiter_lite.ops.native.fusions.fused_kv_cache``."""

from aiter_lite.ops.native.fusions.fused_kv_cache import (
    cat_and_cache_mla,
    fused_qk_rope_cat_and_cache_mla,
    fused_qk_rope_cosine_cache_llama,
    fused_qk_rope_reshape_and_cache,
)

__all__ = ["cat_and_cache_mla", "fused_qk_rope_reshape_and_cache", "fused_qk_rope_cat_and_cache_mla",
           "fused_qk_rope_cosine_cache_llama"]
