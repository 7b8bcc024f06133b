"""Softmax and log-softmax over the last dim of 2-D row views.

* ``_softmax_kernel``: BLOCK_M rows of up to BLOCK_N columns held in registers; each
  row read once.
* ``_softmax_looped_kernel``: one row per program, in BLOCK_N-wide chunks: an online
  pass for the row's max and sum of exponentials, then a second pass that writes.

Edge rows behave as torch.softmax's: a row holding NaN or +inf comes out all NaN, a
row of -inf all NaN; -inf elements of other rows give 0 (log: -inf).
"""

import triton
import triton.language as tl


@triton.jit
def _finish(x, m, s, LOG: tl.constexpr):
    """softmax exp(x - m) / s, or log-softmax (x - m) - log(s), from the row's max m and
    sum s of exp(x - m)."""
    if LOG:
        return (x - m) - tl.log(s)
    return tl.exp(x - m) / s


@triton.jit
def _softmax_kernel(
    x_ptr, y_ptr,
    stride_x_row, stride_y_row,
    n_rows, n_cols,
    LOG: tl.constexpr,
    INT64: tl.constexpr,
    BLOCK_M: tl.constexpr,        # rows per program
    BLOCK_N: tl.constexpr,        # >= n_cols
):
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    if INT64:
        rows = rows.to(tl.int64)
    cols = tl.arange(0, BLOCK_N)
    mask = (rows < n_rows)[:, None] & (cols < n_cols)[None, :]
    x = tl.load(x_ptr + rows[:, None] * stride_x_row + cols[None, :], mask=mask,
                other=float("-inf")).to(tl.float32)
    m = tl.max(x, axis=1)
    # masked lanes add 0 (a row of -inf still sums to NaN through its own lanes)
    e = tl.where(mask, tl.exp(x - m[:, None]), 0.0)
    s = tl.sum(e, axis=1)
    if LOG:
        y = (x - m[:, None]) - tl.log(s)[:, None]
    else:
        y = e / s[:, None]
    tl.store(y_ptr + rows[:, None] * stride_y_row + cols[None, :], y.to(y_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _rescale(s, m, m_new):
    """s, a sum of exp(x - m), as a sum of exp(x - m_new) (m_new >= m; equal maxima,
    -inf included, keep s as it is)."""
    return tl.where(m == m_new, s, s * tl.exp(m - m_new))


@triton.jit
def _softmax_looped_kernel(
    x_ptr, y_ptr,
    stride_x_row, stride_y_row,
    n_cols,
    LOG: tl.constexpr,
    INT64: tl.constexpr,
    BLOCK_N: tl.constexpr,        # columns per chunk
):
    row = tl.program_id(0)
    if INT64:
        row = row.to(tl.int64)
    x_row = x_ptr + row * stride_x_row
    y_row = y_ptr + row * stride_y_row
    cols = tl.arange(0, BLOCK_N)
    m = tl.full([], float("-inf"), tl.float32)
    s = tl.zeros([], dtype=tl.float32)
    for start in range(0, n_cols, BLOCK_N):
        mask = start + cols < n_cols
        x = tl.load(x_row + start + cols, mask=mask, other=float("-inf")).to(tl.float32)
        m_c = tl.max(x, axis=0)
        # a chunk of -inf adds nothing (its exp(x - m_c) would be NaN)
        s_c = tl.where(m_c == float("-inf"), 0.0, tl.sum(tl.where(mask, tl.exp(x - m_c), 0.0), axis=0))
        m_new = tl.maximum(m, m_c)
        s = _rescale(s, m, m_new) + _rescale(s_c, m_c, m_new)
        m = m_new
    # a row of -inf: NaN, as torch (exp(-inf - -inf))
    s = tl.where(m == float("-inf"), float("nan"), s)
    for start in range(0, n_cols, BLOCK_N):
        mask = start + cols < n_cols
        x = tl.load(x_row + start + cols, mask=mask, other=0.0).to(tl.float32)
        tl.store(y_row + start + cols, _finish(x, m, s, LOG).to(y_ptr.dtype.element_ty), mask=mask)
