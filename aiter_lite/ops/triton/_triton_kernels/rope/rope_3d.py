"""3-D RoPE of video tokens (Wan 2.x's ``rope_apply``), sequence-parallel aware.

x is (B, S, heads, C): batch b's tokens are a (f, h, w) grid (``grid_sizes[b]``) in f-major
order, this rank holding global tokens ``sp_rank * S`` .. ``+ S``. Channel pair j (channels
2j, 2j + 1, GPT-J style) turns by ``freqs[row, j]`` (a complex table given as its real
and imaginary planes), row = the token's frame for j < C1, its grid row for j < C1 + C2,
its column otherwise. Tokens past f * h * w (the padding of the last rank) pass through; a
row past the table gives NaN (the RoPE ops' rule). A program takes BLOCK_T tokens and
BLOCK_H heads of one batch entry; the output is fp32.
"""

import triton
import triton.language as tl

from aiter_lite.ops.triton._triton_kernels.rope.rope import _load_part, _store_part, _turn


@triton.jit(do_not_specialize=["seq", "n_rows", "sp_rank"])
def _rope_3d_kernel(
    x_ptr, tab_ptr, grid_ptr, out_ptr,   # tab: freqs as (rows, C / 2, 2) reals; out: (B, S, heads, C) fp32, contiguous
    sx_b, sx_t, sx_h, stride_f_r, stride_f_c, stride_f_p, stride_g_b, stride_g_d,
    seq, n_heads, n_rows, sp_rank,
    C1: tl.constexpr,
    C2: tl.constexpr,
    HALF: tl.constexpr,               # C / 2 pairs
    BLOCK_HALF: tl.constexpr,
    BLOCK_T: tl.constexpr,
    BLOCK_H: tl.constexpr,
    INT64: tl.constexpr,
):
    n_hblocks = tl.cdiv(n_heads, BLOCK_H)
    pid = tl.program_id(0)
    b = tl.program_id(1)
    tok = (pid // n_hblocks) * BLOCK_T + tl.arange(0, BLOCK_T)
    heads = (pid % n_hblocks) * BLOCK_H + tl.arange(0, BLOCK_H)
    if INT64:
        b = b.to(tl.int64)
        tok = tok.to(tl.int64)
    t_mask = tok < seq
    th_mask = t_mask[:, None] & (heads < n_heads)[None, :]

    f = tl.load(grid_ptr + b * stride_g_b).to(tl.int64)
    h = tl.load(grid_ptr + b * stride_g_b + stride_g_d).to(tl.int64)
    w = tl.load(grid_ptr + b * stride_g_b + 2 * stride_g_d).to(tl.int64)
    g = tl.cast(sp_rank, tl.int64) * seq + tok
    turns = t_mask & (g < f * h * w)  # the others: this rank's padding, passed through
    hw = tl.maximum(h * w, 1)
    fi = g // hw
    hi = (g % hw) // tl.maximum(w, 1)
    wi = g % tl.maximum(w, 1)
    j = tl.arange(0, BLOCK_HALF)
    row = tl.where(j[None, :] < C1, fi[:, None], tl.where(j[None, :] < C1 + C2, hi[:, None], wi[:, None]))
    m = turns[:, None] & (j < HALF)[None, :] & (row < n_rows)
    off = row * stride_f_r + j[None, :] * stride_f_c
    cos = tl.load(tab_ptr + off, mask=m, other=float("nan")).to(tl.float32)[:, None, :]
    sin = tl.load(tab_ptr + stride_f_p + off, mask=m, other=float("nan")).to(tl.float32)[:, None, :]

    xh = (x_ptr + b * sx_b + tok * sx_t)[:, None] + heads[None, :] * sx_h
    x1, x2 = _load_part(xh, 0, 1, th_mask, HALF, BLOCK_HALF, False)
    o1, o2 = _turn(x1, x2, cos, cos, sin, sin, turns[:, None, None], False)
    yh = (out_ptr + (b * seq + tok) * (n_heads * 2 * HALF))[:, None] + heads[None, :] * (2 * HALF)
    _store_part(yh, 0, 1, th_mask, o1, o2, HALF, BLOCK_HALF, False)
