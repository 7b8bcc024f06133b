"""Gated activation fused with fp8 / int8 quantization: ``y = act(x[:, :n]) * x[:, n:]``
quantized without a round trip through memory.

``y`` is computed in fp32 and rounded to x's dtype, exactly as ``act_and_mul`` stores it,
then quantized as the quant kernels quantize (``_quantize``, scales by ``_scale_of`` or
``max(amax, eps) / q_max``, NaN-keeping amaxes): the fused result is bit for bit the
unfused pair's.
One kernel, four modes (``MODE``): a static per-tensor scale, a dynamic scale per row,
a dynamic scale per group of GROUP columns of a row (fp32, or UE8M0: a power of 2 stored as
an e8m0 byte, optionally in aiter's shuffled layout), or none (y stored as it is). aiter's
``fused_clamp_act_mul`` adds SwiGLU's clamp and weights on y (CLAMP, WEIGHTS), without the
rounding of y (ROUND_Y off).
"""

import triton
import triton.language as tl

from aiter_lite.ops.triton._triton_kernels.activation import _apply_activation
from aiter_lite.ops.triton._triton_kernels.quant.mx_quant import _scale_offsets
from aiter_lite.ops.triton._triton_kernels.quant.quant import (
    _amax,
    _ceil_pow2,
    _load_f32,
    _nan_max,
    _quantize,
    _row_scale,
)


@triton.jit
def _act_mul(x_ptrs, n_cols, mask, ACTIVATION: tl.constexpr, x_dtype: tl.constexpr, EVEN: tl.constexpr,
             ROUND_Y: tl.constexpr, limit=0.0, CLAMP: tl.constexpr = False, w=None):
    """``act(gate) * up`` for the gates at ``x_ptrs`` (ups n_cols further on), in fp32
    (ROUND_Y: rounded to ``x_dtype`` and widened back). CLAMP: SwiGLU's limit first (the
    gate at most ``limit``, the up within +-limit; NaN kept). ``w``: times these fp32
    weights (after the product). Masked lanes load 0 and give act(0) * 0 = 0, so they
    never raise an amax."""
    gate = _load_f32(x_ptrs, mask, EVEN)
    up = _load_f32(x_ptrs + n_cols, mask, EVEN)
    if CLAMP:
        gate = tl.minimum(gate, limit, propagate_nan=tl.PropagateNan.ALL)
        up = tl.clamp(up, -limit, limit, propagate_nan=tl.PropagateNan.ALL)
    y = _apply_activation(gate, ACTIVATION) * up
    if w is not None:
        y = w * y
    if ROUND_Y:
        y = y.to(x_dtype).to(tl.float32)
    return y


@triton.jit
def _ue8m0(amax, q_max):
    """A group's scale ``amax / q_max`` rounded up to a power of 2, as (its fp32 value, its
    e8m0 byte): an all-zero group 0 and byte 0 (its values 0), a NaN one NaN and 0xFF (e8m0's
    NaN; its values NaN)."""
    scale = _ceil_pow2(tl.math.div_rn(amax, q_max))
    return scale, tl.where(amax != amax, 255, scale.to(tl.int32, bitcast=True) >> 23)


@triton.jit
def _act_quant_kernel(
    x_ptr,                        # (n_rows, 2 * n_cols): gate, then up
    q_ptr,                        # (n_rows, n_cols), the quantized dtype
    scale_ptr,                    # fp32. static: one element, read. per_token: (n_rows,) at stride_s_row, written.
                                  # group: (n_rows, cdiv(n_cols, GROUP)) at (stride_s_row, stride_s_group), written
    ub_ptr,                       # fp32, one element: upper bound on a row's amax (HAS_UB)
    w_ptr,                        # WEIGHTS: y's factors, (n_rows, 1) or (n_rows, n_cols) at (stride_w_row, stride_w_col)
    stride_x_row, stride_q_row, stride_s_row, stride_s_group, stride_w_row, stride_w_col,
    n_rows, n_cols,
    limit,                        # CLAMP: SwiGLU's limit (fp32)
    scale_cols,                   # SHUFFLE: the padded scale buffer's columns
    eps,                          # group: amax floor (fp32), an all-zero group gets scale eps / q_max
    q_min, q_max,                 # the output dtype's range (fp32)
    min_scale,                    # per_token: the scale's floor
    ACTIVATION: tl.constexpr,     # "silu" | "gelu" | "gelu_tanh" | "relu"
    MODE: tl.constexpr,           # "static" | "per_token" | "group" | "none" (y stored in q's dtype, unquantized)
    HAS_UB: tl.constexpr,         # per_token: the amax capped at *ub_ptr
    LOOPED: tl.constexpr,         # per_token: rows in BLOCK_N-wide chunks, computed twice (amax, then quantize)
    EVEN: tl.constexpr,           # BLOCK_M divides n_rows and BLOCK_N divides n_cols: no masks
    INT64: tl.constexpr,          # offsets can pass 2^31: rows indexed in int64
    SOFT_ROUND: tl.constexpr,     # fp8 rounded in fp32 before the conversion (the interpreter)
    BLOCK_M: tl.constexpr,        # rows per program
    BLOCK_N: tl.constexpr,        # columns per program (static, group) or per step (per_token)
    GROUP: tl.constexpr,          # group: columns a group, a power of 2 dividing BLOCK_N (else 1)
    ROUND_Y: tl.constexpr,        # y rounded to x's dtype before quantization (as act_and_mul stores it)
    CLAMP: tl.constexpr = False,  # SwiGLU's clamp at limit (static, group, none)
    WEIGHTS: tl.constexpr = "",   # "" | "row" (a factor a row) | "full" (one an element): static, group, none
    UE8M0: tl.constexpr = False,  # group: scales rounded up to a power of 2, stored as e8m0 bytes
    SHUFFLE: tl.constexpr = False,  # UE8M0: the bytes in aiter's e8m0_shuffle layout of a padded buffer
):
    """static and group: grid (column blocks, row blocks), columns fastest, as
    ``act_and_mul``. per_token: grid (row blocks,), a program owns whole rows."""
    # scalars to fp32 (inductor passes Python floats as fp64); tl.cast: a float has no .to in the interpreter
    eps = tl.cast(eps, tl.float32)
    q_min = tl.cast(q_min, tl.float32)
    q_max = tl.cast(q_max, tl.float32)
    min_scale = tl.cast(min_scale, tl.float32)
    limit = tl.cast(limit, tl.float32)
    x_dtype = x_ptr.dtype.element_ty
    q_dtype = q_ptr.dtype.element_ty
    if MODE == "per_token":
        pid_m = tl.program_id(0)
    else:
        pid_m = tl.program_id(1)
    if INT64:
        pid_m = pid_m.to(tl.int64)
    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    row_mask = rows < n_rows

    if (MODE == "static") | (MODE == "none"):
        cols = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
        mask = None if EVEN else row_mask[:, None] & (cols < n_cols)[None, :]
        w = None
        if WEIGHTS != "":
            w = _load_weights(w_ptr, rows[:, None], cols[None, :], stride_w_row, stride_w_col, n_rows, mask, WEIGHTS,
                              EVEN)
        y = _act_mul(x_ptr + rows[:, None] * stride_x_row + cols[None, :], n_cols, mask, ACTIVATION, x_dtype, EVEN,
                     ROUND_Y, limit, CLAMP, w)
        if MODE == "none":
            q = y.to(q_dtype)
        else:
            q = _quantize(y, tl.math.div_rn(1.0, tl.load(scale_ptr)), q_min, q_max, q_dtype, SOFT_ROUND)
        tl.store(q_ptr + rows[:, None] * stride_q_row + cols[None, :], q, mask=mask)

    elif MODE == "per_token":
        x_rows = x_ptr + rows[:, None] * stride_x_row
        q_rows = q_ptr + rows[:, None] * stride_q_row
        cols = tl.arange(0, BLOCK_N)
        if LOOPED:
            amax = tl.zeros([BLOCK_M], tl.float32)
            for start in range(0, n_cols, BLOCK_N):
                mask = None if EVEN else row_mask[:, None] & (start + cols < n_cols)[None, :]
                y = _act_mul(x_rows + start + cols[None, :], n_cols, mask, ACTIVATION, x_dtype, EVEN, ROUND_Y)
                amax = _nan_max(amax, _amax(y, 1))
        else:
            mask = None if EVEN else row_mask[:, None] & (cols < n_cols)[None, :]
            y = _act_mul(x_rows + cols[None, :], n_cols, mask, ACTIVATION, x_dtype, EVEN, ROUND_Y)
            amax = _amax(y, 1)
        scale = _row_scale(amax, ub_ptr, q_max, min_scale, HAS_UB)
        tl.store(scale_ptr + rows * stride_s_row, scale, mask=row_mask)
        inv_scale = tl.math.div_rn(1.0, scale)[:, None]
        if LOOPED:
            # The second pass recomputes y (its input mostly from L2) rather than keep it.
            for start in range(0, n_cols, BLOCK_N):
                mask = None if EVEN else row_mask[:, None] & (start + cols < n_cols)[None, :]
                y = _act_mul(x_rows + start + cols[None, :], n_cols, mask, ACTIVATION, x_dtype, EVEN, ROUND_Y)
                q = _quantize(y, inv_scale, q_min, q_max, q_dtype, SOFT_ROUND)
                tl.store(q_rows + start + cols[None, :], q, mask=mask)
        else:
            tl.store(q_rows + cols[None, :], _quantize(y, inv_scale, q_min, q_max, q_dtype, SOFT_ROUND), mask=mask)

    else:
        tl.static_assert(MODE == "group")
        # The tile as (BLOCK_M rows, BLOCK_N // GROUP groups, GROUP columns): a group's
        # amax is a reduction over the last axis, no reshape.
        pid_n = tl.program_id(0)
        if INT64:  # a column-major scale's offset is group * n_rows
            pid_n = pid_n.to(tl.int64)
        grp = pid_n * (BLOCK_N // GROUP) + tl.arange(0, BLOCK_N // GROUP)
        cols = grp[:, None] * GROUP + tl.arange(0, GROUP)[None, :]
        mask = None if EVEN else row_mask[:, None, None] & (cols < n_cols)[None, :, :]
        w = None
        if WEIGHTS != "":
            w = _load_weights(w_ptr, rows[:, None, None], cols[None, :, :], stride_w_row, stride_w_col, n_rows, mask,
                              WEIGHTS, EVEN)
        y = _act_mul(x_ptr + rows[:, None, None] * stride_x_row + cols[None, :, :], n_cols, mask, ACTIVATION,
                     x_dtype, EVEN, ROUND_Y, limit, CLAMP, w)
        s_mask = None if EVEN else row_mask[:, None] & (grp * GROUP < n_cols)[None, :]
        if UE8M0:
            scale, s_byte = _ue8m0(_amax(y, 2), q_max)
            inv = tl.where(scale == 0.0, 0.0, tl.math.div_rn(1.0, tl.where(scale == 0.0, 1.0, scale)))
            s_offs = _scale_offsets(rows, grp, stride_s_row, stride_s_group, scale_cols, SHUFFLE)
            tl.store(scale_ptr + s_offs, s_byte.to(scale_ptr.dtype.element_ty), mask=s_mask)
        else:
            scale = tl.math.div_rn(_nan_max(_amax(y, 2), eps), q_max)
            inv = tl.math.div_rn(1.0, scale)
            tl.store(scale_ptr + rows[:, None] * stride_s_row + grp[None, :] * stride_s_group, scale, mask=s_mask)
        q = _quantize(y, inv[:, :, None], q_min, q_max, q_dtype, SOFT_ROUND)
        tl.store(q_ptr + rows[:, None, None] * stride_q_row + cols[None, :, :], q, mask=mask)


@triton.jit
def _load_weights(w_ptr, rows, cols, stride_w_row, stride_w_col, n_rows, mask, WEIGHTS: tl.constexpr,
                  EVEN: tl.constexpr):
    """fp32 weights of a tile at ``rows`` x ``cols`` (broadcast shapes): "row" one factor a
    row, "full" one an element; 0 where masked."""
    if WEIGHTS == "row":
        return _load_f32(w_ptr + rows * stride_w_row, rows < n_rows, EVEN)
    else:
        tl.static_assert(WEIGHTS == "full")
        return _load_f32(w_ptr + rows * stride_w_row + cols * stride_w_col, mask, EVEN)
