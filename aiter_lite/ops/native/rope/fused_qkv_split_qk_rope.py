"""aiter's module of the QKV split + RoPE: ``aiter.ops.triton.rope.fused_qkv_split_qk_rope``,
where code written against aiter imports ``fused_qkv_split_qk_rope``. The ops themselves
live in ``aiter_lite.ops.native.fusions.fused_qkv_split_qk_rope``."""

from aiter_lite.ops.native.fusions.fused_qkv_split_qk_rope import fused_qkv_split_qk_rope

__all__ = ["fused_qkv_split_qk_rope"]
