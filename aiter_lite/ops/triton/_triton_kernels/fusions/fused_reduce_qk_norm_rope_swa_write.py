"""After an attention block's Q / KV projection (DeepSeek-V4-style MQA with a sliding-window
cache): Q's split-K partial sums reduced, each Q head RMS-normalized (times a weight) and its
last R channels rotated; the KV row normalized and rotated the same way in place, and
optionally written into the sliding-window cache at ``slot, position % win``.

A program takes BLOCK_T tokens and BLOCK_H Q heads, or (the last head block of each token
block) BLOCK_T KV rows: with the window cache, row ``write_indices[t]`` (negative: none),
else row t. A head's RMS is over all D channels in fp32; the normalized values are rotated
from fp32 (the first D - R channels stored as they are) and rounded once at each store.
"""

import triton
import triton.language as tl

from aiter_lite.ops.triton._triton_kernels.fusions.fused_kv_cache import _store_chans, _store_pairs
from aiter_lite.ops.triton._triton_kernels.rope.rope import _load_part, _pair_cols, _tables, _turn


@triton.jit
def _norm_rope_rows(x_ptr, sx_s, n_splitk, base, th_mask, w_ptr, row, valid, n_rows, cos_ptr, sin_ptr, stride_t_r,
                    stride_t_f, eps, head_dim, NOPE: tl.constexpr, HAS_W: tl.constexpr, IS_NEOX: tl.constexpr,
                    HALF: tl.constexpr, BLOCK_HALF: tl.constexpr, BLOCK_NOPE: tl.constexpr):
    """The (BLOCK_T, BLOCK_H) heads at ``base`` (summed over ``n_splitk`` slices ``sx_s``
    apart) normalized, the nope part and the rotated pairs, fp32: (nope, o1, o2)."""
    c = tl.arange(0, BLOCK_NOPE)
    cm = c < NOPE
    m = th_mask[:, :, None] & cm[None, None, :]
    xn = tl.zeros([base.shape[0], base.shape[1], BLOCK_NOPE], tl.float32)
    x1 = tl.zeros([base.shape[0], base.shape[1], BLOCK_HALF], tl.float32)
    x2 = tl.zeros([base.shape[0], base.shape[1], BLOCK_HALF], tl.float32)
    for s in range(n_splitk):
        b = base + s * sx_s
        xn += tl.load(b[:, :, None] + c[None, None, :], mask=m, other=0.0).to(tl.float32)
        p1, p2 = _load_part(b, NOPE, 1, th_mask, HALF, BLOCK_HALF, IS_NEOX)
        x1 += p1
        x2 += p2
    ss = tl.sum(xn * xn, axis=2) + tl.sum(x1 * x1, axis=2) + tl.sum(x2 * x2, axis=2)
    rstd = tl.rsqrt(ss / head_dim + eps)[:, :, None]
    xn, x1, x2 = xn * rstd, x1 * rstd, x2 * rstd
    if HAS_W:
        j = tl.arange(0, BLOCK_HALF)
        a, b2 = _pair_cols(j, HALF, IS_NEOX)
        xn = xn * tl.load(w_ptr + c, mask=cm, other=0.0).to(tl.float32)[None, None, :]
        x1 = x1 * tl.load(w_ptr + NOPE + a, mask=j < HALF, other=0.0).to(tl.float32)[None, None, :]
        x2 = x2 * tl.load(w_ptr + NOPE + b2, mask=j < HALF, other=0.0).to(tl.float32)[None, None, :]
    c1, c2, s1, s2 = _tables(cos_ptr, sin_ptr, row, n_rows, stride_t_r, stride_t_f, valid,
                             HALF, BLOCK_HALF, IS_NEOX, True, False)
    o1, o2 = _turn(x1, x2, c1, c2, s1, s2, valid[:, None, None], False)
    return xn, o1, o2


@triton.jit(do_not_specialize=["n_tokens", "n_rows", "n_seqs", "n_swa_slots"])
def _reduce_qk_norm_rope_swa_kernel(
    q_ptr, q_out_ptr, kv_ptr, qw_ptr, kvw_ptr, pos_ptr, cos_ptr, sin_ptr,
    widx_ptr, bid_ptr, state_ptr, swa_ptr,      # the window cache's (HAS_SWA)
    sq_s, sq_t, so_t, so_h, skv_t, swa_slot, swa_pos,
    stride_t_r, stride_t_f,
    n_tokens, n_q_heads, n_splitk, n_rows, head_dim, win, n_seqs, n_swa_slots,
    q_eps, kv_eps,
    HAS_QW: tl.constexpr,
    HAS_KVW: tl.constexpr,
    HAS_SWA: tl.constexpr,
    IS_NEOX: tl.constexpr,
    NOPE: tl.constexpr,              # D - R channels before the rotated tail
    HALF: tl.constexpr,              # R / 2
    BLOCK_HALF: tl.constexpr,
    BLOCK_NOPE: tl.constexpr,
    BLOCK_T: tl.constexpr,
    BLOCK_H: tl.constexpr,
):
    q_eps = tl.cast(q_eps, tl.float32)
    kv_eps = tl.cast(kv_eps, tl.float32)
    n_blocks = tl.cdiv(n_q_heads, BLOCK_H) + 1
    pid = tl.program_id(0)
    pid_h = pid % n_blocks
    tok = ((pid // n_blocks) * BLOCK_T + tl.arange(0, BLOCK_T)).to(tl.int64)
    t_mask = tok < n_tokens
    cn = tl.arange(0, BLOCK_NOPE)
    if pid_h < n_blocks - 1:
        heads = pid_h * BLOCK_H + tl.arange(0, BLOCK_H)
        th_mask = t_mask[:, None] & (heads < n_q_heads)[None, :]
        qrow = tl.load(pos_ptr + tok, mask=t_mask, other=0).to(tl.int64)
        base = (q_ptr + tok * sq_t)[:, None] + heads[None, :] * head_dim
        nope, o1, o2 = _norm_rope_rows(q_ptr, sq_s, n_splitk, base, th_mask, qw_ptr, qrow, t_mask, n_rows, cos_ptr,
                                       sin_ptr, stride_t_r, stride_t_f, q_eps, head_dim, NOPE, HAS_QW, IS_NEOX,
                                       HALF, BLOCK_HALF, BLOCK_NOPE)
        ty = q_out_ptr.dtype.element_ty
        out = (q_out_ptr + tok * so_t)[:, None] + heads[None, :] * so_h
        _store_chans(out, cn, nope.to(ty), th_mask[:, :, None] & (cn < NOPE)[None, None, :], 1, 1, 0)
        _store_pairs(out, NOPE, o1.to(ty), o2.to(ty), th_mask, 1, 1, 0, HALF, BLOCK_HALF, IS_NEOX)
    else:
        if HAS_SWA:
            src = tl.load(widx_ptr + tok, mask=t_mask, other=-1).to(tl.int64)
        else:
            src = tok
        valid = t_mask & (src >= 0) & (src < n_tokens)  # an index past kv's rows writes nothing
        src = tl.where(valid, src, 0)
        krow = tl.load(pos_ptr + src, mask=valid, other=0).to(tl.int64)
        one = tl.arange(0, 1)
        vh = valid[:, None] & (one < 1)[None, :]
        kbase = (kv_ptr + src * skv_t)[:, None] + one[None, :]
        kn, k1, k2 = _norm_rope_rows(kv_ptr, 0, 1, kbase, vh, kvw_ptr, krow, valid, n_rows, cos_ptr, sin_ptr,
                                       stride_t_r, stride_t_f, kv_eps, head_dim, NOPE, HAS_KVW, IS_NEOX, HALF,
                                       BLOCK_HALF, BLOCK_NOPE)
        nm = vh[:, :, None] & (cn < NOPE)[None, None, :]
        kty = kv_ptr.dtype.element_ty
        _store_chans(kbase, cn, kn.to(kty), nm, 1, 1, 0)
        _store_pairs(kbase, NOPE, k1.to(kty), k2.to(kty), vh, 1, 1, 0, HALF, BLOCK_HALF, IS_NEOX)
        if HAS_SWA:
            bid = tl.load(bid_ptr + src, mask=valid, other=-1).to(tl.int64)
            bid_ok = valid & (bid >= 0) & (bid < n_seqs)
            slot = tl.load(state_ptr + bid, mask=bid_ok, other=-1).to(tl.int64)
            # a padding sequence (slot < 0) writes nothing, nor a negative position (unchecked on a GPU)
            w_ok = bid_ok & (slot >= 0) & (slot < n_swa_slots) & (krow >= 0)
            slot = tl.where(w_ok, slot, 0)
            ring = krow % win
            vh = vh & w_ok[:, None]
            nm = nm & w_ok[:, None, None]
            wb = (swa_ptr + slot * swa_slot + ring * swa_pos)[:, None] + one[None, :]
            wt = swa_ptr.dtype.element_ty
            _store_chans(wb, cn, kn.to(wt), nm, 1, 1, 0)
            _store_pairs(wb, NOPE, k1.to(wt), k2.to(wt), vh, 1, 1, 0, HALF, BLOCK_HALF, IS_NEOX)
