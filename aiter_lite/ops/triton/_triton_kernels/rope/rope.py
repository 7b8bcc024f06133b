"""Rotary position embedding: one kernel for every layout (SBHD, THD varlen, Q and K
together, 2-D images), raw angles or cached cos / sin, forward and backward.

x is seen as (outer, inner, heads, d) with four strides: SBHD (s, b, h, d), THD and "2c"
(t, 1, h, d), 2-D (b, img_height * img_width, h, d). A program takes BLOCK_T tokens
(flattened outer x inner) and BLOCK_H heads; each token's table row is loaded once and
shared by its heads. The rotary part is R = 2 * HALF channels (any even R), turned as
pairs: NEOX (j, j + HALF), GPTJ (2j, 2j + 1).
"""

import triton
import triton.language as tl


@triton.jit
def _pair_cols(j, HALF: tl.constexpr, IS_NEOX: tl.constexpr):
    """Channel offsets (inside the rotary part) of each pair's two members."""
    if IS_NEOX:
        return j, j + HALF
    return 2 * j, 2 * j + 1


@triton.jit
def _table(t_ptr, row_off, stride_f, j, mask, HALF: tl.constexpr, IS_NEOX: tl.constexpr, REUSE: tl.constexpr):
    """(cos, sin) for both members of each pair, fp32, from the token rows at ``row_off``."""
    if REUSE:
        c1 = tl.load(t_ptr + row_off + j * stride_f, mask=mask, other=0.0).to(tl.float32)
        c2 = c1
    else:
        a, b = _pair_cols(j, HALF, IS_NEOX)
        c1 = tl.load(t_ptr + row_off + a * stride_f, mask=mask, other=0.0).to(tl.float32)
        c2 = tl.load(t_ptr + row_off + b * stride_f, mask=mask, other=0.0).to(tl.float32)
    return c1, c2


@triton.jit
def _rope_kernel(
    x_ptr, out_ptr,
    cos_ptr, sin_ptr,             # (rows, F) cached tables, or angles in cos_ptr (IS_FREQS)
    cos2_ptr, sin2_ptr,           # 2-D: the width tables
    pos_ptr, off_ptr,             # ROW_MODE 1: (outer, inner) positions (+ offsets)
    cu_ptr,                       # ROW_MODE 2: (n_seqs + 1,) cumulative sequence lengths
    stride_x_o, stride_x_i, stride_x_h, stride_x_d,
    stride_y_o, stride_y_i, stride_y_h, stride_y_d,
    stride_t_r, stride_t_f, stride_t2_r, stride_t2_f,
    stride_p_o, stride_p_i,
    n_inner, n_tokens, n_heads,
    n_seqs, search_steps,         # ROW_MODE 2: binary-search steps over cu_seqlens
    img_width,                    # ROW_MODE 3
    head_dim,
    ROW_MODE: tl.constexpr,       # 0 row = outer index; 1 positions; 2 varlen; 3 2-D (row, column)
    HAS_OFFSETS: tl.constexpr,
    IS_FREQS: tl.constexpr,       # tables hold angles: cos / sin computed in fp32
    IS_NEOX: tl.constexpr,
    REUSE: tl.constexpr,          # a HALF-wide table serves both members of a pair
    BACKWARD: tl.constexpr,       # the transpose: o1 = x1 c1 + x2 s2, o2 = x2 c2 - x1 s1
    NOPE_FIRST: tl.constexpr,
    COPY_REST: tl.constexpr,      # out of place: the passthrough channels copied
    HALF: tl.constexpr,           # R / 2
    BLOCK_HALF: tl.constexpr,
    BLOCK_REST: tl.constexpr,     # >= d - N_PARTS * R (the passthrough), power of 2
    BLOCK_T: tl.constexpr,
    BLOCK_H: tl.constexpr,
    INT64: tl.constexpr,
):
    pid_t = tl.program_id(0)
    pid_h = tl.program_id(1)
    tok = pid_t * BLOCK_T + tl.arange(0, BLOCK_T)
    if INT64:
        tok = tok.to(tl.int64)
    t_mask = tok < n_tokens
    o_idx = tok // n_inner
    i_idx = tok % n_inner
    heads = pid_h * BLOCK_H + tl.arange(0, BLOCK_H)
    h_mask = heads < n_heads
    j = tl.arange(0, BLOCK_HALF)
    j_mask = j < HALF
    n_parts: tl.constexpr = 2 if ROW_MODE == 3 else 1
    rot_width = n_parts * 2 * HALF
    rot_lo = head_dim - rot_width if NOPE_FIRST else 0

    # the table row of every token
    valid = t_mask
    if ROW_MODE == 0:
        row = o_idx
    elif ROW_MODE == 1:
        row = tl.load(pos_ptr + o_idx * stride_p_o + i_idx * stride_p_i, mask=t_mask, other=0).to(tl.int64)
        if HAS_OFFSETS:
            row += tl.load(off_ptr + o_idx * stride_p_o + i_idx * stride_p_i, mask=t_mask, other=0).to(tl.int64)
    elif ROW_MODE == 2:
        # sequence of each token: the last s with cu[s] <= tok (binary search, runtime steps)
        lo = tl.zeros([BLOCK_T], dtype=tl.int32)
        hi = tl.zeros([BLOCK_T], dtype=tl.int32) + n_seqs
        for _ in range(search_steps):
            mid = (lo + hi + 1) // 2
            start = tl.load(cu_ptr + mid, mask=t_mask & (mid <= n_seqs), other=0)
            go = start <= o_idx
            lo = tl.where(go, mid, lo)
            hi = tl.where(go, hi, mid - 1)
        first = tl.load(cu_ptr + lo, mask=t_mask, other=0)
        end = tl.load(cu_ptr + n_seqs)
        valid = t_mask & (o_idx < end)
        row = (o_idx - first).to(tl.int64)
    else:
        row = i_idx // img_width
        row2 = i_idx % img_width

    x_tok = x_ptr + o_idx * stride_x_o + i_idx * stride_x_i
    y_tok = out_ptr + o_idx * stride_y_o + i_idx * stride_y_i
    xh = x_tok[:, None] + heads[None, :] * stride_x_h  # (BLOCK_T, BLOCK_H)
    yh = y_tok[:, None] + heads[None, :] * stride_y_h
    th_mask = t_mask[:, None] & h_mask[None, :]
    m3 = th_mask[:, :, None] & j_mask[None, None, :]
    rot3 = valid[:, None, None] & h_mask[None, :, None] & j_mask[None, None, :]

    for part in tl.static_range(n_parts):
        if part == 0:
            t_ptr, s_ptr, srow, sf, prow = cos_ptr, sin_ptr, stride_t_r, stride_t_f, row
        else:
            t_ptr, s_ptr, srow, sf, prow = cos2_ptr, sin2_ptr, stride_t2_r, stride_t2_f, row2
        tmask = valid[:, None] & j_mask[None, :]
        row_off = (prow * srow)[:, None]
        if IS_FREQS:
            a1, a2 = _table(t_ptr, row_off, sf, j[None, :], tmask, HALF, IS_NEOX, REUSE)
            c1, c2, s1, s2 = tl.cos(a1), tl.cos(a2), tl.sin(a1), tl.sin(a2)
        else:
            c1, c2 = _table(t_ptr, row_off, sf, j[None, :], tmask, HALF, IS_NEOX, REUSE)
            s1, s2 = _table(s_ptr, row_off, sf, j[None, :], tmask, HALF, IS_NEOX, REUSE)
        c1, c2, s1, s2 = c1[:, None, :], c2[:, None, :], s1[:, None, :], s2[:, None, :]
        a, b = _pair_cols(j, HALF, IS_NEOX)
        base = rot_lo + part * 2 * HALF
        xa = xh[:, :, None] + (base + a)[None, None, :] * stride_x_d
        xb = xh[:, :, None] + (base + b)[None, None, :] * stride_x_d
        x1 = tl.load(xa, mask=m3, other=0.0).to(tl.float32)
        x2 = tl.load(xb, mask=m3, other=0.0).to(tl.float32)
        if BACKWARD:
            o1 = x1 * c1 + x2 * s2
            o2 = x2 * c2 - x1 * s1
        else:
            o1 = x1 * c1 - x2 * s1
            o2 = x2 * c2 + x1 * s2
        # tokens outside every sequence (varlen) pass through unrotated
        o1 = tl.where(rot3, o1, x1)
        o2 = tl.where(rot3, o2, x2)
        ya = yh[:, :, None] + (base + a)[None, None, :] * stride_y_d
        yb = yh[:, :, None] + (base + b)[None, None, :] * stride_y_d
        tl.store(ya, o1.to(out_ptr.dtype.element_ty), mask=m3)
        tl.store(yb, o2.to(out_ptr.dtype.element_ty), mask=m3)

    if COPY_REST:
        k = tl.arange(0, BLOCK_REST)
        rest_lo = 0 if NOPE_FIRST else rot_width
        k_mask = k < head_dim - rot_width
        mr = th_mask[:, :, None] & k_mask[None, None, :]
        v = tl.load(xh[:, :, None] + (rest_lo + k)[None, None, :] * stride_x_d, mask=mr)
        tl.store(yh[:, :, None] + (rest_lo + k)[None, None, :] * stride_y_d, v.to(out_ptr.dtype.element_ty), mask=mr)
