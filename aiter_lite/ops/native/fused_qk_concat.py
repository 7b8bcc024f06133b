"""aiter's older flat module of the MLA q / k concatenations:
``aiter.ops.triton.fused_qk_concat``, where code written against aiter imports
``fused_qk_cat``, ``fused_qk_rope_cat``. The ops themselves live in
``aiter_lite.ops.native.fusions.fused_qk_concat``."""

from aiter_lite.ops.native.fusions.fused_qk_concat import fused_qk_cat, fused_qk_rope_cat

__all__ = ["fused_qk_cat", "fused_qk_rope_cat"]
