"""RMSNorm / LayerNorm fused with fp8 / int8 quantization: the row read once, its
quantized form written, no normalized row through memory.

A row is normalized as the normalization kernels do it, rounded to the input's dtype
(the value the unfused norm would store, so fused and unfused agree), optionally
multiplied by a per-column smoothing scale (SmoothQuant's ``xscale``), then quantized
as the quant kernels do (``_quantize``): by a static per-tensor scale, or by the
row's own scale from its amax (DYNAMIC, per token; NaN-keeping, as the quant kernels':
a NaN in the normalized row, an inf input's inf / inf included, makes its scale NaN).
Two regimes (``LOOPED``):

* the row block in registers: a (BLOCK_M, BLOCK_N) tile, BLOCK_N >= n_cols;
* looped: one row per program in BLOCK_N-wide chunks: statistics, then (DYNAMIC)
  the amax of the normalized row, then normalize and quantize; the later passes
  re-read the row (the stored sum with a residual), from L2 when it is still there.
  With ``N_STATIC`` the width is compiled in: every pass unrolled, its chunks' loads
  issued together (as the norm kernel's STATIC loops).
"""

import triton
import triton.language as tl

from aiter_lite.ops.triton._triton_kernels.normalization.norm import (
    _accumulate,
    _apply_scale_shift,
    _as_stored,
    _load_row_input,
    _load_scale_shift,
    _looped_shift,
    _looped_stats,
    _reload_row_input,
    _round_xhat,
)
from aiter_lite.ops.triton._triton_kernels.quant.quant import _amax, _nan_max, _quantize, _row_scale


@triton.jit
def _normalized(xc, rstd, w, b, weight_offset, round_ty: tl.constexpr, HAS_WEIGHT: tl.constexpr,
                HAS_BIAS: tl.constexpr, CASTING_LLAMA: tl.constexpr):
    """``xc * rstd`` (rounded to ``round_ty`` first with CASTING_LLAMA) scaled and shifted,
    rounded to ``round_ty`` (the unfused norm's output), in fp32."""
    xhat = xc * rstd
    if CASTING_LLAMA:
        xhat = xhat.to(round_ty).to(tl.float32)
    return _apply_scale_shift(xhat, w, b, weight_offset, HAS_WEIGHT, HAS_BIAS).to(round_ty).to(tl.float32)


@triton.jit
def _normalized_chunk(x_row, r_out_row, xb_ptr, w_ptr, b_ptr, xs_ptr, cols, col_mask, mean, rstd, weight_offset,
                      round_ty: tl.constexpr, HAS_RESIDUAL: tl.constexpr, HAS_X_BIAS: tl.constexpr,
                      HAS_WEIGHT: tl.constexpr, HAS_BIAS: tl.constexpr, HAS_SMOOTH: tl.constexpr,
                      CASTING_LLAMA: tl.constexpr, EVICT: tl.constexpr):
    """A looped pass's chunk re-read and normalized: (the normalized value, it smoothed); ``EVICT``
    "evict_last" where another pass re-reads the row (the amax pass), else "evict_first"."""
    x = _reload_row_input(x_row, r_out_row, xb_ptr, cols, cols, cols, col_mask, col_mask, HAS_RESIDUAL, HAS_X_BIAS,
                          EVICT)
    w, b = _load_scale_shift(w_ptr, b_ptr, cols, col_mask, HAS_WEIGHT, HAS_BIAS)
    y = _normalized(x - mean, rstd, w, b, weight_offset, round_ty, HAS_WEIGHT, HAS_BIAS, CASTING_LLAMA)
    ys = y * tl.load(xs_ptr + cols, mask=col_mask, other=0.0).to(tl.float32) if HAS_SMOOTH else y
    return y, ys


@triton.jit
def _stats_chunk(x_row, r_row, r_out_row, xb_ptr, cols, col_mask, shift, acc, acc_sq, IS_RMS: tl.constexpr,
                 HAS_RESIDUAL: tl.constexpr, HAS_X_BIAS: tl.constexpr, CASTING_LLAMA: tl.constexpr):
    """The first pass's chunk: loaded (the sum stored with a residual, and taken as stored with
    CASTING_LLAMA), added to the per-lane sums."""
    x = _load_row_input(x_row, r_row, r_out_row, xb_ptr, cols, cols, cols, cols, col_mask, col_mask, HAS_RESIDUAL,
                        HAS_X_BIAS, "evict_last")
    x = _as_stored(x, r_out_row, HAS_RESIDUAL, CASTING_LLAMA)
    return _accumulate(x, col_mask, shift, acc, acc_sq, IS_RMS)


@triton.jit
def _amax_chunk(amax, x_row, r_out_row, xb_ptr, w_ptr, b_ptr, xs_ptr, cols, col_mask, mean, rstd, weight_offset,
                round_ty: tl.constexpr, HAS_RESIDUAL: tl.constexpr, HAS_X_BIAS: tl.constexpr,
                HAS_WEIGHT: tl.constexpr, HAS_BIAS: tl.constexpr, HAS_SMOOTH: tl.constexpr,
                CASTING_LLAMA: tl.constexpr):
    """The DYNAMIC pass's chunk: the per-lane amax of the normalized (smoothed) values. Without
    smoothing the values are not rounded to ``round_ty`` here: rounding to nearest is monotone
    and odd, so the amax of the rounded values is the rounded amax (``_rounded_amax``)."""
    if HAS_SMOOTH:
        _, ys = _normalized_chunk(x_row, r_out_row, xb_ptr, w_ptr, b_ptr, xs_ptr, cols, col_mask, mean, rstd,
                                  weight_offset, round_ty, HAS_RESIDUAL, HAS_X_BIAS, HAS_WEIGHT, HAS_BIAS, HAS_SMOOTH,
                                  CASTING_LLAMA, "evict_last")
    else:
        x = _reload_row_input(x_row, r_out_row, xb_ptr, cols, cols, cols, col_mask, col_mask, HAS_RESIDUAL,
                              HAS_X_BIAS, "evict_last")
        w, b = _load_scale_shift(w_ptr, b_ptr, cols, col_mask, HAS_WEIGHT, HAS_BIAS)
        xhat = _round_xhat((x - mean) * rstd, x_row, r_out_row, HAS_RESIDUAL, CASTING_LLAMA)
        ys = _apply_scale_shift(xhat, w, b, weight_offset, HAS_WEIGHT, HAS_BIAS)
    return _nan_max(amax, tl.where(col_mask, tl.abs(ys), 0.0))


@triton.jit
def _rounded_amax(amax, round_ty: tl.constexpr, HAS_SMOOTH: tl.constexpr):
    """The row's amax from ``_amax_chunk``'s per-lane values: rounded to ``round_ty`` once
    (each value was, with smoothing); NaN where any lane's is."""
    amax = _amax(amax, 0)
    return amax if HAS_SMOOTH else amax.to(round_ty).to(tl.float32)


@triton.jit
def _quantize_chunk(x_row, r_out_row, xb_ptr, w_ptr, b_ptr, xs_ptr, y_row, q_row, cols, col_mask, mean, rstd,
                    weight_offset, inv_scale, q_min, q_max, round_ty: tl.constexpr, HAS_RESIDUAL: tl.constexpr,
                    HAS_X_BIAS: tl.constexpr, HAS_WEIGHT: tl.constexpr, HAS_BIAS: tl.constexpr,
                    HAS_SMOOTH: tl.constexpr, STORE_Y: tl.constexpr, SOFT_ROUND: tl.constexpr,
                    CASTING_LLAMA: tl.constexpr):
    """The last pass's chunk: normalized, stored (STORE_Y), quantized and stored."""
    y, ys = _normalized_chunk(x_row, r_out_row, xb_ptr, w_ptr, b_ptr, xs_ptr, cols, col_mask, mean, rstd,
                              weight_offset, round_ty, HAS_RESIDUAL, HAS_X_BIAS, HAS_WEIGHT, HAS_BIAS, HAS_SMOOTH,
                              CASTING_LLAMA, "evict_first")
    if STORE_Y:
        tl.store(y_row + cols, y.to(y_row.dtype.element_ty), mask=col_mask)
    q = _quantize(ys, inv_scale, q_min, q_max, q_row.dtype.element_ty, SOFT_ROUND)
    tl.store(q_row + cols, q, mask=col_mask)


@triton.jit
def _norm_quant_kernel(
    x_ptr, r_ptr, r_out_ptr, xb_ptr, w_ptr, b_ptr,
    xs_ptr,                       # (n_cols,) smoothing scale, any float dtype (HAS_SMOOTH)
    q_ptr,                        # the quantized rows: its dtype is the format
    scale_ptr,                    # fp32: one element read (static) or one a row at stride_s written (DYNAMIC)
    ub_ptr,                       # fp32, one element: upper bound on a row's amax (HAS_UB)
    y_ptr,                        # the normalized rows, before smoothing, in x's dtype (STORE_Y)
    stride_x_row, stride_r_row, stride_r_out_row, stride_q_row, stride_y_row, stride_s,
    n_rows, n_cols,
    eps, weight_offset,           # runtime fp32
    q_min, q_max, min_scale,      # the output dtype's range and the dynamic scales' floor (fp32)
    IS_RMS: tl.constexpr,
    HAS_RESIDUAL: tl.constexpr,   # x += residual, the sum stored to r_out
    HAS_X_BIAS: tl.constexpr,
    HAS_WEIGHT: tl.constexpr,
    HAS_BIAS: tl.constexpr,
    HAS_SMOOTH: tl.constexpr,
    DYNAMIC: tl.constexpr,        # a scale per row from its amax, else the static scale
    HAS_UB: tl.constexpr,
    STORE_Y: tl.constexpr,
    INT64: tl.constexpr,          # row offsets can pass 2^31
    SOFT_ROUND: tl.constexpr,     # fp8 rounded in fp32 before the conversion (the interpreter)
    CASTING_LLAMA: tl.constexpr,  # RMSNorm: Hugging Face Llama's (and vLLM's) roundings, as the norm kernel's
    N_STATIC: tl.constexpr,       # looped: n_cols as a compile-time value (0: a runtime loop)
    LOOPED: tl.constexpr,         # one row per program in BLOCK_N chunks
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
):
    # scalars to fp32 (inductor passes Python floats as fp64); tl.cast: a float has no .to in the interpreter
    eps = tl.cast(eps, tl.float32)
    weight_offset = tl.cast(weight_offset, tl.float32)
    q_min = tl.cast(q_min, tl.float32)
    q_max = tl.cast(q_max, tl.float32)
    min_scale = tl.cast(min_scale, tl.float32)
    pid = tl.program_id(0)
    if INT64:
        pid = pid.to(tl.int64)
    round_ty = x_ptr.dtype.element_ty
    q_ty = q_ptr.dtype.element_ty
    if not LOOPED:
        rows = pid * BLOCK_M + tl.arange(0, BLOCK_M)
        cols = tl.arange(0, BLOCK_N)
        row_mask = rows < n_rows
        col_mask = cols < n_cols
        mask = row_mask[:, None] & col_mask[None, :]
        w, b = _load_scale_shift(w_ptr, b_ptr, cols[None, :], col_mask[None, :], HAS_WEIGHT, HAS_BIAS)
        x = _load_row_input(x_ptr, r_ptr, r_out_ptr, xb_ptr,
                            rows[:, None] * stride_x_row + cols[None, :],
                            rows[:, None] * stride_r_row + cols[None, :],
                            rows[:, None] * stride_r_out_row + cols[None, :],
                            cols[None, :], mask, col_mask[None, :], HAS_RESIDUAL, HAS_X_BIAS, "")
        x = _as_stored(x, r_out_ptr, HAS_RESIDUAL, CASTING_LLAMA)
        if IS_RMS:
            xc = x
        else:
            mean = tl.sum(x, axis=1) / n_cols
            xc = tl.where(mask, x - mean[:, None], 0.0)
        rstd = tl.rsqrt(tl.sum(xc * xc, axis=1) / n_cols + eps)
        y = _normalized(xc, rstd[:, None], w, b, weight_offset, round_ty, HAS_WEIGHT, HAS_BIAS, CASTING_LLAMA)
        if STORE_Y:
            tl.store(y_ptr + rows[:, None] * stride_y_row + cols[None, :], y.to(y_ptr.dtype.element_ty), mask=mask)
        if HAS_SMOOTH:
            y = y * tl.load(xs_ptr + cols, mask=col_mask, other=0.0).to(tl.float32)[None, :]
        if DYNAMIC:
            scale = _row_scale(_amax(tl.where(mask, y, 0.0), 1), ub_ptr, q_max, min_scale, HAS_UB)
            tl.store(scale_ptr + rows * stride_s, scale, mask=row_mask)
            inv_scale = tl.math.div_rn(1.0, scale)[:, None]
        else:
            inv_scale = tl.math.div_rn(1.0, tl.load(scale_ptr))
        q = _quantize(y, inv_scale, q_min, q_max, q_ty, SOFT_ROUND)
        tl.store(q_ptr + rows[:, None] * stride_q_row + cols[None, :], q, mask=mask)
    else:
        row = pid
        x_row = x_ptr + row * stride_x_row
        r_row = r_ptr + row * stride_r_row if HAS_RESIDUAL else r_ptr
        r_out_row = r_out_ptr + row * stride_r_out_row if HAS_RESIDUAL else r_out_ptr
        y_row = y_ptr + row * stride_y_row if STORE_Y else y_ptr
        q_row = q_ptr + row * stride_q_row
        # Each pass is one chunk helper under two loops: unrolled over the compiled-in width
        # (N_STATIC: every chunk's loads issued together) or a runtime loop.
        # Pass 1: statistics (LayerNorm about the row's first element, as the norm kernel).
        shift = _looped_shift(x_row, r_row, xb_ptr, IS_RMS, HAS_RESIDUAL, HAS_X_BIAS)
        acc = tl.zeros([BLOCK_N], dtype=tl.float32)
        acc_sq = tl.zeros([BLOCK_N], dtype=tl.float32)
        if N_STATIC > 0:
            for start in tl.static_range(0, N_STATIC, BLOCK_N):
                cols = start + tl.arange(0, BLOCK_N)
                acc, acc_sq = _stats_chunk(x_row, r_row, r_out_row, xb_ptr, cols, cols < N_STATIC, shift, acc, acc_sq,
                                           IS_RMS, HAS_RESIDUAL, HAS_X_BIAS, CASTING_LLAMA)
        else:
            for start in tl.range(0, n_cols, BLOCK_N):
                cols = start + tl.arange(0, BLOCK_N)
                acc, acc_sq = _stats_chunk(x_row, r_row, r_out_row, xb_ptr, cols, cols < n_cols, shift, acc, acc_sq,
                                           IS_RMS, HAS_RESIDUAL, HAS_X_BIAS, CASTING_LLAMA)
        mean, rstd = _looped_stats(acc, acc_sq, shift, n_cols, eps, IS_RMS)
        # Pass 2 (DYNAMIC): the normalized row's amax.
        if DYNAMIC:
            amax = tl.zeros([BLOCK_N], dtype=tl.float32)
            if N_STATIC > 0:
                for start in tl.static_range(0, N_STATIC, BLOCK_N):
                    cols = start + tl.arange(0, BLOCK_N)
                    amax = _amax_chunk(amax, x_row, r_out_row, xb_ptr, w_ptr, b_ptr, xs_ptr, cols, cols < N_STATIC,
                                       mean, rstd, weight_offset, round_ty, HAS_RESIDUAL, HAS_X_BIAS, HAS_WEIGHT,
                                       HAS_BIAS, HAS_SMOOTH, CASTING_LLAMA)
            else:
                for start in tl.range(0, n_cols, BLOCK_N):
                    cols = start + tl.arange(0, BLOCK_N)
                    amax = _amax_chunk(amax, x_row, r_out_row, xb_ptr, w_ptr, b_ptr, xs_ptr, cols, cols < n_cols,
                                       mean, rstd, weight_offset, round_ty, HAS_RESIDUAL, HAS_X_BIAS, HAS_WEIGHT,
                                       HAS_BIAS, HAS_SMOOTH, CASTING_LLAMA)
            scale = _row_scale(_rounded_amax(amax, round_ty, HAS_SMOOTH), ub_ptr, q_max, min_scale, HAS_UB)
            tl.store(scale_ptr + row * stride_s, scale)
        else:
            scale = tl.load(scale_ptr)
        inv_scale = tl.math.div_rn(1.0, scale)
        # Last pass: normalize and quantize.
        if N_STATIC > 0:
            for start in tl.static_range(0, N_STATIC, BLOCK_N):
                cols = start + tl.arange(0, BLOCK_N)
                _quantize_chunk(x_row, r_out_row, xb_ptr, w_ptr, b_ptr, xs_ptr, y_row, q_row, cols, cols < N_STATIC,
                                mean, rstd, weight_offset, inv_scale, q_min, q_max, round_ty, HAS_RESIDUAL,
                                HAS_X_BIAS, HAS_WEIGHT, HAS_BIAS, HAS_SMOOTH, STORE_Y, SOFT_ROUND, CASTING_LLAMA)
        else:
            for start in tl.range(0, n_cols, BLOCK_N):
                cols = start + tl.arange(0, BLOCK_N)
                _quantize_chunk(x_row, r_out_row, xb_ptr, w_ptr, b_ptr, xs_ptr, y_row, q_row, cols, cols < n_cols,
                                mean, rstd, weight_offset, inv_scale, q_min, q_max, round_ty, HAS_RESIDUAL,
                                HAS_X_BIAS, HAS_WEIGHT, HAS_BIAS, HAS_SMOOTH, STORE_Y, SOFT_ROUND, CASTING_LLAMA)
