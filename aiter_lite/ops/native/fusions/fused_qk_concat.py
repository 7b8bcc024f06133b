"""Q / K concatenation for MLA in plain PyTorch (fp32 math): the reference of
``aiter_lite.ops.triton.fusions.fused_qk_concat``, same names and argument orders."""

from __future__ import annotations

import torch

from aiter_lite.ops.native.fusions._common import pe_heads, rotate_qk


def fused_qk_cat(q1, q2, k1, k2):
    """(cat(q1, q2, -1), cat(k1, k2, -1)) in q1's dtype; k2 of one head serves every head of k1."""
    dt = q1.dtype
    return (torch.cat([q1, q2], -1).to(dt),
            torch.cat([k1, pe_heads(k2, k1.shape[1])], -1).to(dt))


def fused_qk_rope_cat(q_nope, q_pe, k_nope, k_pe, pos, cos, sin, is_neox):
    """(cat(q_nope, rope(q_pe)), cat(k_nope, rope(k_pe))) in q_nope's dtype; the rotated
    parts rounded to their input's dtype first. Every channel of the pe parts rotates."""
    qr, kr = rotate_qk("fused_qk_rope_cat", q_pe, k_pe, cos, sin, pos, None, is_neox)
    return fused_qk_cat(q_nope, qr, k_nope, kr)
