"""Rotary position embedding: one kernel for every layout (SBHD, THD varlen, Q and K
together, 2-D images), raw angles or cached cos / sin, forward and backward.

x is seen as (outer, inner, heads, d) with four strides: SBHD (s, b, h, d), THD and "2c"
(t, 1, h, d), 2-D (b, img_height * img_width, h, d). A program takes BLOCK_T tokens
(flattened outer x inner) and BLOCK_H heads of one tensor; the grid runs over the head
blocks of x, then of x2 (Q and K in one launch), for each token block in turn. The rotary
part is R = 2 * HALF channels (any even R), turned as pairs: NEOX (j, j + HALF), GPTJ
(2j, 2j + 1).

A token whose table row falls outside the table (a bad position or offset) gets NaN
tables, so its rotary channels come out NaN: never a read out of bounds.
"""

from enum import IntEnum

import triton
import triton.language as tl


class RowMode(IntEnum):
    """How a token finds its table row (the kernels' ROW_MODE)."""

    OUTER = 0  # its outer index (SBHD: the sequence position)
    POSITIONS = 1  # positions (+ offsets) at its (outer, inner) index
    VARLEN = 2  # its position within its sequence (THD, cu_seqlens)
    IMAGE = 3  # 2-D: the height table at its row, the width table at its column


# The kernels compare ROW_MODE with these (a @triton.jit function reads constexpr globals only).
_OUTER = tl.constexpr(RowMode.OUTER)
_POSITIONS = tl.constexpr(RowMode.POSITIONS)
_VARLEN = tl.constexpr(RowMode.VARLEN)
_IMAGE = tl.constexpr(RowMode.IMAGE)


@triton.jit
def _pair_cols(j, HALF: tl.constexpr, IS_NEOX: tl.constexpr):
    """Channel offsets (inside the rotary part) of each pair's two members."""
    if IS_NEOX:
        return j, j + HALF
    return 2 * j, 2 * j + 1


@triton.jit
def _table(t_ptr, row_off, stride_f, j, mask, HALF: tl.constexpr, IS_NEOX: tl.constexpr, REUSE: tl.constexpr):
    """Both members' entries of each pair, fp32, from the token rows at ``row_off``; NaN where masked."""
    if REUSE:
        c1 = tl.load(t_ptr + row_off + j * stride_f, mask=mask, other=float("nan")).to(tl.float32)
        c2 = c1
    else:
        a, b = _pair_cols(j, HALF, IS_NEOX)
        c1 = tl.load(t_ptr + row_off + a * stride_f, mask=mask, other=float("nan")).to(tl.float32)
        c2 = tl.load(t_ptr + row_off + b * stride_f, mask=mask, other=float("nan")).to(tl.float32)
    return c1, c2


@triton.jit
def _tables(cos_ptr, sin_ptr, row, n_rows, stride_r, stride_f, valid,
            HALF: tl.constexpr, BLOCK_HALF: tl.constexpr, IS_NEOX: tl.constexpr, REUSE: tl.constexpr,
            IS_FREQS: tl.constexpr):
    """(c1, c2, s1, s2), each (BLOCK_T, 1, BLOCK_HALF) fp32, for the tokens' table rows."""
    j = tl.arange(0, BLOCK_HALF)
    in_table = valid & (row >= 0) & (row < n_rows)
    mask = in_table[:, None] & (j < HALF)[None, :]
    row_off = (row * stride_r)[:, None]
    if IS_FREQS:
        a1, a2 = _table(cos_ptr, row_off, stride_f, j[None, :], mask, HALF, IS_NEOX, REUSE)
        c1, c2, s1, s2 = tl.cos(a1), tl.cos(a2), tl.sin(a1), tl.sin(a2)
    else:
        c1, c2 = _table(cos_ptr, row_off, stride_f, j[None, :], mask, HALF, IS_NEOX, REUSE)
        s1, s2 = _table(sin_ptr, row_off, stride_f, j[None, :], mask, HALF, IS_NEOX, REUSE)
    return c1[:, None, :], c2[:, None, :], s1[:, None, :], s2[:, None, :]


@triton.jit
def _load_part(xh, base, sxd, th_mask, HALF: tl.constexpr, BLOCK_HALF: tl.constexpr, IS_NEOX: tl.constexpr):
    """Both members (x1, x2) of every pair of one rotary part (channels base .. base + 2 * HALF),
    fp32, (BLOCK_T, BLOCK_H, BLOCK_HALF) each."""
    j = tl.arange(0, BLOCK_HALF)
    if IS_NEOX:  # two contiguous halves
        m = th_mask[:, :, None] & (j < HALF)[None, None, :]
        x1 = tl.load(xh[:, :, None] + (base + j)[None, None, :] * sxd, mask=m, other=0.0)
        x2 = tl.load(xh[:, :, None] + (base + HALF + j)[None, None, :] * sxd, mask=m, other=0.0)
    else:  # interleaved pairs: one contiguous load, split in registers
        r = tl.arange(0, 2 * BLOCK_HALF)
        m = th_mask[:, :, None] & (r < 2 * HALF)[None, None, :]
        xx = tl.load(xh[:, :, None] + (base + r)[None, None, :] * sxd, mask=m, other=0.0)
        x1, x2 = tl.split(tl.reshape(xx, (xx.shape[0], xx.shape[1], BLOCK_HALF, 2)))
    return x1.to(tl.float32), x2.to(tl.float32)


@triton.jit
def _store_part(yh, base, syd, th_mask, o1, o2, HALF: tl.constexpr, BLOCK_HALF: tl.constexpr,
                IS_NEOX: tl.constexpr):
    j = tl.arange(0, BLOCK_HALF)
    if IS_NEOX:
        m = th_mask[:, :, None] & (j < HALF)[None, None, :]
        tl.store(yh[:, :, None] + (base + j)[None, None, :] * syd, o1, mask=m)
        tl.store(yh[:, :, None] + (base + HALF + j)[None, None, :] * syd, o2, mask=m)
    else:
        r = tl.arange(0, 2 * BLOCK_HALF)
        m = th_mask[:, :, None] & (r < 2 * HALF)[None, None, :]
        oo = tl.reshape(tl.join(o1, o2), (o1.shape[0], o1.shape[1], 2 * BLOCK_HALF))
        tl.store(yh[:, :, None] + (base + r)[None, None, :] * syd, oo, mask=m)


@triton.jit
def _token_block(n_blocks, n_tokens, BLOCK_T: tl.constexpr, INT64: tl.constexpr, pid0=0):
    """(head block, tokens, token mask) of this program in a one-axis grid of token blocks,
    each ``n_blocks`` head blocks, head blocks fastest (neighbouring programs read
    neighbouring memory); the grid's first ``pid0`` programs are another part's."""
    pid = tl.program_id(0) - pid0
    tok = (pid // n_blocks) * BLOCK_T + tl.arange(0, BLOCK_T)
    if INT64:
        tok = tok.to(tl.int64)
    return pid % n_blocks, tok, tok < n_tokens


@triton.jit
def _turn(x1, x2, c1, c2, s1, s2, rot3, BACKWARD: tl.constexpr):
    """The rotation of each pair; tokens outside every sequence (varlen) pass through. Each
    output is one explicit fused multiply-add: left to the compiler, which product it fuses
    depends on the surrounding code, so the fused kernels' fp32 outputs would differ from the
    RoPE kernel's in the last bit."""
    if BACKWARD:  # the transpose of the forward
        o1 = tl.fma(x1, c1, x2 * s2)
        o2 = tl.fma(x2, c2, -(x1 * s1))
    else:
        o1 = tl.fma(x1, c1, -(x2 * s1))
        o2 = tl.fma(x2, c2, x1 * s2)
    return tl.where(rot3, o1, x1), tl.where(rot3, o2, x2)


@triton.jit
def _token_rows(tok, t_mask, n_inner, pos_ptr, off_ptr, cu_ptr, stride_p_o, stride_p_i, n_seqs, search_steps,
                img_width, ROW_MODE: tl.constexpr, HAS_OFFSETS: tl.constexpr, BLOCK_T: tl.constexpr):
    """(row, row2, valid) per token: its table row (and 2-D width-table row), and whether it rotates.
    RowMode.VARLEN reads cu_seqlens with the stride ``stride_p_o`` (no positions then)."""
    o_idx = tok // n_inner
    i_idx = tok % n_inner
    valid = t_mask
    row2 = i_idx
    if ROW_MODE == _OUTER:
        row = o_idx
    elif ROW_MODE == _POSITIONS:
        row = tl.load(pos_ptr + o_idx * stride_p_o + i_idx * stride_p_i, mask=t_mask, other=0).to(tl.int64)
        if HAS_OFFSETS:
            row += tl.load(off_ptr + o_idx * stride_p_o + i_idx * stride_p_i, mask=t_mask, other=0).to(tl.int64)
    elif ROW_MODE == _VARLEN:
        # sequence of each token: the last s with cu[s] <= tok (binary search, runtime steps)
        lo = tl.zeros([BLOCK_T], dtype=tl.int32)
        hi = tl.zeros([BLOCK_T], dtype=tl.int32) + n_seqs
        for _ in range(search_steps):
            mid = (lo + hi + 1) // 2
            start = tl.load(cu_ptr + mid * stride_p_o, mask=t_mask & (mid <= n_seqs), other=0)
            go = start <= o_idx
            lo = tl.where(go, mid, lo)
            hi = tl.where(go, hi, mid - 1)
        first = tl.load(cu_ptr + lo * stride_p_o, mask=t_mask, other=0)
        end = tl.load(cu_ptr + n_seqs * stride_p_o)
        valid = t_mask & (o_idx < end)
        row = (o_idx - first).to(tl.int64)
    else:
        row = i_idx // img_width
        row2 = i_idx % img_width
    return row, row2, valid


@triton.jit
def _rotate_heads(x_ptr, out_ptr, sxo, sxi, sxh, sxd, syo, syi, syh, syd, hblock, n_heads, head_dim, tok, t_mask,
                  cos_ptr, sin_ptr, cos2_ptr, sin2_ptr, pos_ptr, off_ptr, cu_ptr,
                  stride_t_r, stride_t_f, stride_t2_r, stride_t2_f, stride_p_o, stride_p_i,
                  n_inner, n_rows, n_rows2, n_seqs, search_steps, img_width,
                  ROW_MODE: tl.constexpr, HAS_OFFSETS: tl.constexpr, IS_FREQS: tl.constexpr,
                  IS_NEOX: tl.constexpr, REUSE: tl.constexpr, BACKWARD: tl.constexpr, NOPE_FIRST: tl.constexpr,
                  COPY_REST: tl.constexpr, HALF: tl.constexpr, BLOCK_HALF: tl.constexpr,
                  BLOCK_REST: tl.constexpr, BLOCK_T: tl.constexpr, BLOCK_H: tl.constexpr):
    """Rotate one (BLOCK_T tokens, BLOCK_H heads) block of x into out. The block's loads are
    issued before the token rows are looked up (a position, then its table row: a chain of
    two dependent reads that the head data need not wait behind)."""
    N_PARTS: tl.constexpr = 2 if ROW_MODE == _IMAGE else 1
    o_idx = tok // n_inner
    i_idx = tok % n_inner
    heads = hblock * BLOCK_H + tl.arange(0, BLOCK_H)
    xh = (x_ptr + o_idx * sxo + i_idx * sxi)[:, None] + heads[None, :] * sxh  # (BLOCK_T, BLOCK_H)
    yh = (out_ptr + o_idx * syo + i_idx * syi)[:, None] + heads[None, :] * syh
    th_mask = t_mask[:, None] & (heads < n_heads)[None, :]
    rot_width = N_PARTS * 2 * HALF
    rot_lo = head_dim - rot_width if NOPE_FIRST else 0
    x1, x2 = _load_part(xh, rot_lo, sxd, th_mask, HALF, BLOCK_HALF, IS_NEOX)
    if N_PARTS == 2:
        u1, u2 = _load_part(xh, rot_lo + 2 * HALF, sxd, th_mask, HALF, BLOCK_HALF, IS_NEOX)
    if COPY_REST:
        k = tl.arange(0, BLOCK_REST)
        rest_lo = 0 if NOPE_FIRST else rot_width
        mr = th_mask[:, :, None] & (k < head_dim - rot_width)[None, None, :]
        rest = tl.load(xh[:, :, None] + (rest_lo + k)[None, None, :] * sxd, mask=mr)
        tl.store(yh[:, :, None] + (rest_lo + k)[None, None, :] * syd, rest.to(out_ptr.dtype.element_ty), mask=mr)

    row, row2, valid = _token_rows(tok, t_mask, n_inner, pos_ptr, off_ptr, cu_ptr, stride_p_o, stride_p_i, n_seqs,
                                   search_steps, img_width, ROW_MODE, HAS_OFFSETS, BLOCK_T)
    rot3 = valid[:, None, None] & (heads < n_heads)[None, :, None]
    c1, c2, s1, s2 = _tables(cos_ptr, sin_ptr, row, n_rows, stride_t_r, stride_t_f, valid,
                             HALF, BLOCK_HALF, IS_NEOX, REUSE, IS_FREQS)
    o1, o2 = _turn(x1, x2, c1, c2, s1, s2, rot3, BACKWARD)
    dt = out_ptr.dtype.element_ty
    _store_part(yh, rot_lo, syd, th_mask, o1.to(dt), o2.to(dt), HALF, BLOCK_HALF, IS_NEOX)
    if N_PARTS == 2:
        c1, c2, s1, s2 = _tables(cos2_ptr, sin2_ptr, row2, n_rows2, stride_t2_r, stride_t2_f, valid,
                                 HALF, BLOCK_HALF, IS_NEOX, REUSE, IS_FREQS)
        o1, o2 = _turn(u1, u2, c1, c2, s1, s2, rot3, BACKWARD)
        _store_part(yh, rot_lo + 2 * HALF, syd, th_mask, o1.to(dt), o2.to(dt), HALF, BLOCK_HALF, IS_NEOX)


@triton.jit(do_not_specialize=["n_tokens", "n_rows", "n_rows2", "n_seqs", "search_steps"])
def _rope_kernel(
    x_ptr, out_ptr,               # first tensor (Q), viewed (outer, inner, heads, d)
    x2_ptr, out2_ptr,             # second tensor (K): same tokens, its own heads and strides
    cos_ptr, sin_ptr,             # (rows, F) cached tables, or angles in cos_ptr (IS_FREQS)
    cos2_ptr, sin2_ptr,           # 2-D: the width tables
    pos_ptr, off_ptr,             # RowMode.POSITIONS: (outer, inner) positions (+ offsets)
    cu_ptr,                       # RowMode.VARLEN: (n_seqs + 1,) cumulative sequence lengths
    stride_x_o, stride_x_i, stride_x_h, stride_x_d,
    stride_y_o, stride_y_i, stride_y_h, stride_y_d,
    stride_x2_o, stride_x2_i, stride_x2_h, stride_x2_d,
    stride_y2_o, stride_y2_i, stride_y2_h, stride_y2_d,
    stride_t_r, stride_t_f, stride_t2_r, stride_t2_f,
    stride_p_o, stride_p_i,       # positions (+ offsets); RowMode.VARLEN: cu_seqlens' stride, 0
    n_inner, n_tokens,
    n_heads, n_heads2,            # heads of x and x2 (0: no second tensor)
    n_rows, n_rows2,              # table rows: a row outside [0, n_rows) gives NaN
    n_seqs, search_steps,         # RowMode.VARLEN: binary-search steps over cu_seqlens
    img_width,                    # RowMode.IMAGE
    head_dim,
    ROW_MODE: tl.constexpr,       # a RowMode
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
    n_blocks = tl.cdiv(n_heads, BLOCK_H)
    pid_h, tok, t_mask = _token_block(n_blocks + tl.cdiv(n_heads2, BLOCK_H), n_tokens, BLOCK_T, INT64)
    if pid_h < n_blocks:
        _rotate_heads(x_ptr, out_ptr, stride_x_o, stride_x_i, stride_x_h, stride_x_d,
                      stride_y_o, stride_y_i, stride_y_h, stride_y_d, pid_h, n_heads, head_dim, tok, t_mask,
                      cos_ptr, sin_ptr, cos2_ptr, sin2_ptr, pos_ptr, off_ptr, cu_ptr,
                      stride_t_r, stride_t_f, stride_t2_r, stride_t2_f, stride_p_o, stride_p_i,
                      n_inner, n_rows, n_rows2, n_seqs, search_steps, img_width,
                      ROW_MODE, HAS_OFFSETS, IS_FREQS, IS_NEOX, REUSE, BACKWARD, NOPE_FIRST, COPY_REST,
                      HALF, BLOCK_HALF, BLOCK_REST, BLOCK_T, BLOCK_H)
    else:
        _rotate_heads(x2_ptr, out2_ptr, stride_x2_o, stride_x2_i, stride_x2_h, stride_x2_d,
                      stride_y2_o, stride_y2_i, stride_y2_h, stride_y2_d, pid_h - n_blocks, n_heads2, head_dim,
                      tok, t_mask, cos_ptr, sin_ptr, cos2_ptr, sin2_ptr, pos_ptr, off_ptr, cu_ptr,
                      stride_t_r, stride_t_f, stride_t2_r, stride_t2_f, stride_p_o, stride_p_i,
                      n_inner, n_rows, n_rows2, n_seqs, search_steps, img_width,
                      ROW_MODE, HAS_OFFSETS, IS_FREQS, IS_NEOX, REUSE, BACKWARD, NOPE_FIRST, COPY_REST,
                      HALF, BLOCK_HALF, BLOCK_REST, BLOCK_T, BLOCK_H)
