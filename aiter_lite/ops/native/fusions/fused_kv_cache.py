"""RoPE + paged KV-cache write and MLA's latent-cache write in plain PyTorch (fp32 math):
the reference of ``aiter_lite.ops.triton.fusions.fused_kv_cache``, same names and argument
orders (aiter's). RoPE as :mod:`aiter_lite.ops.native.fusions._common` says; caches:

* Paged KV caches as vLLM lays them out: ``flash_layout`` key and value
  ``[num_blocks, block_size, kv_heads, head_dim]``; otherwise key
  ``[num_blocks, kv_heads, head_dim // x, block_size, x]`` (``x = key_cache.shape[-1]``)
  and value ``[num_blocks, kv_heads, head_dim, block_size]`` (or aiter's shuffled
  ``[num_blocks, kv_heads, block_size // x, head_dim, x]``). Token ``t`` goes to slot
  ``slot_mapping[t]`` = ``block * block_size + offset``; a negative slot, or a token past
  the end of ``slot_mapping`` (CUDA-graph padding), writes nothing.
* MLA's latent cache: ``[slots, kv_heads, d]``, ``[num_blocks, block_size, kv_heads, d]``,
  or aiter's preshuffled ``[num_blocks, kv_heads, block_size, d]`` (``cat_and_cache_mla``).
* Values written to a cache are scaled as the quant ops scale, ``x * (1 / scale)`` in
  fp32, when a scale is given and ``apply_scale``; fp8 caches are saturated to the
  format's range (never inf), other dtypes rounded.
"""

from __future__ import annotations

import torch

from aiter_lite.ops.native.fusions._common import pe_heads, rotate_qk
from aiter_lite.spec.quant import quant_range


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


def fused_qk_rope_reshape_and_cache(q, k, v, key_cache, value_cache, slot_mapping, pos, cos, sin, k_scale, v_scale,
                                    is_neox, flash_layout, apply_scale=True, offs=None, q_out=None, k_out=None,
                                    output_zeros=True, zeros_out=None, upcast_operand=False):
    """q and k rotated (into ``q_out`` / ``k_out``, new if None), k (rotated) and v written
    into the caches at their slots; returns (q_out, k_out, key_cache, value_cache) and,
    with ``output_zeros`` or a ``zeros_out``, a zeroed ``zeros_out`` (q's shape) last."""
    op = "fused_qk_rope_reshape_and_cache"
    d = q.shape[-1]
    qr, kr = rotate_qk(op, q, k, cos, sin, pos, offs, is_neox)
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
        vc = _to_cache(v[toks], v_scale, apply_scale, value_cache.dtype)
        if value_cache.dim() == 5:  # aiter's shuffled [num_blocks, kv_heads, block_size // x, head_dim, x]
            value_cache[blk, :, off // x, :, off % x] = vc
        else:
            value_cache[blk, :, :, off] = vc
    out = (q_out, k_out, key_cache, value_cache)
    if output_zeros or zeros_out is not None:
        zeros_out = torch.empty(q.shape, dtype=q.dtype, device=q.device) if zeros_out is None else zeros_out
        zeros_out.zero_()
        out = (*out, zeros_out)
    return out


def fused_qk_rope_cosine_cache_llama(q, k, v, key_cache, value_cache, slot_mapping, pos, cos, sin, k_scale, v_scale,
                                     is_neox, flash_layout, apply_scale=True, offs=None, q_out=None):
    """q and k rotated (q into ``q_out``, new if None); token t's rotated k and its v written
    into row t of the caches at offset ``slot_mapping[t]`` (a slot outside [0, block_size):
    nothing); returns (q_out, key_cache, value_cache)."""
    op = "fused_qk_rope_cosine_cache_llama"
    d = q.shape[-1]
    qr, kr = rotate_qk(op, q, k, cos, sin, pos, offs, is_neox)
    q_out = torch.empty(q.shape, dtype=q.dtype, device=q.device) if q_out is None else q_out
    q_out.copy_(_to_cache(qr, None, False, q_out.dtype))
    bs = key_cache.shape[1] if flash_layout else key_cache.shape[3]
    s = slot_mapping.long()
    toks = torch.nonzero((s >= 0) & (s < bs)).flatten()
    off = s[toks]
    kc = _to_cache(kr[toks], k_scale, apply_scale, key_cache.dtype)
    vc = _to_cache(v[toks], v_scale, apply_scale, value_cache.dtype)
    if flash_layout:
        key_cache[toks, off] = kc
        value_cache[toks, off] = vc
    else:
        x = key_cache.shape[-1]
        key_cache[toks, :, :, off, :] = kc.reshape(kc.shape[0], kc.shape[1], d // x, x)
        value_cache[toks, :, :, off] = vc
    return q_out, key_cache, value_cache


def cat_and_cache_mla(k_nope, k_pe, kv_cache, slot_mapping, k_scale, apply_scale=True, shuffled_kv_cache=False):
    """cat(k_nope, k_pe) of each token (scaled, saturated for fp8) written at its slot of
    ``kv_cache`` ([slots, kv_heads, d] or [num_blocks, block_size, kv_heads, d]); inputs
    [B, kv_heads, d] or [B, d] (one head), k_pe of one head shared by every head.

    ``shuffled_kv_cache``: aiter's preshuffled cache [num_blocks, kv_heads, block_size, d],
    each (block, head)'s plane flat: k_nope's parts of the block's tokens, then k_pe's,
    each viewed (block_size / 16, part width / E, 16, E) for E = 16 bytes of the cache's
    dtype: token o's chunk j at [o // 16, j, o % 16]."""
    kn = k_nope if k_nope.dim() == 3 else k_nope[:, None, :]
    kp = k_pe if k_pe.dim() == 3 else k_pe[:, None, :]
    kv = torch.cat([kn, pe_heads(kp, kn.shape[1])], -1)
    toks, slots = _slots(slot_mapping, kn.shape[0])
    values = _to_cache(kv[toks], k_scale, apply_scale, kv_cache.dtype)
    if shuffled_kv_cache:
        nb, kh, bs, d = kv_cache.shape
        e, d1 = 16 // kv_cache.element_size(), kn.shape[2]
        plane = kv_cache.view(torch.uint8 if e == 16 else torch.int16).view(nb, kh, bs * d)  # bits: fp8 indexing
        blk, off = slots // bs, slots % bs
        for lo, hi in ((0, d1), (d1, d)):
            part = plane[..., bs * lo:bs * hi].view(nb, kh, bs // 16, (hi - lo) // e, 16, e)
            part[blk, :, off // 16, :, off % 16, :] = values[..., lo:hi].view(plane.dtype).reshape(
                len(slots), kh, (hi - lo) // e, e)
        return None
    flat = kv_cache.view(-1, *kv_cache.shape[-2:]) if kv_cache.dim() == 4 else kv_cache
    flat[slots] = values
    return None


def fused_qk_rope_cat_and_cache_mla(q_nope, q_pe, k_nope, k_pe, kv_cache, slot_mapping, pos, cos, sin, k_scale,
                                    is_neox, num_decode_toks_for_zeros=0, apply_scale=True, q_out=None,
                                    decode_q_pe_out=None, k_pe_out=None, q_out_dtype=None, shuffled_kv_cache=False,
                                    upcast_operand=False):
    """q_out = cat(q_nope, rope(q_pe)) (q_out_dtype, fp8 saturated); the first B tokens of
    k: cat(k_nope, rope(k_pe)) into the cache at their slots, slot_mapping's further tokens
    unrotated; decode_q_pe_out = rope(q_pe) of the first num_decode_toks_for_zeros tokens;
    k_pe_out = k_pe as written for slot_mapping's tokens; zeros (N, QH, D1). The rotated
    parts rounded to their input's dtype first unless ``upcast_operand``."""
    b, qh, d1 = q_nope.shape
    n_slots = slot_mapping.shape[0]
    op = "fused_qk_rope_cat_and_cache_mla"
    qr, kr = _rotations(op, q_pe, k_pe[:b], cos, sin, pos, is_neox, upcast_operand)
    out_dtype = q_out_dtype or q_nope.dtype
    q_val = _to_cache(torch.cat([q_nope.float(), qr], -1), None, False, out_dtype)
    q_out = q_val if q_out is None else q_out.copy_(q_val)
    n = num_decode_toks_for_zeros
    dq = qr[:n].to(q_nope.dtype)
    decode_q_pe_out = dq if decode_q_pe_out is None else decode_q_pe_out.copy_(dq)
    k_written = torch.cat([kr, k_pe[b:n_slots].float()], 0)
    if k_pe_out is None:
        k_pe_out = torch.empty_like(k_pe)
    k_pe_out[:n_slots] = k_written.to(k_pe_out.dtype)
    kv = torch.cat([k_nope[:n_slots].float(), k_written], -1)
    cat_and_cache_mla(kv[..., :d1], kv[..., d1:], kv_cache, slot_mapping, k_scale, apply_scale, shuffled_kv_cache)
    return q_out, decode_q_pe_out, k_pe_out, torch.zeros((n, qh, d1), dtype=q_nope.dtype, device=q_nope.device)


def _rotations(op, q_pe, k_pe, cos, sin, pos, is_neox, upcast):
    """rope(q_pe), rope(k_pe) in fp32: rounded to their dtype first unless ``upcast``."""
    if upcast:
        qr, kr = rotate_qk(op, q_pe.float(), k_pe.float(), cos.float(), sin.float(), pos, None, is_neox)
        return qr, kr
    qr, kr = rotate_qk(op, q_pe, k_pe, cos, sin, pos, None, is_neox)
    return qr.float(), kr.float()


def _divided(x: torch.Tensor, scale, dtype: torch.dtype) -> torch.Tensor:
    """x / scale in fp32 (vLLM's cache writes divide), saturated for fp8, in ``dtype``."""
    y = x.float() if scale is None else x.float() / scale.reshape(()).float()
    if dtype.is_floating_point and dtype.itemsize == 1:
        y = y.clamp(*quant_range(dtype))
    return y.to(dtype)


def kv_cache_write(key, value, key_cache, value_cache, slot_mapping, k_scale=None, v_scale=None, flash_layout=True):
    """key and value (divided by their scales) written into the paged caches at their slots."""
    toks, slots = _slots(slot_mapping, slot_mapping.shape[0])
    k = _divided(key[toks], k_scale, key_cache.dtype)
    v = _divided(value[toks], v_scale, value_cache.dtype)
    if flash_layout:
        bs = key_cache.shape[1]
        key_cache[slots // bs, slots % bs] = k
        value_cache[slots // bs, slots % bs] = v
    else:
        x, bs = key_cache.shape[-1], key_cache.shape[3]
        key_cache[slots // bs, :, :, slots % bs, :] = k.reshape(k.shape[0], k.shape[1], k.shape[2] // x, x)
        value_cache[slots // bs, :, :, slots % bs] = v
    return None


def convert_kv_cache(output, input, scale=1.0):
    """An fp8 output: input / scale, saturated; else the fp8 input times scale. The scale
    lives on input's device: CUDA divides by a CPU scalar as a multiply by its reciprocal."""
    if output.dtype.itemsize == 1:
        output.copy_(_divided(input, torch.tensor(scale, dtype=torch.float32, device=input.device), output.dtype))
    else:
        output.copy_((input.float() * torch.tensor(scale, dtype=torch.float32)).to(output.dtype))
    return None
