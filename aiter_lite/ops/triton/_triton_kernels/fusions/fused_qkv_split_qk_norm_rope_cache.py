"""A fused QKV projection split, per-head RMSNorm of Q and K, RoPE, and the paged KV-cache
write, in one launch (Qwen3 / Qwen3-Next / Gemma 3 attention input).

``qkv`` rows are ``[q heads (with their gates) | k heads | v heads]``, each head D wide; Q
head h starts at column ``h * sq_h`` and its gate ``gate_off`` further on (gates
interleaved: sq_h = 2 D, gate_off = D; blocked: sq_h = D, gate_off = QH D). A program takes
BLOCK_T tokens and BLOCK_H heads of Q (normalized, rotated into q_out; gates copied) or
BLOCK_TK tokens and BLOCK_HK heads of K and V (a tile of the same size where KV heads are
fewer than BLOCK_H; K normalized and rotated into k_out, V copied into v_out, both written at the
token's slot of the caches). Caches are addressed by (block, offset, head, channel)
strides, so HND and NHD are one kernel.

A head's RMS is over all D channels; its normalized value ``x * rstd * (1 + w)`` is rounded
to qkv's dtype (the norm's output) and rotated in fp32 as the RoPE kernels turn it: the
pairs' two members loaded apart (NEOX halves; GPTJ pairs split in registers), the channels
past R (normalized, not rotated) a third part. K's rotated values go to k_out rounded and to
the cache from fp32 (times 1 / k_scale; fp8 saturated).
"""

import triton
import triton.language as tl

from aiter_lite.ops.triton._triton_kernels.fusions.fused_kv_cache import (
    _cast,
    _slots,
    _store_chans,
    _store_pairs,
)
from aiter_lite.ops.triton._triton_kernels.rope.rope import _load_part, _pair_cols, _tables, _token_rows, _turn


@triton.jit
def _q_kv_block(n_q_heads, n_kv_heads, BLOCK_T: tl.constexpr, BLOCK_H: tl.constexpr,
                BLOCK_TK: tl.constexpr, BLOCK_HK: tl.constexpr, INT64: tl.constexpr):
    """This program's place in a grid of BLOCK_TK-token groups, each its Q blocks (BLOCK_T
    tokens x BLOCK_H heads, the group's token blocks in turn) then its KV blocks (BLOCK_TK
    tokens x BLOCK_HK heads): (a Q block, the head index of the Q block or the KV block,
    its first token). Neighbouring programs read neighbouring rows."""
    n_qh = tl.cdiv(n_q_heads, BLOCK_H)
    n_q = (BLOCK_TK // BLOCK_T) * n_qh
    per = n_q + tl.cdiv(n_kv_heads, BLOCK_HK)
    pid = tl.program_id(0)
    group = pid // per
    r = pid % per
    is_q = r < n_q
    if BLOCK_TK == BLOCK_T:  # a Q block a head block (decode): no more runtime divisions
        hb = tl.where(is_q, r, r - n_q)
        t0 = group * BLOCK_T
    else:
        hb = tl.where(is_q, r % n_qh, r - n_q)
        t0 = group * BLOCK_TK + tl.where(is_q, (r // n_qh) * BLOCK_T, 0)
    if INT64:
        t0 = t0.to(tl.int64)
    return is_q, hb, t0


@triton.jit
def _tile(hb, t0, n_heads, n_tokens, BLOCK_T: tl.constexpr, BLOCK_H: tl.constexpr):
    """(heads, tokens, token mask, token x head mask) of a BLOCK_T x BLOCK_H block."""
    heads = hb * BLOCK_H + tl.arange(0, BLOCK_H)
    tok = t0 + tl.arange(0, BLOCK_T)
    t_mask = tok < n_tokens
    return heads, tok, t_mask, t_mask[:, None] & (heads < n_heads)[None, :]


@triton.jit
def _normed(x, rstd, w, dtype: tl.constexpr):
    """``x * rstd * (1 + w)`` rounded to ``dtype`` (the norm's output), in fp32."""
    return (x * rstd * (1.0 + w)).to(dtype).to(tl.float32)


@triton.jit
def _norm_rope_heads(x_ptr, sx_t, sx_h, w_ptr, tok, t_mask, heads, th_mask, pos_ptr, off_ptr, cos_ptr, sin_ptr,
                     n_rows, stride_t_r, stride_t_f, eps, head_dim, HAS_OFFSETS: tl.constexpr,
                     IS_NEOX: tl.constexpr, REUSE: tl.constexpr, HALF: tl.constexpr, BLOCK_HALF: tl.constexpr,
                     BLOCK_REST: tl.constexpr, BLOCK_T: tl.constexpr):
    """A (BLOCK_T, BLOCK_H) block of heads at ``x_ptr`` RMS-normalized over all head_dim
    channels and rotated: (o1, o2) the pairs (BLOCK_HALF wide), ``rest`` the channels past
    the rotary part (BLOCK_REST wide; unused where BLOCK_REST is 0), fp32. Pairs
    of a token outside the table are NaN (the RoPE ops' rule)."""
    xh = (x_ptr + tok * sx_t)[:, None] + heads[None, :] * sx_h
    x1, x2 = _load_part(xh, 0, 1, th_mask, HALF, BLOCK_HALF, IS_NEOX)
    ss = tl.sum(x1 * x1, axis=2) + tl.sum(x2 * x2, axis=2)
    if BLOCK_REST > 0:
        c = 2 * HALF + tl.arange(0, BLOCK_REST)
        xr = tl.load(xh[:, :, None] + c[None, None, :], mask=th_mask[:, :, None] & (c < head_dim)[None, None, :],
                     other=0.0).to(tl.float32)
        ss += tl.sum(xr * xr, axis=2)
    rstd = tl.rsqrt(ss / head_dim + eps)[:, :, None]
    dtype = x_ptr.dtype.element_ty
    j = tl.arange(0, BLOCK_HALF)
    a, b = _pair_cols(j, HALF, IS_NEOX)
    y1 = _normed(x1, rstd, tl.load(w_ptr + a, mask=j < HALF, other=0.0).to(tl.float32)[None, None, :], dtype)
    y2 = _normed(x2, rstd, tl.load(w_ptr + b, mask=j < HALF, other=0.0).to(tl.float32)[None, None, :], dtype)
    if BLOCK_REST > 0:
        c = 2 * HALF + tl.arange(0, BLOCK_REST)
        rest = _normed(xr, rstd, tl.load(w_ptr + c, mask=c < head_dim, other=0.0).to(tl.float32)[None, None, :],
                       dtype)
    else:
        rest = y1  # no channels past the rotary part: unused
    row, _, valid = _token_rows(tok, t_mask, 1, pos_ptr, off_ptr, pos_ptr, 1, 0, 0, 1, 1, 1, HAS_OFFSETS, BLOCK_T)
    c1, c2, s1, s2 = _tables(cos_ptr, sin_ptr, row, n_rows, stride_t_r, stride_t_f, valid,
                             HALF, BLOCK_HALF, IS_NEOX, REUSE, False)
    o1, o2 = _turn(y1, y2, c1, c2, s1, s2, valid[:, None, None], False)
    return o1, o2, rest


@triton.jit
def _store_head(base, o1, o2, rest, mask, head_dim, s_d, HALF: tl.constexpr, BLOCK_HALF: tl.constexpr,
                BLOCK_REST: tl.constexpr, IS_NEOX: tl.constexpr):
    """Pairs and the channels past them (already in the destination's dtype) into the
    (BLOCK_T, BLOCK_H) entries at ``base``, channels ``s_d`` apart, where ``mask``."""
    _store_pairs(base, 0, o1, o2, mask, 1, s_d, 0, HALF, BLOCK_HALF, IS_NEOX)
    if BLOCK_REST > 0:
        c = 2 * HALF + tl.arange(0, BLOCK_REST)
        _store_chans(base, c, rest, mask[:, :, None] & (c < head_dim)[None, None, :], 1, s_d, 0)


@triton.jit(do_not_specialize=["n_tokens", "n_slot_tokens", "n_cache_slots", "n_rows"])
def _qkv_norm_rope_cache_kernel(
    qkv_ptr, qw_ptr, kw_ptr,
    q_ptr, gate_ptr, k_ptr, v_ptr,   # (T, QH, D) / (T, KVH, D), contiguous
    kc_ptr, vc_ptr,                  # caches, (block, offset, head, channel) strides below
    slot_ptr, pos_ptr, off_ptr,      # (n_slot_tokens,) slots; (T,) positions (+ offsets), unit stride
    cos_ptr, sin_ptr,                # (n_rows, F) tables
    ks_ptr, vs_ptr,                  # one-element fp32 scales (HAS_K_SCALE / HAS_V_SCALE)
    stride_qkv_t, sq_h, gate_off, k_col,   # Q head stride, a gate's offset from its Q head, K's first column
    skc_b, skc_o, skc_h, skc_d, svc_b, svc_o, svc_h, svc_d,
    stride_t_r, stride_t_f,
    n_tokens, n_slot_tokens, n_cache_slots, block_size, n_rows,
    n_q_heads, n_kv_heads, head_dim,
    eps, c_min, c_max,
    HAS_OFFSETS: tl.constexpr,
    IS_NEOX: tl.constexpr,
    REUSE: tl.constexpr,             # a HALF-wide table serves both members of a pair
    GATED: tl.constexpr,
    HAS_K_SCALE: tl.constexpr,
    HAS_V_SCALE: tl.constexpr,
    K_FP8: tl.constexpr,
    V_FP8: tl.constexpr,
    SOFT_ROUND: tl.constexpr,
    HALF: tl.constexpr,              # R / 2: channels 0 .. R rotate, R .. head_dim pass through (normalized)
    BLOCK_HALF: tl.constexpr,
    BLOCK_REST: tl.constexpr,        # >= head_dim - R, power of 2 (0: none)
    BLOCK_D: tl.constexpr,           # >= head_dim, power of 2
    BLOCK_T: tl.constexpr,           # a Q block: BLOCK_T tokens x BLOCK_H heads
    BLOCK_H: tl.constexpr,
    BLOCK_TK: tl.constexpr,          # a K / V block: BLOCK_TK tokens (a multiple of BLOCK_T) x BLOCK_HK heads
    BLOCK_HK: tl.constexpr,
    INT64: tl.constexpr,
    BS_SHIFT: tl.constexpr = -1,     # block_size = 2^BS_SHIFT (else -1: a division)
):
    # scalars to fp32 (inductor passes Python floats as fp64); tl.cast: a float has no .to in the interpreter
    eps = tl.cast(eps, tl.float32)
    c_min = tl.cast(c_min, tl.float32)
    c_max = tl.cast(c_max, tl.float32)
    first, hb, t0 = _q_kv_block(n_q_heads, n_kv_heads, BLOCK_T, BLOCK_H, BLOCK_TK, BLOCK_HK, INT64)
    if first:
        heads, tok, t_mask, th_mask = _tile(hb, t0, n_q_heads, n_tokens, BLOCK_T, BLOCK_H)
        o1, o2, rest = _norm_rope_heads(qkv_ptr, stride_qkv_t, sq_h, qw_ptr, tok, t_mask, heads, th_mask, pos_ptr,
                                        off_ptr, cos_ptr, sin_ptr, n_rows, stride_t_r, stride_t_f, eps, head_dim,
                                        HAS_OFFSETS, IS_NEOX, REUSE, HALF, BLOCK_HALF, BLOCK_REST, BLOCK_T)
        q_ty = q_ptr.dtype.element_ty
        qo = (q_ptr + tok * (n_q_heads * head_dim))[:, None] + heads[None, :] * head_dim
        _store_head(qo, o1.to(q_ty), o2.to(q_ty), rest.to(q_ty), th_mask, head_dim, 1, HALF, BLOCK_HALF, BLOCK_REST,
                    IS_NEOX)
        if GATED:
            c = tl.arange(0, BLOCK_D)
            m = th_mask[:, :, None] & (c < head_dim)[None, None, :]
            g = (qkv_ptr + tok * stride_qkv_t + gate_off)[:, None] + heads[None, :] * sq_h
            go = (gate_ptr + tok * (n_q_heads * head_dim))[:, None] + heads[None, :] * head_dim
            _store_chans(go, c, tl.load(g[:, :, None] + c[None, None, :], mask=m), m, 1, 1, 0)
    else:  # its own names: Triton merges the values two branches both assign, and these differ in shape
        kheads, ktok, kt_mask, kth_mask = _tile(hb, t0, n_kv_heads, n_tokens, BLOCK_TK, BLOCK_HK)
        k_base = qkv_ptr + k_col
        k1, k2, krest = _norm_rope_heads(k_base, stride_qkv_t, head_dim, kw_ptr, ktok, kt_mask, kheads, kth_mask,
                                        pos_ptr, off_ptr, cos_ptr, sin_ptr, n_rows, stride_t_r, stride_t_f, eps,
                                        head_dim, HAS_OFFSETS, IS_NEOX, REUSE, HALF, BLOCK_HALF, BLOCK_REST, BLOCK_TK)
        k_ty = k_ptr.dtype.element_ty
        ko = (k_ptr + ktok * (n_kv_heads * head_dim))[:, None] + kheads[None, :] * head_dim
        _store_head(ko, k1.to(k_ty), k2.to(k_ty), krest.to(k_ty), kth_mask, head_dim, 1, HALF, BLOCK_HALF,
                    BLOCK_REST, IS_NEOX)
        c = tl.arange(0, BLOCK_D)
        km = kth_mask[:, :, None] & (c < head_dim)[None, None, :]
        vh = (k_base + n_kv_heads * head_dim + ktok * stride_qkv_t)[:, None] + kheads[None, :] * head_dim
        v = tl.load(vh[:, :, None] + c[None, None, :], mask=km)
        vo = (v_ptr + ktok * (n_kv_heads * head_dim))[:, None] + kheads[None, :] * head_dim
        _store_chans(vo, c, v, km, 1, 1, 0)

        blk, off, writes = _slots(slot_ptr, ktok, kt_mask, n_slot_tokens, n_cache_slots, block_size, BS_SHIFT)
        w_mask = writes[:, None] & kth_mask
        k_inv = tl.math.div_rn(1.0, tl.load(ks_ptr).to(tl.float32)) if HAS_K_SCALE else 1.0
        v_inv = tl.math.div_rn(1.0, tl.load(vs_ptr).to(tl.float32)) if HAS_V_SCALE else 1.0
        c_ty = kc_ptr.dtype.element_ty
        kc = (kc_ptr + blk * skc_b + off * skc_o)[:, None] + kheads[None, :].to(tl.int64) * skc_h
        _store_head(kc, _cast(k1, k_inv, c_min, c_max, c_ty, K_FP8, SOFT_ROUND),
                    _cast(k2, k_inv, c_min, c_max, c_ty, K_FP8, SOFT_ROUND),
                    _cast(krest, k_inv, c_min, c_max, c_ty, K_FP8, SOFT_ROUND), w_mask, head_dim, skc_d, HALF,
                    BLOCK_HALF, BLOCK_REST, IS_NEOX)
        vc = (vc_ptr + blk * svc_b + off * svc_o)[:, None] + kheads[None, :].to(tl.int64) * svc_h
        _store_chans(vc, c, _cast(v.to(tl.float32), v_inv, c_min, c_max, vc_ptr.dtype.element_ty, V_FP8,
                                  SOFT_ROUND), km & writes[:, None, None], 1, svc_d, 0)
