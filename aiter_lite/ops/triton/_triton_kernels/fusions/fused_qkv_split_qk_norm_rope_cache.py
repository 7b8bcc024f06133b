"""A fused QKV projection split, per-head RMSNorm of Q and K, RoPE, and the paged KV-cache
write, in one launch (Qwen3 / Qwen3-Next / Gemma 3 attention input).

``qkv`` rows are ``[q heads (with their gates) | k heads | v heads]``, each head D wide; Q
head h starts at column ``h * sq_h`` and its gate ``gate_off`` further on (gates
interleaved: sq_h = 2 D, gate_off = D; blocked: sq_h = D, gate_off = QH D). A program takes
BLOCK_T tokens and BLOCK_H heads of Q (normalized, rotated into q_out; gates copied) or of
K and V (K normalized and rotated into k_out, V copied into v_out, both written at the
token's slot of the caches). Caches are addressed by (block, offset, head, channel)
strides, so HND and NHD are one kernel.

A head's RMS is over all D channels; its normalized value ``x * rstd * (1 + w)`` is rounded
to qkv's dtype (the norm's output) and rotated in fp32. Channel c's partner in its pair
(NEOX: c +- R/2; GPTJ: c ^ 1) is loaded again (an L1 hit) and normalized the same way, so a
partial rotary width needs no reshuffle; channels past R pass through.
"""

import triton
import triton.language as tl

from aiter_lite.ops.triton._triton_kernels.fusions.fused_kv_cache import _cast, _slots
from aiter_lite.ops.triton._triton_kernels.rope.rope import _token_block


@triton.jit
def _normed(ptrs, mask, w, rstd, dtype: tl.constexpr):
    """x * rstd * (1 + w) of the values at ``ptrs``, rounded to ``dtype``, in fp32."""
    x = tl.load(ptrs, mask=mask, other=0.0).to(tl.float32)
    return (x * rstd * (1.0 + w)).to(dtype).to(tl.float32)


@triton.jit
def _norm_rope_heads(x_ptr, sx_t, sx_h, w_ptr, tok, heads, th_mask, cos, sin, eps, head_dim,
                     IS_NEOX: tl.constexpr, HALF: tl.constexpr, BLOCK_D: tl.constexpr):
    """(BLOCK_T, BLOCK_H, BLOCK_D) heads at ``x_ptr`` normalized and rotated, fp32 (cos, sin:
    (BLOCK_T, 1, BLOCK_D), 1 and 0 past the rotary channels)."""
    c = tl.arange(0, BLOCK_D)
    c_mask = c < head_dim
    rot = c < 2 * HALF
    if IS_NEOX:
        partner = tl.where(c < HALF, c + HALF, tl.where(rot, c - HALF, c))
        sign = tl.where(c < HALF, -1.0, 1.0)
    else:
        partner = tl.where(rot, c ^ 1, c)
        sign = tl.where(c % 2 == 0, -1.0, 1.0)
    base = (x_ptr + tok * sx_t)[:, None] + heads[None, :] * sx_h
    m = th_mask[:, :, None] & c_mask[None, None, :]
    x = tl.load(base[:, :, None] + c[None, None, :], mask=m, other=0.0).to(tl.float32)
    rstd = tl.rsqrt(tl.sum(x * x, axis=2) / head_dim + eps)[:, :, None]
    dtype = x_ptr.dtype.element_ty
    w = tl.load(w_ptr + c, mask=c_mask, other=0.0).to(tl.float32)[None, None, :]
    y = (x * rstd * (1.0 + w)).to(dtype).to(tl.float32)
    wp = tl.load(w_ptr + partner, mask=c_mask, other=0.0).to(tl.float32)[None, None, :]
    yp = _normed(base[:, :, None] + partner[None, None, :], m, wp, rstd, dtype)
    out = tl.fma(y, cos, sign[None, None, :] * (yp * sin))
    return tl.where(rot[None, None, :], out, y)


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
    REUSE: tl.constexpr,             # a table entry serves both members of a pair
    GATED: tl.constexpr,
    HAS_K_SCALE: tl.constexpr,
    HAS_V_SCALE: tl.constexpr,
    K_FP8: tl.constexpr,
    V_FP8: tl.constexpr,
    SOFT_ROUND: tl.constexpr,
    HALF: tl.constexpr,              # R / 2: the rotated channels are 0 .. R
    BLOCK_D: tl.constexpr,
    BLOCK_T: tl.constexpr,
    BLOCK_H: tl.constexpr,
    INT64: tl.constexpr,
):
    eps = tl.cast(eps, tl.float32)
    c_min = tl.cast(c_min, tl.float32)
    c_max = tl.cast(c_max, tl.float32)
    n_q_blocks = tl.cdiv(n_q_heads, BLOCK_H)
    pid_h, tok, t_mask = _token_block(n_q_blocks + tl.cdiv(n_kv_heads, BLOCK_H), n_tokens, BLOCK_T, INT64)

    # The tokens' cos / sin rows, (BLOCK_T, 1, BLOCK_D): NaN for a row outside the table
    # (the RoPE ops' rule), 1 and 0 past the rotary channels.
    c = tl.arange(0, BLOCK_D)
    rot = c < 2 * HALF
    if REUSE:
        if IS_NEOX:
            f = c % HALF
        else:
            f = c // 2
    else:
        f = c
    row = tl.load(pos_ptr + tok, mask=t_mask, other=0).to(tl.int64)
    if HAS_OFFSETS:
        row += tl.load(off_ptr + tok, mask=t_mask, other=0).to(tl.int64)
    valid = (row >= 0) & (row < n_rows)
    t_off = (tl.where(valid, row, 0) * stride_t_r)[:, None] + (tl.where(rot, f, 0) * stride_t_f)[None, :]
    tm = t_mask[:, None] & rot[None, :]
    cos = tl.load(cos_ptr + t_off, mask=tm, other=1.0).to(tl.float32)
    sin = tl.load(sin_ptr + t_off, mask=tm, other=0.0).to(tl.float32)
    bad = (~valid)[:, None] & rot[None, :]
    cos = tl.where(bad, float("nan"), cos)[:, None, :]
    sin = tl.where(bad, float("nan"), sin)[:, None, :]
    cm = c < head_dim

    if pid_h < n_q_blocks:
        heads = pid_h * BLOCK_H + tl.arange(0, BLOCK_H)
        th_mask = t_mask[:, None] & (heads < n_q_heads)[None, :]
        q = _norm_rope_heads(qkv_ptr, stride_qkv_t, sq_h, qw_ptr, tok, heads, th_mask, cos, sin, eps, head_dim,
                             IS_NEOX, HALF, BLOCK_D)
        m = th_mask[:, :, None] & cm[None, None, :]
        o = (tok * n_q_heads)[:, None] + heads[None, :]
        o = o[:, :, None] * head_dim + c[None, None, :]
        tl.store(q_ptr + o, q.to(q_ptr.dtype.element_ty), mask=m)
        if GATED:
            g = (qkv_ptr + tok * stride_qkv_t + gate_off)[:, None] + heads[None, :] * sq_h
            tl.store(gate_ptr + o, tl.load(g[:, :, None] + c[None, None, :], mask=m), mask=m)
    else:
        heads = (pid_h - n_q_blocks) * BLOCK_H + tl.arange(0, BLOCK_H)
        th_mask = t_mask[:, None] & (heads < n_kv_heads)[None, :]
        k_base = qkv_ptr + k_col
        k = _norm_rope_heads(k_base, stride_qkv_t, head_dim, kw_ptr, tok, heads, th_mask, cos, sin, eps, head_dim,
                             IS_NEOX, HALF, BLOCK_D)
        m = th_mask[:, :, None] & cm[None, None, :]
        vb = (k_base + n_kv_heads * head_dim + tok * stride_qkv_t)[:, None] + heads[None, :] * head_dim
        v = tl.load(vb[:, :, None] + c[None, None, :], mask=m)
        o = (tok * n_kv_heads)[:, None] + heads[None, :]
        o = o[:, :, None] * head_dim + c[None, None, :]
        tl.store(k_ptr + o, k.to(k_ptr.dtype.element_ty), mask=m)
        tl.store(v_ptr + o, v, mask=m)

        blk, off, writes = _slots(slot_ptr, tok, t_mask, n_slot_tokens, n_cache_slots, block_size)
        wm = m & writes[:, None, None]
        k_inv = 1.0
        if HAS_K_SCALE:
            k_inv = tl.math.div_rn(1.0, tl.load(ks_ptr).to(tl.float32))
        v_inv = 1.0
        if HAS_V_SCALE:
            v_inv = tl.math.div_rn(1.0, tl.load(vs_ptr).to(tl.float32))
        ko = (blk * skc_b + off * skc_o)[:, None] + heads[None, :].to(tl.int64) * skc_h
        tl.store(kc_ptr + ko[:, :, None] + c[None, None, :] * skc_d,
                 _cast(k, k_inv, c_min, c_max, kc_ptr.dtype.element_ty, K_FP8, SOFT_ROUND), mask=wm)
        vo = (blk * svc_b + off * svc_o)[:, None] + heads[None, :].to(tl.int64) * svc_h
        tl.store(vc_ptr + vo[:, :, None] + c[None, None, :] * svc_d,
                 _cast(v.to(tl.float32), v_inv, c_min, c_max, vc_ptr.dtype.element_ty, V_FP8, SOFT_ROUND), mask=wm)
