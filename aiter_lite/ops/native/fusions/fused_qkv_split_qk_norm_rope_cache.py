"""QKV split + per-head RMSNorm of Q and K + RoPE + paged KV-cache write in plain PyTorch
(fp32 math): the reference of ``aiter_lite.ops.triton.fusions.fused_qkv_split_qk_norm_rope_cache``,
same name and argument order (aiter's). The norm's weight is an offset, ``x * rstd * (1 + w)``
(aiter's rule), its output rounded to qkv's dtype before RoPE; the caches get the rotated K
and V from fp32, scaled and saturated as ``fused_kv_cache``'s reference writes them."""

from __future__ import annotations

import torch

from aiter_lite.ops.native.fusions._common import style, tables
from aiter_lite.ops.native.fusions.fused_kv_cache import _slots, _to_cache
from aiter_lite.ops.native.rope.rope import _check_tables, rotate


def _split(qkv, qh, kvh, d, gated, layout):
    t = qkv.shape[0]
    gate = None
    if gated:
        qg = qkv[:, :2 * qh * d]
        if layout == "interleaved":
            q, gate = qg.reshape(t, qh, 2, d).unbind(2)
        else:
            q, gate = qg[:, :qh * d].reshape(t, qh, d), qg[:, qh * d:].reshape(t, qh, d)
        rest = qkv[:, 2 * qh * d:]
    else:
        q, rest = qkv[:, :qh * d].reshape(t, qh, d), qkv[:, qh * d:]
    return q, gate, rest[:, :kvh * d].reshape(t, kvh, d), rest[:, kvh * d:].reshape(t, kvh, d)


def fused_qkv_split_qk_norm_rope_cache(qkv, q_weight, k_weight, cos, sin, positions, key_cache, value_cache,
                                       slot_mapping, qh, kvh, head_dim, is_neox=True, offsets=None,
                                       reuse_freqs_front_part=True, attn_output_gate=False, k_scale=None,
                                       v_scale=None, eps=1e-05, gated_qkv_layout="interleaved",
                                       kv_cache_layout="HND"):
    """(q, k, v) or (q, gate, k, v), and k, v written into the caches at their slots."""
    op = "fused_qkv_split_qk_norm_rope_cache"
    _check_tables(op, cos=cos, sin=sin)
    q, gate, k, v = _split(qkv, qh, kvh, head_dim, attn_output_gate, gated_qkv_layout)

    def norm(x, w):
        xf = x.float()
        y = xf * torch.rsqrt(xf.square().mean(-1, keepdim=True) + eps) * (1.0 + w.float())
        return y.to(x.dtype).float()

    tabs, s = tables(cos, sin, positions, offsets), style(is_neox)
    qr = rotate(op, norm(q, q_weight), tabs, s, reuse_freqs_front_part, False)
    kr = rotate(op, norm(k, k_weight), tabs, s, reuse_freqs_front_part, False)
    toks, slots = _slots(slot_mapping, qkv.shape[0])
    hnd = kv_cache_layout.upper() == "HND"
    bs = key_cache.shape[2] if hnd else key_cache.shape[1]
    blk, off = slots // bs, slots % bs
    kc = _to_cache(kr[toks], k_scale, True, key_cache.dtype)
    vc = _to_cache(v[toks], v_scale, True, value_cache.dtype)
    if hnd:
        key_cache[blk, :, off] = kc
        value_cache[blk, :, off] = vc
    else:
        key_cache[blk, off] = kc
        value_cache[blk, off] = vc
    q, k = qr.to(qkv.dtype), kr.to(qkv.dtype)
    return (q, gate.contiguous(), k, v.contiguous()) if attn_output_gate else (q, k, v.contiguous())
