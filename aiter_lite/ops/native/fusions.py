"""Attention-block fusions in plain PyTorch (fp32 math): QKV split + RoPE, RoPE + paged
KV-cache write, Q/K concatenation for MLA, and MLA's latent-cache write.

Same names and argument orders as ``aiter_lite.ops.triton.fusions`` (aiter's); the
reference the tests compare against and the "native" backend. Semantics:

* RoPE as ``aiter_lite.ops.native.rope``: cached cos / sin tables ``(rows, F)`` (unit
  dims between allowed), row ``pos[t]`` (+ ``offsets[t]``), NEOX halves (``is_neox``) or
  GPTJ pairs, fp32 math, one rounding to the output's dtype.
* Paged KV caches as vLLM lays them out: ``flash_layout`` key and value
  ``[num_blocks, block_size, kv_heads, head_dim]``; otherwise key
  ``[num_blocks, kv_heads, head_dim // x, block_size, x]`` (``x = key_cache.shape[-1]``)
  and value ``[num_blocks, kv_heads, head_dim, block_size]``. Token ``t`` goes to slot
  ``slot_mapping[t]`` = ``block * block_size + offset``; a negative slot, or a token past
  the end of ``slot_mapping`` (CUDA-graph padding), writes nothing.
* Values written to a cache are scaled as the quant ops scale, ``x * (1 / scale)`` in
  fp32, when a scale is given and ``apply_scale``; fp8 caches are saturated to the
  format's range (never inf), other dtypes rounded.
"""

from __future__ import annotations

import torch

from aiter_lite.ops.native.rope.rope import RotateStyle, rotate
from aiter_lite.ops.triton.quant.dtypes import quant_range

__all__ = [
    "fused_qkv_split_qk_rope", "fused_qk_rope_reshape_and_cache", "fused_qk_cat", "fused_qk_rope_cat",
    "cat_and_cache_mla", "cache_rotary_reuse",
]


def _style(is_neox: bool) -> int:
    return RotateStyle.NEOX if is_neox else RotateStyle.GPTJ


def _rows(table: torch.Tensor) -> torch.Tensor:
    return table.reshape(-1, table.shape[-1])


def _tables(cos, sin, pos, offsets=None):
    """cos / sin rows of the tokens, (T, 1, F): broadcast over heads."""
    p = pos.long() if offsets is None else pos.long() + offsets.long()
    return _rows(cos)[p][:, None, :], _rows(sin)[p][:, None, :]


def cache_rotary_reuse(op: str, head_dim: int, table_width: int) -> bool:
    """The KV-cache and MLA ops take no ``reuse_freqs_front_part``: a table ``head_dim``
    wide is a full one; a narrower one (``head_dim / 2``, or less for a partial rotary
    part) serves both members of each pair."""
    if table_width < 1 or table_width > head_dim or (table_width != head_dim and 2 * table_width > head_dim):
        raise ValueError(f"{op}: cos / sin must be {head_dim} wide (full) or at most {head_dim // 2} "
                         f"(reused for both members of a pair) for a head dim of {head_dim}, got {table_width}")
    return table_width != head_dim


def _to_cache(x: torch.Tensor, scale, apply_scale: bool, dtype: torch.dtype) -> torch.Tensor:
    y = x.float()
    if scale is not None and apply_scale:
        y = y * (1.0 / scale.reshape(()).float())
    if dtype.is_floating_point and dtype.itemsize == 1:
        lo, hi = quant_range(dtype)
        y = y.clamp(lo, hi)
    return y.to(dtype)


def _slots(slot_mapping: torch.Tensor, n_tokens: int):
    """(tokens, slots) of the tokens that write: index < len(slot_mapping), slot >= 0."""
    s = slot_mapping.long()[:n_tokens]
    t = torch.nonzero(s >= 0).flatten()
    return t, s[t]


def fused_qkv_split_qk_rope(qkv, cos, sin, positions, qh, kvh, head_dim, is_neox=True, offsets=None,
                            reuse_freqs_front_part=True, nope_first=False):
    """(q [T, qh, d], k [T, kvh, d], v [T, kvh, d]) from ``qkv [T, (qh + 2 kvh) d]``, q and k rotated."""
    t = qkv.shape[0]
    x = qkv.reshape(t, qh + 2 * kvh, head_dim)
    q, k, v = x[:, :qh], x[:, qh:qh + kvh], x[:, qh + kvh:]
    tables = [_tables(cos, sin, positions, offsets)]
    op = "fused_qkv_split_qk_rope"
    style = _style(is_neox)
    return (rotate(op, q, tables, style, reuse_freqs_front_part, nope_first),
            rotate(op, k, tables, style, reuse_freqs_front_part, nope_first), v.contiguous())


def fused_qk_rope_reshape_and_cache(q, k, v, key_cache, value_cache, slot_mapping, pos, cos, sin, k_scale, v_scale,
                                    is_neox, flash_layout, apply_scale=True, offs=None, q_out=None, k_out=None,
                                    output_zeros=True, zeros_out=None):
    """q and k rotated (into ``q_out`` / ``k_out``, new if None), k (rotated) and v written
    into the caches at their slots; returns (q_out, k_out, key_cache, value_cache) and,
    with ``output_zeros`` or a ``zeros_out``, a zeroed ``zeros_out`` (q's shape) last."""
    op = "fused_qk_rope_reshape_and_cache"
    d = q.shape[-1]
    reuse = cache_rotary_reuse(op, d, cos.shape[-1])
    tables = [_tables(cos, sin, pos, offs)]
    style = _style(is_neox)
    qr = rotate(op, q, tables, style, reuse, False)
    kr = rotate(op, k, tables, style, reuse, False)
    q_out = torch.empty(q.shape, dtype=q.dtype, device=q.device) if q_out is None else q_out
    k_out = torch.empty(k.shape, dtype=k.dtype, device=k.device) if k_out is None else k_out
    q_out.copy_(_to_cache(qr, None, False, q_out.dtype))
    k_out.copy_(_to_cache(kr, None, False, k_out.dtype))
    toks, slots = _slots(slot_mapping, q.shape[0])
    if flash_layout:
        bs = key_cache.shape[1]
        blk, off = slots // bs, slots % bs
        key_cache[blk, off] = _to_cache(kr[toks], k_scale, apply_scale, key_cache.dtype)
        value_cache[blk, off] = _to_cache(v[toks], v_scale, apply_scale, value_cache.dtype)
    else:
        x = key_cache.shape[-1]
        bs = key_cache.shape[3]
        blk, off = slots // bs, slots % bs
        kc = _to_cache(kr[toks], k_scale, apply_scale, key_cache.dtype)  # (n, kvh, d)
        key_cache[blk, :, :, off, :] = kc.reshape(kc.shape[0], kc.shape[1], d // x, x)
        value_cache[blk, :, :, off] = _to_cache(v[toks], v_scale, apply_scale, value_cache.dtype)
    out = (q_out, k_out, key_cache, value_cache)
    if output_zeros or zeros_out is not None:
        zeros_out = torch.empty(q.shape, dtype=q.dtype, device=q.device) if zeros_out is None else zeros_out
        zeros_out.zero_()
        out = (*out, zeros_out)
    return out


def _pe_heads(x: torch.Tensor, heads: int) -> torch.Tensor:
    """A (B, 1, D) part broadcast to ``heads`` heads (MLA's shared rope key)."""
    return x.expand(x.shape[0], heads, x.shape[2]) if x.shape[1] == 1 else x


def fused_qk_cat(q1, q2, k1, k2):
    """(cat(q1, q2, -1), cat(k1, k2, -1)) in q1's dtype; k2 of one head serves every head of k1."""
    dt = q1.dtype
    return (torch.cat([q1, q2], -1).to(dt),
            torch.cat([k1, _pe_heads(k2, k1.shape[1])], -1).to(dt))


def fused_qk_rope_cat(q_nope, q_pe, k_nope, k_pe, pos, cos, sin, is_neox):
    """(cat(q_nope, rope(q_pe)), cat(k_nope, rope(k_pe))) in q_nope's dtype; the rotated
    parts rounded to their input's dtype first. Every channel of the pe parts rotates."""
    op = "fused_qk_rope_cat"
    reuse = cache_rotary_reuse(op, q_pe.shape[-1], cos.shape[-1])
    tables = [_tables(cos, sin, pos)]
    style = _style(is_neox)
    qr = rotate(op, q_pe, tables, style, reuse, False)
    kr = rotate(op, k_pe, tables, style, reuse, False)
    return fused_qk_cat(q_nope, qr, k_nope, kr)


def cat_and_cache_mla(k_nope, k_pe, kv_cache, slot_mapping, k_scale, apply_scale=True):
    """cat(k_nope, k_pe) of each token (scaled, saturated for fp8) written at its slot of
    ``kv_cache`` ([slots, kv_heads, d] or [num_blocks, block_size, kv_heads, d]); inputs
    [B, kv_heads, d] or [B, d] (one head), k_pe of one head shared by every head."""
    kn = k_nope if k_nope.dim() == 3 else k_nope[:, None, :]
    kp = k_pe if k_pe.dim() == 3 else k_pe[:, None, :]
    kv = torch.cat([kn, _pe_heads(kp, kn.shape[1])], -1)
    toks, slots = _slots(slot_mapping, kn.shape[0])
    flat = kv_cache.view(-1, *kv_cache.shape[-2:]) if kv_cache.dim() == 4 else kv_cache
    flat[slots] = _to_cache(kv[toks], k_scale, apply_scale, kv_cache.dtype)
    return None
