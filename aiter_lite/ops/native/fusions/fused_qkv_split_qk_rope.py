"""QKV split + RoPE in plain PyTorch (fp32 math): the reference of
``aiter_lite.ops.triton.fusions.fused_qkv_split_qk_rope``, same name and argument order."""

from __future__ import annotations

from aiter_lite.ops.native.fusions._common import style, tables
from aiter_lite.ops.native.rope.rope import _check_tables, rotate


def fused_qkv_split_qk_rope(qkv, cos, sin, positions, qh, kvh, head_dim, is_neox=True, offsets=None,
                            reuse_freqs_front_part=True, nope_first=False):
    """(q [T, qh, d], k [T, kvh, d], v [T, kvh, d]) from ``qkv [T, (qh + 2 kvh) d]``, q and k rotated."""
    _check_tables("fused_qkv_split_qk_rope", cos=cos, sin=sin)
    t = qkv.shape[0]
    x = qkv.reshape(t, qh + 2 * kvh, head_dim)
    q, k, v = x[:, :qh], x[:, qh:qh + kvh], x[:, qh + kvh:]
    tabs = tables(cos, sin, positions, offsets)
    op = "fused_qkv_split_qk_rope"
    s = style(is_neox)
    return (rotate(op, q, tabs, s, reuse_freqs_front_part, nope_first),
            rotate(op, k, tabs, s, reuse_freqs_front_part, nope_first), v.contiguous())
