"""aiter's module of the MLA cache write: ``aiter.ops.triton.kv_cache``, where code written
against aiter imports ``cat_and_cache_mla``. The ops themselves live in
``aiter_lite.ops.native.fusions.fused_kv_cache``."""

from aiter_lite.ops.native.fusions.fused_kv_cache import cat_and_cache_mla

__all__ = ["cat_and_cache_mla"]
