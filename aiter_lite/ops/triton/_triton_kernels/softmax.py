"""Softmax and log-softmax over the last dim of 2-D row views, forward and backward.

* ``_softmax_kernel``: BLOCK_M rows of up to BLOCK_N columns held in registers; each
  row read once.
* ``_softmax_looped_kernel``: one row per program, in BLOCK_N-wide chunks: a pass for
  the row's statistics (forward: an online max and sum of exponentials), kept in L2,
  then a second pass that writes; the forward may cut a row into segments, a program
  each, that exchange their statistics between the passes.
* ``_softmax_split_kernel``: a wide row split over programs, each segment read once and
  held in registers; the programs of a row exchange their segments' max and sum.

Each takes ``BACKWARD``: it then reads the forward's output y and its gradient dy and
writes x's gradient, ``y * (dy - sum(dy * y))`` (softmax) or ``dy - exp(y) * sum(dy)``
(log-softmax), one row sum each (split: the segments' sums exchanged as the forward's
statistics are).

Edge rows behave as torch.softmax's: a row holding NaN or +inf comes out all NaN, a
row of -inf all NaN; -inf elements of other rows give 0 (log: -inf). A NaN row of y
gives a NaN row of gradient.
"""

import triton
import triton.language as tl

from aiter_lite.ops.triton._triton_kernels.split_rows import _segment_release, _segment_ticket, co_resident, segments_waiting


LOG2E = tl.constexpr(1.4426950408889634)


@triton.jit
def _finish(x, m, s, LOG: tl.constexpr):
    """softmax exp(x - m) / s, or log-softmax (x - m) - log(s), from the row's max m and
    sum s of exp(x - m)."""
    if LOG:
        return (x - m) - tl.log(s)
    return tl.exp(x - m) / s


@triton.jit
def _grad_terms(y, dy, LOG: tl.constexpr):
    """What x's gradient sums over a row: dy * y (softmax) or dy (log-softmax); 0 on lanes
    loaded as 0 (past the row)."""
    if LOG:
        return dy
    return dy * y


@triton.jit
def _grad(y, dy, s, LOG: tl.constexpr):
    """x's gradient from the forward's output y, its gradient dy and the row's sum s of
    ``_grad_terms``."""
    if LOG:
        return dy - tl.exp(y) * s
    return y * (dy - s)


@triton.jit
def _load_grad(y_ptrs, dy_ptrs, mask):
    """The forward's output and its gradient in fp32, 0 on masked lanes."""
    return (tl.load(y_ptrs, mask=mask, other=0.0).to(tl.float32),
            tl.load(dy_ptrs, mask=mask, other=0.0).to(tl.float32))


@triton.jit
def _load_evict(ptrs, mask, other, EVICT: tl.constexpr, EVEN: tl.constexpr):
    """A load in fp32 under an L2 eviction policy (``EVICT``: "evict_last" for a pass whose
    rows are read again, "evict_first" for the last); ``EVEN``: every lane in the row,
    unmasked, else ``other`` on masked lanes."""
    if EVEN:
        return tl.load(ptrs, eviction_policy=EVICT).to(tl.float32)
    return tl.load(ptrs, mask=mask, other=other, eviction_policy=EVICT).to(tl.float32)


@triton.jit
def _load_grad_evict(y_ptrs, dy_ptrs, mask, EVICT: tl.constexpr, EVEN: tl.constexpr):
    """``_load_grad`` under an L2 eviction policy (``_load_evict``)."""
    return _load_evict(y_ptrs, mask, 0.0, EVICT, EVEN), _load_evict(dy_ptrs, mask, 0.0, EVICT, EVEN)


@triton.jit
def _softmax_kernel(
    in_ptr, dy_ptr, out_ptr,      # forward: x, None, y; BACKWARD: y, dy, x's gradient
    stride_in_row, stride_dy_row, stride_out_row,
    n_rows, n_cols,
    LOG: tl.constexpr,
    BACKWARD: tl.constexpr,
    INT64: tl.constexpr,
    BLOCK_M: tl.constexpr,        # rows per program
    BLOCK_N: tl.constexpr,        # >= n_cols
):
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    if INT64:
        rows = rows.to(tl.int64)
    cols = tl.arange(0, BLOCK_N)
    mask = (rows < n_rows)[:, None] & (cols < n_cols)[None, :]
    in_ptrs = in_ptr + rows[:, None] * stride_in_row + cols[None, :]
    if BACKWARD:
        y, dy = _load_grad(in_ptrs, dy_ptr + rows[:, None] * stride_dy_row + cols[None, :], mask)
        out = _grad(y, dy, tl.sum(_grad_terms(y, dy, LOG), axis=1)[:, None], LOG)
    else:
        x = tl.load(in_ptrs, mask=mask, other=float("-inf")).to(tl.float32)
        m = tl.max(x, axis=1)
        # masked lanes add 0 (a row of -inf still sums to NaN through its own lanes)
        e = tl.where(mask, tl.exp(x - m[:, None]), 0.0)
        s = tl.sum(e, axis=1)
        if LOG:
            out = (x - m[:, None]) - tl.log(s)[:, None]
        else:
            out = e / s[:, None]
    tl.store(out_ptr + rows[:, None] * stride_out_row + cols[None, :], out.to(out_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _rescale(s, m, m_new):
    """s, a sum of exp(x - m), as a sum of exp(x - m_new) (m_new >= m; equal maxima,
    -inf included, keep s as it is)."""
    return tl.where(m == m_new, s, s * tl.exp(m - m_new))


@co_resident(segments_waiting)
@triton.jit
def _softmax_looped_kernel(
    in_ptr, dy_ptr, out_ptr,      # forward: x, None, y; BACKWARD: y, dy, x's gradient
    stride_in_row, stride_dy_row, stride_out_row,
    n_cols,
    slot_ptr,                     # SPLIT: as _softmax_split_kernel's; else unused
    n_rows, n_segs, seg_cols,     # SPLIT: a row's segments of seg_cols columns (a multiple of BLOCK_N)
    LOG: tl.constexpr,
    BACKWARD: tl.constexpr,
    INT64: tl.constexpr,
    SPLIT: tl.constexpr,          # forward: a row cut into n_segs segments, a program each
    PHASE: tl.constexpr,          # SPLIT: 0 all at once; 1 / 2 first / second half alone (interpreter)
    BLOCK_N: tl.constexpr,        # columns per chunk
    BLOCK_S: tl.constexpr,        # SPLIT: next power of 2 >= n_segs
    EVEN: tl.constexpr,           # n_cols (and seg_cols) a multiple of BLOCK_N: loads and stores unmasked
):
    """One row (forward with SPLIT: one segment of a row) per program, in BLOCK_N-wide
    chunks: a pass for the statistics, its reads kept in L2 (evict last), then a writing
    pass whose reads are evicted first, so the first pass's chunks of the rows in flight
    stay in L2 for their second read. With SPLIT a row's programs (tickets taken in start
    order, as ``_softmax_split_kernel``'s) exchange their segments' max and sum between
    the passes."""
    if SPLIT:
        row, seg = _segment_ticket(slot_ptr, n_rows, n_segs, PHASE)
        c0 = seg.to(tl.int32) * seg_cols
        c1 = tl.minimum(c0 + seg_cols, n_cols)
    else:
        row = tl.program_id(0)
        if INT64:
            row = row.to(tl.int64)
        c0 = 0
        c1 = n_cols
    in_row = in_ptr + row * stride_in_row
    out_row = out_ptr + row * stride_out_row
    cols = tl.arange(0, BLOCK_N)
    m = tl.full([], float("-inf"), tl.float32)
    s = tl.zeros([], dtype=tl.float32)
    # BACKWARD: the running sum held by every lane (the same value in each), not one scalar:
    # 138 against 145 us at 2048 x 32768 (H100, softmax)
    s_lanes = tl.zeros([BLOCK_N], dtype=tl.float32)
    if PHASE != 2:
        for start in range(c0, c1, BLOCK_N):
            mask = start + cols < c1
            if BACKWARD:
                # kept in L2 for the second pass (one row a program, a few programs an SM: the
                # rows in flight fit it)
                y, dy = _load_grad_evict(in_row + start + cols, dy_ptr + row * stride_dy_row + start + cols, mask,
                                         "evict_last", EVEN)
                s_lanes = s_lanes + tl.sum(_grad_terms(y, dy, LOG), axis=0)
            else:
                x = _load_evict(in_row + start + cols, mask, float("-inf"), "evict_last", EVEN)
                m_c = tl.max(x, axis=0)
                # a chunk of -inf adds nothing (its exp(x - m_c) would be NaN)
                s_c = tl.where(m_c == float("-inf"), 0.0, tl.sum(tl.exp(x - m_c), axis=0))
                m_new = tl.maximum(m, m_c)
                s = _rescale(s, m, m_new) + _rescale(s_c, m_c, m_new)
                m = m_new
    if BACKWARD:
        s = tl.max(s_lanes, axis=0)
    elif SPLIT:
        slot_row = slot_ptr + row * n_segs
        if PHASE != 2:
            _publish(slot_row + seg, m, s)
        if PHASE != 1:
            m, s = _gather(slot_row, n_segs, BLOCK_S)
            _segment_release(slot_ptr, row, n_rows, n_segs, BLOCK_S)
    else:  # a row of -inf: NaN, as torch (exp(-inf - -inf))
        s = tl.where(m == float("-inf"), float("nan"), s)
    if PHASE != 1:
        if not BACKWARD and not LOG:
            # softmax: exp2((x - m) * log2(e) - log2(s)), the division folded into the exponent
            # (one multiply-add where exp(x - m) / s takes two multiplies: 2048 x 32768 78.5
            # against 82.6 us, 16384 x 32768 560 against 597 on an H200); a NaN s stays NaN
            lse2 = tl.log2(s)
        for start in range(c0, c1, BLOCK_N):
            mask = start + cols < c1
            if BACKWARD:
                y, dy = _load_grad_evict(in_row + start + cols, dy_ptr + row * stride_dy_row + start + cols, mask,
                                         "evict_first", EVEN)
                out = _grad(y, dy, s, LOG)
            else:
                x = _load_evict(in_row + start + cols, mask, float("-inf"), "evict_first", EVEN)
                out = _finish(x, m, s, LOG) if LOG else tl.exp2((x - m) * LOG2E - lse2)
            if EVEN:  # 16384-wide chunks at 2048 x 32768 (H100): 138 us, 155-161 masked
                tl.store(out_row + start + cols, out.to(out_ptr.dtype.element_ty))
            else:
                tl.store(out_row + start + cols, out.to(out_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _publish(slot, m, s):
    """A segment's max and sum as one 64-bit word: the max's bits high, the sum's (never
    negative) low with the sign bit flipped, so a published word is never 0, the value
    of an unpublished slot. Exchanged at device scope: it reaches the point of coherence
    every program reads from."""
    hi = m.to(tl.uint32, bitcast=True).to(tl.uint64)
    lo = (s.to(tl.uint32, bitcast=True) ^ 0x80000000).to(tl.uint64)
    tl.atomic_xchg(slot, ((hi << 32) | lo).to(tl.int64, bitcast=True), sem="relaxed", scope="gpu")


@triton.jit
def _wait_published(slot_row, n_segs, BLOCK_S: tl.constexpr):
    """Spin until every segment of the row has published (no word 0); the words as uint64
    and the mask of the row's segments."""
    g = tl.arange(0, BLOCK_S)
    g_mask = g < n_segs
    zero = tl.zeros([BLOCK_S], dtype=tl.int64)
    v = tl.where(g_mask, tl.atomic_add(slot_row + g, zero, mask=g_mask, sem="relaxed", scope="gpu"), 1)
    while tl.sum((v == 0).to(tl.int32), axis=0) > 0:
        v = tl.where(g_mask, tl.atomic_add(slot_row + g, zero, mask=g_mask, sem="relaxed", scope="gpu"), 1)
    return v.to(tl.uint64, bitcast=True), g_mask


@triton.jit
def _gather(slot_row, n_segs, BLOCK_S: tl.constexpr):
    """Wait until every segment of the row has published; the row's max and sum (every
    sibling merges the same words in the same order: the same bits in each)."""
    u, g_mask = _wait_published(slot_row, n_segs, BLOCK_S)
    m_g = tl.where(g_mask, (u >> 32).to(tl.uint32).to(tl.float32, bitcast=True), float("-inf"))
    s_g = tl.where(g_mask, ((u & 0xFFFFFFFF).to(tl.uint32) ^ 0x80000000).to(tl.float32, bitcast=True), 0.0)
    m = tl.max(m_g, axis=0)
    s = tl.sum(_rescale(s_g, m_g, m), axis=0)
    return m, tl.where(m == float("-inf"), float("nan"), s)


@triton.jit
def _publish_sum(slot, s):
    """A segment's gradient sum as one 64-bit word, never 0: its bits high, 1 low."""
    hi = s.to(tl.uint32, bitcast=True).to(tl.uint64)
    tl.atomic_xchg(slot, ((hi << 32) | 1).to(tl.int64, bitcast=True), sem="relaxed", scope="gpu")


@triton.jit
def _gather_sum(slot_row, n_segs, BLOCK_S: tl.constexpr):
    """Wait until every segment of the row has published its gradient sum; their total
    (added in the same order by every sibling: the same bits in each)."""
    u, g_mask = _wait_published(slot_row, n_segs, BLOCK_S)
    return tl.sum(tl.where(g_mask, (u >> 32).to(tl.uint32).to(tl.float32, bitcast=True), 0.0), axis=0)


@co_resident(segments_waiting)
@triton.jit
def _softmax_split_kernel(
    x_ptr, dy_ptr, y_ptr,         # forward: x, None, y; BACKWARD: y, dy, x's gradient
    slot_ptr,                     # int64 (n_rows * n_segs + 1 + n_rows,), zeroed: published statistics, a
                                  # ticket, a count a row of the programs done with them; left zeroed
    stride_x_row, stride_dy_row, stride_y_row,
    n_rows, n_cols, n_segs,
    LOG: tl.constexpr,
    BACKWARD: tl.constexpr,
    PHASE: tl.constexpr,          # 0 all at once; 1 / 2 first / second half alone (interpreter)
    BLOCK_N: tl.constexpr,        # the segment: one tile, held in registers
    BLOCK_S: tl.constexpr,        # next power of 2 >= n_segs
    EVEN: tl.constexpr,           # n_cols a multiple of BLOCK_N: no masks
):
    """A wide row split into BLOCK_N-wide segments, one program each, each read once and
    held in registers: the programs of a row publish their segment's max and sum (BACKWARD:
    its sum of ``_grad_terms``) and wait for each other's, then write what they hold.
    Programs take their segment in start order (a ticket), so the siblings a program waits
    for have started or start as earlier rows finish (n_segs programs must fit the GPU at
    once). The ticket is int64, so every offset below is 64-bit."""
    row, seg = _segment_ticket(slot_ptr, n_rows, n_segs, PHASE)
    cols = seg * BLOCK_N + tl.arange(0, BLOCK_N)
    x_seg = x_ptr + row * stride_x_row + cols
    slot_row = slot_ptr + row * n_segs
    if BACKWARD:
        dy_seg = dy_ptr + row * stride_dy_row + cols
        if EVEN:
            y = tl.load(x_seg).to(tl.float32)
            dy = tl.load(dy_seg).to(tl.float32)
        else:
            y, dy = _load_grad(x_seg, dy_seg, cols < n_cols)
        if PHASE != 2:
            _publish_sum(slot_row + seg, tl.sum(_grad_terms(y, dy, LOG), axis=0))
        if PHASE != 1:
            s = _gather_sum(slot_row, n_segs, BLOCK_S)
            _segment_release(slot_ptr, row, n_rows, n_segs, BLOCK_S)
            out = _grad(y, dy, s, LOG)
    else:
        if EVEN:  # no per-column mask held across the wait (sm_90: 72 registers against 150 at 4096 wide)
            x = tl.load(x_seg).to(tl.float32)
        else:
            x = tl.load(x_seg, mask=cols < n_cols, other=float("-inf")).to(tl.float32)
        if PHASE != 2:
            m_c = tl.max(x, axis=0)
            # -inf lanes (and lanes past the row) give 0, so a segment of -inf sums to 0
            e = tl.where(x == float("-inf"), 0.0, tl.exp(x - m_c))
            _publish(slot_row + seg, m_c, tl.sum(e, axis=0))
        if PHASE == 0:
            m, s = _gather(slot_row, n_segs, BLOCK_S)
            _segment_release(slot_ptr, row, n_rows, n_segs, BLOCK_S)
            if LOG:
                out = (x - m) - tl.log(s)
            else:  # the exponentials already taken, rescaled: one exp per element
                out = e * (tl.exp(m_c - m) / s)
        elif PHASE == 2:
            m, s = _gather(slot_row, n_segs, BLOCK_S)
            _segment_release(slot_ptr, row, n_rows, n_segs, BLOCK_S)
            out = _finish(x, m, s, LOG)
    if PHASE != 1:
        y_seg = y_ptr + row * stride_y_row + cols
        if EVEN:
            tl.store(y_seg, out.to(y_ptr.dtype.element_ty))
        else:
            tl.store(y_seg, out.to(y_ptr.dtype.element_ty), mask=cols < n_cols)
