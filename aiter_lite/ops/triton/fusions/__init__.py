"""Attention-block and MLP fusions on the Triton backend (aiter's names): QKV split + RoPE,
RoPE + paged KV-cache write, Q/K concatenation for MLA, MLA's latent-cache write, SwiGLU's
clamp + gated activation (+ weights, + fp8 group quant)."""

from aiter_lite.ops.triton.fusions.fused_clamp_act_mul import fused_clamp_act_mul
from aiter_lite.ops.triton.fusions.fused_mul_add import fused_mul_add
from aiter_lite.ops.triton.fusions.fused_routing_from_topk import fused_routing_from_topk
from aiter_lite.ops.triton.fusions.fused_kv_cache import (
    cat_and_cache_mla,
    convert_kv_cache,
    fused_qk_rope_cat_and_cache_mla,
    fused_qk_rope_cosine_cache_llama,
    fused_qk_rope_reshape_and_cache,
    kv_cache_write,
)
from aiter_lite.ops.triton.fusions.fused_qk_concat import fused_qk_cat, fused_qk_rope_cat
from aiter_lite.ops.triton.fusions.fused_bmm_rope_kv_cache import (
    fused_bf16_bmm_rope_cat_and_cache_mla,
    fused_fp4_bmm_rope_cat_and_cache_mla,
    fused_fp8_bmm_rope_cat_and_cache_mla,
)
from aiter_lite.ops.triton.fusions.fused_reduce_qk_norm_rope_swa_write import fused_reduce_qk_norm_rope_swa_write
from aiter_lite.ops.triton.fusions.fused_qkv_split_qk_norm_rope_cache import fused_qkv_split_qk_norm_rope_cache
from aiter_lite.ops.triton.fusions.fused_qkv_split_qk_rope import fused_qkv_split_qk_rope

__all__ = ["fused_qkv_split_qk_rope", "fused_qk_rope_reshape_and_cache", "fused_qk_cat", "fused_qk_rope_cat",
           "cat_and_cache_mla", "fused_clamp_act_mul", "fused_mul_add", "fused_routing_from_topk",
           "fused_qk_rope_cat_and_cache_mla", "fused_qkv_split_qk_norm_rope_cache", "fused_qk_rope_cosine_cache_llama",
           "fused_reduce_qk_norm_rope_swa_write",
           "fused_fp8_bmm_rope_cat_and_cache_mla", "fused_bf16_bmm_rope_cat_and_cache_mla",
           "fused_fp4_bmm_rope_cat_and_cache_mla", "kv_cache_write", "convert_kv_cache"]
