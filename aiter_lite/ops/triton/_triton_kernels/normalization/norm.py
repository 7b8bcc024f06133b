"""RMSNorm and LayerNorm kernels, forward and backward, over rows of any width.

One forward kernel serves rms_norm, layer_norm and their fused-add forms:
``IS_RMS`` picks the statistic, ``HAS_*`` flags add the residual, the input bias,
the weight and the bias. Two regimes (``LOOPED``):

* the whole row block in registers: a (BLOCK_M, BLOCK_N) tile of BLOCK_M rows,
  BLOCK_N >= n_cols; several rows per program when rows are short;
* looped: one row per program in BLOCK_N-wide chunks, two passes (statistics,
  then normalize). The second pass re-reads the row, from L2 when the rows in
  flight fit there. With PREFETCH the first pass loads chunk i + 1 before
  summing chunk i.

A third regime has its own kernel (``_norm_fwd_split_kernel``): a wide row split
into one-tile segments, one program each, each segment read once and held in
registers while the programs of the row exchange their statistics.

Masked lanes load 0 and are excluded from every sum, so odd widths are exact.

``PAD_TO`` (0: off; compiled out) writes the output ``cdiv(n_cols, PAD_TO) * PAD_TO`` wide:
columns past n_cols hold 0 (``fused_add_rmsnorm_pad``, which pads the hidden size for the
next GEMM). The multiple is a model constant (128 or 256), so it is compiled in and the
padded width follows the runtime n_cols.

``CASTING_LLAMA`` (RMSNorm, ``casting_mode="llama"``) rounds where Hugging Face's
``LlamaRMSNorm`` rounds, as Liger-Kernel's casting mode of the same name: the fused add's
sum is normalized as stored in residual_out, and ``x * rstd`` is rounded to the dtype of
the normalized tensor before the weight multiplies it (in fp32; the product rounded once,
to the output's dtype). Without it every step is fp32 and only the output is rounded
(Gemma's ``GemmaRMSNorm``, and every LayerNorm).
"""

import triton
import triton.language as tl

from aiter_lite.ops.triton._triton_kernels.split_rows import _segment_ticket, co_resident, segments_waiting


@triton.jit
def _load_row_input(x_ptr, r_ptr, r_out_ptr, xb_ptr, x_offs, r_offs, r_out_offs, cols, mask, col_mask,
                    HAS_RESIDUAL: tl.constexpr, HAS_X_BIAS: tl.constexpr, EVICT: tl.constexpr):
    """x (+ x_bias) (+ residual) in fp32; with a residual, also stores the sum to r_out."""
    x = tl.load(x_ptr + x_offs, mask=mask, other=0.0, eviction_policy=EVICT).to(tl.float32)
    if HAS_X_BIAS:
        x += tl.load(xb_ptr + cols, mask=col_mask, other=0.0).to(tl.float32)
    if HAS_RESIDUAL:
        x += tl.load(r_ptr + r_offs, mask=mask, other=0.0, eviction_policy=EVICT).to(tl.float32)
        tl.store(r_out_ptr + r_out_offs, x.to(r_out_ptr.dtype.element_ty), mask=mask)
    return x


@triton.jit
def _reload_row_input(x_ptr, r_out_ptr, xb_ptr, x_offs, r_out_offs, cols, mask, col_mask,
                      HAS_RESIDUAL: tl.constexpr, HAS_X_BIAS: tl.constexpr, EVICT: tl.constexpr):
    """The normalized input again, for a later pass: the stored sum with a residual, else x (+ x_bias);
    ``EVICT`` "evict_first" on the last pass over the row, "evict_last" where another follows."""
    if HAS_RESIDUAL:
        x = tl.load(r_out_ptr + r_out_offs, mask=mask, other=0.0, eviction_policy=EVICT).to(tl.float32)
    else:
        x = tl.load(x_ptr + x_offs, mask=mask, other=0.0, eviction_policy=EVICT).to(tl.float32)
        if HAS_X_BIAS:
            x += tl.load(xb_ptr + cols, mask=col_mask, other=0.0).to(tl.float32)
    return x


@triton.jit
def _load_scale_shift(w_ptr, b_ptr, cols, col_mask, HAS_WEIGHT: tl.constexpr, HAS_BIAS: tl.constexpr):
    """The weight and bias under ``cols``, in their own dtype (0 where absent)."""
    w = tl.load(w_ptr + cols, mask=col_mask, other=0.0) if HAS_WEIGHT else 0.0
    b = tl.load(b_ptr + cols, mask=col_mask, other=0.0) if HAS_BIAS else 0.0
    return w, b


@triton.jit
def _apply_scale_shift(y, w, b, weight_offset, HAS_WEIGHT: tl.constexpr, HAS_BIAS: tl.constexpr):
    if HAS_WEIGHT:
        y = y * (w.to(tl.float32) + weight_offset)
    if HAS_BIAS:
        y = y + b.to(tl.float32)
    return y


@triton.jit
def _scale_shift(y, w_ptr, b_ptr, cols, col_mask, weight_offset, HAS_WEIGHT: tl.constexpr,
                 HAS_BIAS: tl.constexpr):
    w, b = _load_scale_shift(w_ptr, b_ptr, cols, col_mask, HAS_WEIGHT, HAS_BIAS)
    return _apply_scale_shift(y, w, b, weight_offset, HAS_WEIGHT, HAS_BIAS)


@triton.jit
def _as_stored(x, r_out_ptr, HAS_RESIDUAL: tl.constexpr, CASTING_LLAMA: tl.constexpr):
    """Llama casting: the fused add's sum as residual_out holds it (Hugging Face adds the
    residual in the model's dtype, then normalizes that)."""
    if CASTING_LLAMA and HAS_RESIDUAL:
        x = x.to(r_out_ptr.dtype.element_ty).to(tl.float32)
    return x


@triton.jit
def _round_xhat(xhat, x_ptr, r_out_ptr, HAS_RESIDUAL: tl.constexpr, CASTING_LLAMA: tl.constexpr):
    """Llama casting: x * rstd rounded to the normalized tensor's dtype (residual_out's in
    the fused-add forms, else the input's), as Hugging Face's ``.to(input_dtype)``."""
    if CASTING_LLAMA:
        if HAS_RESIDUAL:
            xhat = xhat.to(r_out_ptr.dtype.element_ty).to(tl.float32)
        else:
            xhat = xhat.to(x_ptr.dtype.element_ty).to(tl.float32)
    return xhat


@triton.jit
def _store_pad(y_rows, row_mask, n_cols, PAD_TO: tl.constexpr, BLOCK_N: tl.constexpr):
    """Zeros in columns [n_cols, n_out) of the rows at ``y_rows`` ((R,) row pointers) where
    ``row_mask``; n_out is n_cols rounded up to a multiple of PAD_TO. Stored apart from the
    normalized values (before them: nothing is held in registers yet), so a row's NaN stays
    in its n_cols columns."""
    n_out = tl.cdiv(n_cols, PAD_TO) * PAD_TO
    for start in tl.range(n_cols, n_out, BLOCK_N):
        cols = start + tl.arange(0, BLOCK_N)
        tl.store(y_rows[:, None] + cols[None, :], 0.0, mask=row_mask[:, None] & (cols < n_out)[None, :])


@triton.jit
def _accumulate(x, col_mask, shift, acc, acc_sq, IS_RMS: tl.constexpr):
    """A looped first pass's per-lane sums: of x^2 (RMSNorm), of x - shift and its square."""
    if IS_RMS:
        acc_sq += x * x
    else:
        xs = tl.where(col_mask, x - shift, 0.0)
        acc += xs
        acc_sq += xs * xs
    return acc, acc_sq


@triton.jit
def _looped_shift(x_row, r_row, xb_ptr, IS_RMS: tl.constexpr, HAS_RESIDUAL: tl.constexpr,
                  HAS_X_BIAS: tl.constexpr):
    """A looped first pass's shift: 0 (RMSNorm), else the row's first input element, so a
    large mean does not cancel the variance away (the shifted-data algorithm)."""
    if IS_RMS:
        shift = 0.0
    else:
        shift = tl.load(x_row).to(tl.float32)
        if HAS_X_BIAS:
            shift += tl.load(xb_ptr).to(tl.float32)
        if HAS_RESIDUAL:
            shift += tl.load(r_row).to(tl.float32)
    return shift


@triton.jit
def _looped_stats(acc, acc_sq, shift, n_cols, eps, IS_RMS: tl.constexpr):
    """The row's mean (0 for RMSNorm) and rstd from a looped first pass's per-lane sums."""
    if IS_RMS:
        mean = 0.0
        var = tl.sum(acc_sq, axis=0) / n_cols
    else:
        mean_s = tl.sum(acc, axis=0) / n_cols
        # clamped at 0 against rounding, NaN kept (a NaN or inf row normalizes to NaN, as the reference)
        var = tl.maximum(tl.sum(acc_sq, axis=0) / n_cols - mean_s * mean_s, 0.0, propagate_nan=tl.PropagateNan.ALL)
        mean = shift + mean_s
    return mean, tl.rsqrt(var + eps)


@triton.jit
def _normalize_chunk(x_row, r_out_row, xb_ptr, w_ptr, b_ptr, y_row, cols, col_mask, mean, rstd, weight_offset,
                     HAS_RESIDUAL: tl.constexpr, HAS_X_BIAS: tl.constexpr, HAS_WEIGHT: tl.constexpr,
                     HAS_BIAS: tl.constexpr, CASTING_LLAMA: tl.constexpr):
    """A looped second pass's chunk: re-read (the stored sum with a residual), normalize, store."""
    x = _reload_row_input(x_row, r_out_row, xb_ptr, cols, cols, cols, col_mask, col_mask, HAS_RESIDUAL, HAS_X_BIAS,
                          "evict_first")
    xhat = _round_xhat((x - mean) * rstd, x_row, r_out_row, HAS_RESIDUAL, CASTING_LLAMA)
    y = _scale_shift(xhat, w_ptr, b_ptr, cols, col_mask, weight_offset, HAS_WEIGHT, HAS_BIAS)
    tl.store(y_row + cols, y.to(y_row.dtype.element_ty), mask=col_mask)


@triton.jit
def _norm_fwd_kernel(
    x_ptr, r_ptr, r_out_ptr, xb_ptr, w_ptr, b_ptr, y_ptr,
    mean_ptr, rstd_ptr,           # fp32 per-row statistics for backward (STORE_STATS)
    stride_x_row, stride_r_row, stride_r_out_row, stride_y_row,
    n_rows, n_cols,
    eps, weight_offset,           # runtime fp32: no recompile per value
    IS_RMS: tl.constexpr,         # RMSNorm, else LayerNorm
    HAS_RESIDUAL: tl.constexpr,   # x += residual, the sum stored to r_out
    HAS_X_BIAS: tl.constexpr,     # x += x_bias (N,) before the statistics
    HAS_WEIGHT: tl.constexpr,     # y *= weight + weight_offset
    HAS_BIAS: tl.constexpr,       # y += bias
    STORE_STATS: tl.constexpr,
    CASTING_LLAMA: tl.constexpr,  # RMSNorm: Hugging Face Llama's roundings (module doc)
    INT64: tl.constexpr,          # row offsets can pass 2^31
    EVICT: tl.constexpr,          # cache hint for the in-register tile's loads ("" or "evict_last")
    PREFETCH: tl.constexpr,       # looped: double-buffer the first pass's chunks in registers
    W_FIRST: tl.constexpr,        # in-register tile: load the weight and bias before the row
    N_STATIC: tl.constexpr,       # looped: n_cols as a compile-time value (0: a runtime loop)
    LOOPED: tl.constexpr,         # row wider than BLOCK_N: one row per program, two passes
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    PAD_TO: tl.constexpr = 0,     # y is n_cols rounded up to a multiple of this wide, zeros past n_cols (0: off)
):
    # scalars to fp32 (inductor passes Python floats as fp64); tl.cast: a float has no .to in the interpreter
    eps = tl.cast(eps, tl.float32)
    weight_offset = tl.cast(weight_offset, tl.float32)
    pid = tl.program_id(0)
    if INT64:
        pid = pid.to(tl.int64)
    if not LOOPED:
        rows = pid * BLOCK_M + tl.arange(0, BLOCK_M)
        cols = tl.arange(0, BLOCK_N)
        row_mask = rows < n_rows
        col_mask = cols < n_cols
        mask = row_mask[:, None] & col_mask[None, :]
        if PAD_TO > 0:  # first: the zeros need no data, and no registers are held yet
            _store_pad(y_ptr + rows * stride_y_row, row_mask, n_cols, PAD_TO, BLOCK_N)
        if W_FIRST:  # weight and bias in flight with the row: one memory round trip, not two
            w, b = _load_scale_shift(w_ptr, b_ptr, cols[None, :], col_mask[None, :], HAS_WEIGHT, HAS_BIAS)
        x = _load_row_input(x_ptr, r_ptr, r_out_ptr, xb_ptr,
                            rows[:, None] * stride_x_row + cols[None, :],
                            rows[:, None] * stride_r_row + cols[None, :],
                            rows[:, None] * stride_r_out_row + cols[None, :],
                            cols[None, :], mask, col_mask[None, :], HAS_RESIDUAL, HAS_X_BIAS, EVICT)
        x = _as_stored(x, r_out_ptr, HAS_RESIDUAL, CASTING_LLAMA)
        if IS_RMS:
            xc = x
        else:
            mean = tl.sum(x, axis=1) / n_cols
            xc = tl.where(mask, x - mean[:, None], 0.0)
        rstd = tl.rsqrt(tl.sum(xc * xc, axis=1) / n_cols + eps)
        if not W_FIRST:
            w, b = _load_scale_shift(w_ptr, b_ptr, cols[None, :], col_mask[None, :], HAS_WEIGHT, HAS_BIAS)
        xhat = _round_xhat(xc * rstd[:, None], x_ptr, r_out_ptr, HAS_RESIDUAL, CASTING_LLAMA)
        y = _apply_scale_shift(xhat, w, b, weight_offset, HAS_WEIGHT, HAS_BIAS)
        tl.store(y_ptr + rows[:, None] * stride_y_row + cols[None, :], y.to(y_ptr.dtype.element_ty), mask=mask)
        if STORE_STATS:
            tl.store(rstd_ptr + rows, rstd, mask=row_mask)
            if not IS_RMS:
                tl.store(mean_ptr + rows, mean, mask=row_mask)
    else:
        row = pid
        x_row = x_ptr + row * stride_x_row
        r_row = r_ptr + row * stride_r_row if HAS_RESIDUAL else r_ptr
        r_out_row = r_out_ptr + row * stride_r_out_row if HAS_RESIDUAL else r_out_ptr
        y_row = y_ptr + row * stride_y_row
        if PAD_TO > 0:
            one = tl.arange(0, 1)
            _store_pad(y_row + one, one < 1, n_cols, PAD_TO, BLOCK_N)
        # Pass 1: per-lane sums (LayerNorm: of x - shift), reduced once at the end.
        shift = _looped_shift(x_row, r_row, xb_ptr, IS_RMS, HAS_RESIDUAL, HAS_X_BIAS)
        acc = tl.zeros([BLOCK_N], dtype=tl.float32)
        acc_sq = tl.zeros([BLOCK_N], dtype=tl.float32)
        if N_STATIC > 0:  # the width known at compile time: chunks unrolled, loads issued together
            for start in tl.static_range(0, N_STATIC, BLOCK_N):
                cols = start + tl.arange(0, BLOCK_N)
                col_mask = cols < N_STATIC
                x = _load_row_input(x_row, r_row, r_out_row, xb_ptr, cols, cols, cols, cols, col_mask, col_mask,
                                    HAS_RESIDUAL, HAS_X_BIAS, "evict_last")
                x = _as_stored(x, r_out_row, HAS_RESIDUAL, CASTING_LLAMA)
                acc, acc_sq = _accumulate(x, col_mask, shift, acc, acc_sq, IS_RMS)
        else:
            if PREFETCH:
                x_n = tl.load(x_row + tl.arange(0, BLOCK_N), mask=tl.arange(0, BLOCK_N) < n_cols, other=0.0,
                              eviction_policy="evict_last")
                if HAS_RESIDUAL:
                    r_n = tl.load(r_row + tl.arange(0, BLOCK_N), mask=tl.arange(0, BLOCK_N) < n_cols, other=0.0,
                                  eviction_policy="evict_last")
            for start in tl.range(0, n_cols, BLOCK_N):
                cols = start + tl.arange(0, BLOCK_N)
                col_mask = cols < n_cols
                if PREFETCH:
                    x = x_n.to(tl.float32)
                    if HAS_RESIDUAL:
                        r_cur = r_n
                    nxt = cols + BLOCK_N
                    x_n = tl.load(x_row + nxt, mask=nxt < n_cols, other=0.0, eviction_policy="evict_last")
                    if HAS_RESIDUAL:
                        r_n = tl.load(r_row + nxt, mask=nxt < n_cols, other=0.0, eviction_policy="evict_last")
                    if HAS_X_BIAS:
                        x += tl.load(xb_ptr + cols, mask=col_mask, other=0.0).to(tl.float32)
                    if HAS_RESIDUAL:
                        x += r_cur.to(tl.float32)
                        tl.store(r_out_row + cols, x.to(r_out_ptr.dtype.element_ty), mask=col_mask)
                else:
                    x = _load_row_input(x_row, r_row, r_out_row, xb_ptr, cols, cols, cols, cols, col_mask, col_mask,
                                        HAS_RESIDUAL, HAS_X_BIAS, "evict_last")
                x = _as_stored(x, r_out_row, HAS_RESIDUAL, CASTING_LLAMA)
                acc, acc_sq = _accumulate(x, col_mask, shift, acc, acc_sq, IS_RMS)
        mean, rstd = _looped_stats(acc, acc_sq, shift, n_cols, eps, IS_RMS)
        # Pass 2: re-read (the stored sum, when there is a residual) and normalize.
        if N_STATIC > 0:
            for start in tl.static_range(0, N_STATIC, BLOCK_N):
                cols = start + tl.arange(0, BLOCK_N)
                _normalize_chunk(x_row, r_out_row, xb_ptr, w_ptr, b_ptr, y_row, cols, cols < N_STATIC, mean, rstd,
                                 weight_offset, HAS_RESIDUAL, HAS_X_BIAS, HAS_WEIGHT, HAS_BIAS, CASTING_LLAMA)
        else:
            for start in tl.range(0, n_cols, BLOCK_N):
                cols = start + tl.arange(0, BLOCK_N)
                _normalize_chunk(x_row, r_out_row, xb_ptr, w_ptr, b_ptr, y_row, cols, cols < n_cols, mean, rstd,
                                 weight_offset, HAS_RESIDUAL, HAS_X_BIAS, HAS_WEIGHT, HAS_BIAS, CASTING_LLAMA)
        if STORE_STATS:
            tl.store(rstd_ptr + row, rstd)
            if not IS_RMS:
                tl.store(mean_ptr + row, mean)


@triton.jit
def _publish_segment(slot, total, sq):
    """Publish a segment's statistics as one 64-bit word: its sum (0 for RMSNorm) in the
    high half; in the low half its sum of squares (RMSNorm) or squares about its own mean
    (LayerNorm), never negative, with the sign bit flipped, so a published word is never
    0, the value of an unpublished slot. An atomic exchange at device scope: the word
    reaches the point of coherence every program reads from (L2, or on a GPU of several
    dies, memory), not just this program's cache."""
    hi = total.to(tl.uint32, bitcast=True).to(tl.uint64)
    lo = (sq.to(tl.uint32, bitcast=True) ^ 0x80000000).to(tl.uint64)
    tl.atomic_xchg(slot, ((hi << 32) | lo).to(tl.int64, bitcast=True), sem="relaxed", scope="gpu")


@triton.jit
def _segments_stats(slot_row, n_segs, seg_len, n_cols, IS_RMS: tl.constexpr, BLOCK_S: tl.constexpr):
    """Wait for every segment of the row to publish; the row's mean and variance.

    The words are read with device-scope atomics (adding 0), at the same point of
    coherence they were published to, never from a stale cache line; each is one
    64-bit word, so a nonzero word is a whole one. Every sibling merges the same
    words in the same order (Chan's formula for LayerNorm): the same bits for every
    program of a row, whatever the arrival order.
    """
    g = tl.arange(0, BLOCK_S)
    g_mask = g < n_segs
    zero = tl.zeros([BLOCK_S], dtype=tl.int64)
    v = tl.atomic_add(slot_row + g, zero, mask=g_mask, sem="relaxed", scope="gpu")
    v = tl.where(g_mask, v, 1)
    while tl.sum((v == 0).to(tl.int32), axis=0) > 0:
        v = tl.atomic_add(slot_row + g, zero, mask=g_mask, sem="relaxed", scope="gpu")
        v = tl.where(g_mask, v, 1)
    u = v.to(tl.uint64, bitcast=True)
    sq = tl.where(g_mask, ((u & 0xFFFFFFFF).to(tl.uint32) ^ 0x80000000).to(tl.float32, bitcast=True), 0.0)
    if IS_RMS:
        mean = 0.0
        m2 = tl.sum(sq, axis=0)
    else:
        sums = tl.where(g_mask, (u >> 32).to(tl.uint32).to(tl.float32, bitcast=True), 0.0)
        mean = tl.sum(sums, axis=0) / n_cols
        n_g = tl.maximum(tl.minimum(n_cols - g * seg_len, seg_len), 1).to(tl.float32)
        d = tl.where(g_mask, sums / n_g - mean, 0.0)
        m2 = tl.sum(sq + n_g * d * d, axis=0)
    return mean, m2 / n_cols


@co_resident(segments_waiting)
@triton.jit
def _norm_fwd_split_kernel(
    x_ptr, r_ptr, r_out_ptr, xb_ptr, w_ptr, b_ptr, y_ptr,
    mean_ptr, rstd_ptr,           # fp32 per-row statistics for backward (STORE_STATS)
    slot_ptr,                     # int64 (n_rows * n_segs + 1,), zeroed: published statistics, a ticket
    stride_x_row, stride_r_row, stride_r_out_row, stride_y_row,
    n_rows, n_cols, n_segs,
    eps, weight_offset,
    IS_RMS: tl.constexpr,
    HAS_RESIDUAL: tl.constexpr,
    HAS_X_BIAS: tl.constexpr,
    HAS_WEIGHT: tl.constexpr,
    HAS_BIAS: tl.constexpr,
    STORE_STATS: tl.constexpr,
    CASTING_LLAMA: tl.constexpr,
    EVICT: tl.constexpr,
    PHASE: tl.constexpr,          # 0 all at once; 1 / 2 first / second half alone (interpreter)
    BLOCK_N: tl.constexpr,        # the segment: one tile, held in registers
    BLOCK_S: tl.constexpr,        # next power of 2 >= n_segs
    PAD_TO: tl.constexpr = 0,     # as _norm_fwd_kernel's; the last segment's program writes the zeros
):
    """A wide row split into BLOCK_N-wide segments, one program each, each segment read
    once and held in registers: the programs of a row publish their segment's
    statistics and wait for each other's, then normalize what they hold. Programs take
    their segment in start order (a ticket), so the siblings a program waits for have
    started or start as earlier rows finish (n_segs programs must fit the GPU at once).
    The ticket and the slots are int64, so every offset below is 64-bit."""
    # scalars to fp32 (inductor passes Python floats as fp64); tl.cast: a float has no .to in the interpreter
    eps = tl.cast(eps, tl.float32)
    weight_offset = tl.cast(weight_offset, tl.float32)
    row, seg = _segment_ticket(slot_ptr, n_rows, n_segs, PHASE)
    if PAD_TO > 0:
        one = tl.arange(0, 1)
        _store_pad(y_ptr + row * stride_y_row + one, one < (seg == n_segs - 1).to(tl.int32), n_cols, PAD_TO, BLOCK_N)
    cols = seg * BLOCK_N + tl.arange(0, BLOCK_N)
    col_mask = cols < n_cols
    x_row = x_ptr + row * stride_x_row
    r_row = r_ptr + row * stride_r_row if HAS_RESIDUAL else r_ptr
    r_out_row = r_out_ptr + row * stride_r_out_row if HAS_RESIDUAL else r_out_ptr
    if PHASE == 2:
        x = _reload_row_input(x_row, r_out_row, xb_ptr, cols, cols, cols, col_mask, col_mask,
                              HAS_RESIDUAL, HAS_X_BIAS, "evict_first")
    else:
        x = _load_row_input(x_row, r_row, r_out_row, xb_ptr, cols, cols, cols, cols, col_mask, col_mask,
                            HAS_RESIDUAL, HAS_X_BIAS, EVICT)
        x = _as_stored(x, r_out_row, HAS_RESIDUAL, CASTING_LLAMA)
        if IS_RMS:
            sq = tl.sum(x * x, axis=0)
            total = tl.zeros_like(sq)
        else:
            total = tl.sum(x, axis=0)
            xc = tl.where(col_mask, x - total / tl.minimum(n_cols - seg * BLOCK_N, BLOCK_N).to(tl.float32), 0.0)
            sq = tl.sum(xc * xc, axis=0)
        _publish_segment(slot_ptr + row * n_segs + seg, total, sq)
    if PHASE != 1:
        mean, var = _segments_stats(slot_ptr + row * n_segs, n_segs, BLOCK_N, n_cols, IS_RMS, BLOCK_S)
        rstd = tl.rsqrt(var + eps)
        xhat = _round_xhat((x - mean) * rstd, x_ptr, r_out_ptr, HAS_RESIDUAL, CASTING_LLAMA)
        y = _scale_shift(xhat, w_ptr, b_ptr, cols, col_mask, weight_offset, HAS_WEIGHT, HAS_BIAS)
        tl.store(y_ptr + row * stride_y_row + cols, y.to(y_ptr.dtype.element_ty), mask=col_mask)
        if STORE_STATS:
            if seg == 0:
                tl.store(rstd_ptr + row, rstd)
                if not IS_RMS:
                    tl.store(mean_ptr + row, mean)


@triton.jit
def _norm_bwd_row_sums_kernel(
    dy_ptr, x_ptr, w_ptr, mean_ptr, rstd_ptr,
    c1_ptr, c2_ptr,               # out, fp32 (splits, n_rows): this split's share of mean(x_hat * wdy), mean(wdy)
    stride_dy_row, stride_x_row,
    n_rows, n_cols, cols_per_split, weight_offset,
    IS_RMS: tl.constexpr, HAS_WEIGHT: tl.constexpr, INT64: tl.constexpr, BLOCK_N: tl.constexpr,
):
    """Looped backward, step 1: the two row reductions dx needs.

    Grid (rows, splits): program (row, s) sums columns [s * cols_per_split, (s + 1) *
    cols_per_split) of one row, so that few wide rows still fill the GPU; the splits'
    shares are added afterwards in a fixed order."""
    # scalars to fp32 (inductor passes Python floats as fp64); tl.cast: a float has no .to in the interpreter
    weight_offset = tl.cast(weight_offset, tl.float32)
    row = tl.program_id(0)
    split = tl.program_id(1)
    if INT64:
        row = row.to(tl.int64)
    rstd = tl.load(rstd_ptr + row)
    mean = 0.0 if IS_RMS else tl.load(mean_ptr + row)
    acc1 = tl.zeros([BLOCK_N], dtype=tl.float32)
    acc2 = tl.zeros([BLOCK_N], dtype=tl.float32)
    col_start = split * cols_per_split
    col_end = tl.minimum(col_start + cols_per_split, n_cols)
    for start in range(col_start, col_end, BLOCK_N):
        cols = start + tl.arange(0, BLOCK_N)
        col_mask = cols < col_end
        x = tl.load(x_ptr + row * stride_x_row + cols, mask=col_mask, other=0.0).to(tl.float32)
        wdy = tl.load(dy_ptr + row * stride_dy_row + cols, mask=col_mask, other=0.0).to(tl.float32)
        if HAS_WEIGHT:
            wdy *= tl.load(w_ptr + cols, mask=col_mask, other=0.0).to(tl.float32) + weight_offset
        xhat = tl.where(col_mask, (x - mean) * rstd, 0.0)
        acc1 += xhat * wdy
        acc2 += wdy
    out = split.to(tl.int64) * n_rows + row
    tl.store(c1_ptr + out, tl.sum(acc1, axis=0) / n_cols)
    if not IS_RMS:
        tl.store(c2_ptr + out, tl.sum(acc2, axis=0) / n_cols)


@triton.jit
def _bwd_load_rows(dy_ptr, x_ptr, mean_ptr, rstd_ptr, rows, row_end, cols, col_mask, stride_dy_row, stride_x_row,
                   IS_RMS: tl.constexpr):
    """x and dy (their own dtype), rstd and mean (0 for RMSNorm) of a (rows, cols) tile; rows past row_end read 0."""
    row_mask = rows < row_end
    mask = row_mask[:, None] & col_mask[None, :]
    x = tl.load(x_ptr + rows[:, None] * stride_x_row + cols[None, :], mask=mask, other=0.0)
    dy = tl.load(dy_ptr + rows[:, None] * stride_dy_row + cols[None, :], mask=mask, other=0.0)
    rstd = tl.load(rstd_ptr + rows, mask=row_mask, other=0.0)
    mean = rstd if IS_RMS else tl.load(mean_ptr + rows, mask=row_mask, other=0.0)
    return x, dy, rstd, mean


@triton.jit
def _norm_bwd_kernel(
    dy_ptr, x_ptr, w_ptr, mean_ptr, rstd_ptr, c1_ptr, c2_ptr, dx_ptr,
    dw_part_ptr, db_part_ptr,     # (programs along rows, n_cols) partial sums, one row per program (fp32 but for one)
    dres_ptr,                     # HAS_DRES: a gradient added to dx (the fused-add forms' residual_out gradient)
    stride_dy_row, stride_x_row, stride_dx_row, stride_dres_row,
    n_rows, n_cols, rows_per_program, weight_offset,
    IS_RMS: tl.constexpr,
    HAS_WEIGHT: tl.constexpr,
    NEED_DW: tl.constexpr,
    NEED_DB: tl.constexpr,
    ROW_SUMS: tl.constexpr,       # c1/c2 come from _norm_bwd_row_sums_kernel (looped rows)
    HAS_DRES: tl.constexpr,
    CASTING_LLAMA: tl.constexpr,  # dweight from x_hat rounded to x's dtype, as the forward multiplied it
    INT64: tl.constexpr,
    PREFETCH: tl.constexpr,       # load step i + 1 before computing step i
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
):
    """dx for a strip of rows and one column block; dweight/dbias partial sums over the strip.

    Grid (row strips, column blocks). Without ROW_SUMS the column block is the
    whole row and the row reductions happen here. Each program writes its own
    row of the partial buffers, reduced afterwards in a fixed order:
    deterministic, no atomics.

    Llama casting's rounding has no gradient (straight through): dx is the fp32 formula
    of every mode; dweight sums dy times the rounded x_hat the forward multiplied the
    weight by (x is the normalized tensor as stored: its dtype is the one rounded to).
    """
    # scalars to fp32 (inductor passes Python floats as fp64); tl.cast: a float has no .to in the interpreter
    weight_offset = tl.cast(weight_offset, tl.float32)
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    col_mask = cols < n_cols
    if HAS_WEIGHT:
        w = tl.load(w_ptr + cols, mask=col_mask, other=0.0).to(tl.float32) + weight_offset
    # Per-lane (BLOCK_M, BLOCK_N) accumulators, summed over rows once at the end:
    # a cross-warp reduction per step cost 40% at 262144 x 256 on an H200.
    dw_acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
    db_acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
    row_start = pid_m * rows_per_program
    if INT64:
        row_start = row_start.to(tl.int64)
    row_end = tl.minimum(row_start + rows_per_program, n_rows)
    if PREFETCH:
        x_n, dy_n, rstd_n, mean_n = _bwd_load_rows(dy_ptr, x_ptr, mean_ptr, rstd_ptr, row_start + tl.arange(0, BLOCK_M),
                                                   row_end, cols, col_mask, stride_dy_row, stride_x_row, IS_RMS)
    for r0 in range(row_start, row_end, BLOCK_M):
        rows = r0 + tl.arange(0, BLOCK_M)
        row_mask = rows < row_end
        mask = row_mask[:, None] & col_mask[None, :]
        if PREFETCH:
            # Registers double-buffered: the next step's loads are in flight while this one computes.
            x, dy, rstd, mean = x_n, dy_n, rstd_n, mean_n
            x_n, dy_n, rstd_n, mean_n = _bwd_load_rows(dy_ptr, x_ptr, mean_ptr, rstd_ptr, rows + BLOCK_M, row_end,
                                                       cols, col_mask, stride_dy_row, stride_x_row, IS_RMS)
        else:
            x, dy, rstd, mean = _bwd_load_rows(dy_ptr, x_ptr, mean_ptr, rstd_ptr, rows, row_end, cols, col_mask,
                                               stride_dy_row, stride_x_row, IS_RMS)
        x = x.to(tl.float32)
        dy = dy.to(tl.float32)
        if IS_RMS:
            xhat = x * rstd[:, None]
        else:
            xhat = tl.where(mask, (x - mean[:, None]) * rstd[:, None], 0.0)
        wdy = dy * w[None, :] if HAS_WEIGHT else dy
        if ROW_SUMS:
            c1 = tl.load(c1_ptr + rows, mask=row_mask, other=0.0)
        else:
            c1 = tl.sum(xhat * wdy, axis=1) / n_cols
        if IS_RMS:
            dx = (wdy - xhat * c1[:, None]) * rstd[:, None]
        else:
            if ROW_SUMS:
                c2 = tl.load(c2_ptr + rows, mask=row_mask, other=0.0)
            else:
                c2 = tl.sum(wdy, axis=1) / n_cols
            dx = (wdy - (xhat * c1[:, None] + c2[:, None])) * rstd[:, None]
        if HAS_DRES:
            dx += tl.load(dres_ptr + rows[:, None] * stride_dres_row + cols[None, :], mask=mask).to(tl.float32)
        tl.store(dx_ptr + rows[:, None] * stride_dx_row + cols[None, :], dx.to(dx_ptr.dtype.element_ty), mask=mask)
        if NEED_DW:
            if CASTING_LLAMA:
                dw_acc += dy * xhat.to(x_ptr.dtype.element_ty).to(tl.float32)
            else:
                dw_acc += dy * xhat
        if NEED_DB:
            db_acc += dy
    part = pid_m.to(tl.int64) * n_cols + cols
    if NEED_DW:
        tl.store(dw_part_ptr + part, tl.sum(dw_acc, axis=0).to(dw_part_ptr.dtype.element_ty), mask=col_mask)
    if NEED_DB:
        tl.store(db_part_ptr + part, tl.sum(db_acc, axis=0).to(db_part_ptr.dtype.element_ty), mask=col_mask)


@triton.jit
def _norm_bwd_reduce_kernel(
    dw_part_ptr, db_part_ptr,     # fp32 (n_parts, n_cols): the backward programs' partial sums
    dw_ptr, db_ptr,               # out (n_cols,), their own dtypes
    n_parts, n_cols,
    NEED_DW: tl.constexpr,
    NEED_DB: tl.constexpr,
    BLOCK_P: tl.constexpr,
    BLOCK_N: tl.constexpr,
):
    """dweight / dbias: the partial sums of a column block added over the parts in a fixed
    order (the same bits on every run) and stored in the outputs' dtypes; one launch for both."""
    cols = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    col_mask = cols < n_cols
    dw_acc = tl.zeros([BLOCK_P, BLOCK_N], dtype=tl.float32)
    db_acc = tl.zeros([BLOCK_P, BLOCK_N], dtype=tl.float32)
    for p0 in range(0, n_parts, BLOCK_P):
        parts = p0 + tl.arange(0, BLOCK_P)
        offs = parts.to(tl.int64)[:, None] * n_cols + cols[None, :]
        mask = (parts < n_parts)[:, None] & col_mask[None, :]
        if NEED_DW:
            dw_acc += tl.load(dw_part_ptr + offs, mask=mask, other=0.0)
        if NEED_DB:
            db_acc += tl.load(db_part_ptr + offs, mask=mask, other=0.0)
    if NEED_DW:
        tl.store(dw_ptr + cols, tl.sum(dw_acc, axis=0).to(dw_ptr.dtype.element_ty), mask=col_mask)
    if NEED_DB:
        tl.store(db_ptr + cols, tl.sum(db_acc, axis=0).to(db_ptr.dtype.element_ty), mask=col_mask)
