"""Row quantization fused with what precedes it, in aiter's ``fused_fp8_quant`` forms: the
row read once, quantized per group of columns or by a static per-tensor scale.

``_fused_rms_quant_kernel``: one row per program, held in registers (BLOCK_N1 >= the
width). The row ``y`` is, by ``ACT``:

* "" (RMSNorm): ``x1`` (plus ``r1`` where HAS_RES: the fp32 sum stored to ``r_out`` in its
  dtype) normalized in fp32, ``x1 * rsqrt(mean(x1^2) + eps1) * w1``;
* an activation ("silu", "gelu", "gelu_tanh"): ``act(x1[:n]) * x1[n:]`` in fp32 (``n_cols1``
  the output width, the up half ``n_cols1`` columns on).

and is quantized from that fp32 value, as aiter's kernels do (``ROUND``: rounded to
x1's dtype first, aiter's ``rmsnorm_convert_to_inp1_type``). ``GROUPED``: each GROUP
columns get the scale ``max(amax, group_eps) / q_max``, written at (row, group) through the
scale's strides (a transposed layout included); else the static scale at ``s_ptr`` (one
value). The row is held as (groups, GROUP) in both.
STORE_Y1 stores y unquantized. HAS_X2: a second input's row (its own width, weight and
eps) normalized by the same program, stored unquantized.
SPLITK: every input row (x1, x2, x3) is the fp32 sum of ``n_split`` partial rows
``stride_*_split`` apart (a split-K GEMM's partial products), summed in split order.
HAS_X3: a further ``n_rows`` programs store the row of x3 (summed over the splits) to y3,
converted to y3's dtype.

NaN: a NaN in a group makes its scale NaN and its values NaN (fp8) or 0 (int8), as the
group quant kernel's; the rest of the row's groups are unaffected unless the NaN reaches
the row's RMS (then every value of the row is NaN, as the unfused norm's).
"""

import triton
import triton.language as tl

from aiter_lite.ops.triton._triton_kernels.activation import _apply_activation
from aiter_lite.ops.triton._triton_kernels.quant.quant import _amax, _nan_max, _quantize


@triton.jit
def _rms(x, w, n_cols, eps):
    """fp32 ``x * rsqrt(mean(x^2) + eps) * w`` over a row (1-D, or 2-D as groups of columns)
    whose masked lanes are 0."""
    sq = x * x
    if len(x.shape) == 2:
        sq = tl.sum(sq, axis=1)
    return x * tl.math.rsqrt(tl.sum(sq, axis=0) / n_cols + eps) * w


@triton.jit
def _load_row(ptrs, mask, stride_split, n_split, SPLITK: tl.constexpr):
    """The row at ``ptrs`` in fp32; SPLITK: summed with its ``n_split - 1`` further partial
    rows, ``stride_split`` apart."""
    x = tl.load(ptrs, mask=mask, other=0.0).to(tl.float32)
    if SPLITK:
        for s in range(1, n_split):
            x += tl.load(ptrs + s * stride_split, mask=mask, other=0.0).to(tl.float32)
    return x


@triton.jit
def _fused_rms_quant_kernel(
    x1_ptr, w1_ptr, r1_ptr, r_out_ptr, y1_ptr, q_ptr,
    s_ptr,                        # fp32: GROUPED, (n_rows, n_groups) at (stride_s_row, stride_s_group), written;
                                  # else the static scale, one element read
    x2_ptr, w2_ptr, y2_ptr,
    x3_ptr, y3_ptr,
    stride_x1, stride_r1, stride_r_out, stride_y1, stride_q, stride_s_row, stride_s_group, stride_x2, stride_y2,
    stride_x3, stride_y3,
    stride_x1_split, stride_x2_split, stride_x3_split,
    n_rows, n_cols1, n_cols2, n_cols3, n_split,
    eps1, eps2, q_min, q_max, group_eps,  # runtime fp32
    ACT: tl.constexpr,            # "": RMSNorm of x1; else y = ACT(x1[:n_cols1]) * x1[n_cols1:]
    HAS_RES: tl.constexpr,
    STORE_Y1: tl.constexpr,
    HAS_X2: tl.constexpr,
    HAS_X3: tl.constexpr,         # n_rows more programs, each storing a row of x3 to y3
    SPLITK: tl.constexpr,         # inputs summed over n_split partial rows
    ROUND: tl.constexpr,          # y rounded to x1's dtype before quantization
    SOFT_ROUND: tl.constexpr,     # fp8 rounded in fp32 before the conversion (the interpreter)
    INT64: tl.constexpr,          # row offsets can pass 2^31
    GROUPED: tl.constexpr,        # a scale per GROUP columns, else the static scale
    GROUP: tl.constexpr,          # columns a tile row (the quant group where GROUPED; a power of 2)
    BLOCK_N1: tl.constexpr,       # a multiple of GROUP
    BLOCK_N2: tl.constexpr,
    BLOCK_N3: tl.constexpr,
):
    # scalars to fp32 (inductor passes Python floats as fp64); tl.cast: a float has no .to in the interpreter
    eps1 = tl.cast(eps1, tl.float32)
    eps2 = tl.cast(eps2, tl.float32)
    q_min = tl.cast(q_min, tl.float32)
    q_max = tl.cast(q_max, tl.float32)
    group_eps = tl.cast(group_eps, tl.float32)
    row = tl.program_id(0)
    if INT64:
        row = row.to(tl.int64)
    if HAS_X3:  # (a flag set only under HAS_X3 would be a constexpr in one branch, a tensor in the other)
        if row >= n_rows:
            _sum_row(x3_ptr, y3_ptr, row - n_rows, stride_x3, stride_y3, stride_x3_split, n_cols3, n_split, SPLITK,
                     BLOCK_N3)
        else:
            _quant_row(x1_ptr, w1_ptr, r1_ptr, r_out_ptr, y1_ptr, q_ptr, s_ptr, x2_ptr, w2_ptr, y2_ptr, row,
                       stride_x1, stride_r1, stride_r_out, stride_y1, stride_q, stride_s_row, stride_s_group,
                       stride_x2, stride_y2, stride_x1_split, stride_x2_split, n_cols1, n_cols2, n_split,
                       eps1, eps2, q_min, q_max, group_eps, ACT, HAS_RES, STORE_Y1, HAS_X2, SPLITK, ROUND,
                       SOFT_ROUND, GROUPED, GROUP, BLOCK_N1, BLOCK_N2)
    else:
        _quant_row(x1_ptr, w1_ptr, r1_ptr, r_out_ptr, y1_ptr, q_ptr, s_ptr, x2_ptr, w2_ptr, y2_ptr, row,
                   stride_x1, stride_r1, stride_r_out, stride_y1, stride_q, stride_s_row, stride_s_group,
                   stride_x2, stride_y2, stride_x1_split, stride_x2_split, n_cols1, n_cols2, n_split,
                   eps1, eps2, q_min, q_max, group_eps, ACT, HAS_RES, STORE_Y1, HAS_X2, SPLITK, ROUND,
                   SOFT_ROUND, GROUPED, GROUP, BLOCK_N1, BLOCK_N2)


@triton.jit
def _sum_row(x_ptr, y_ptr, row, stride_x, stride_y, stride_split, n_cols, n_split, SPLITK: tl.constexpr,
             BLOCK_N: tl.constexpr):
    cols = tl.arange(0, BLOCK_N)
    mask = cols < n_cols
    x = _load_row(x_ptr + row * stride_x + cols, mask, stride_split, n_split, SPLITK)
    tl.store(y_ptr + row * stride_y + cols, x.to(y_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _quant_row(x1_ptr, w1_ptr, r1_ptr, r_out_ptr, y1_ptr, q_ptr, s_ptr, x2_ptr, w2_ptr, y2_ptr, row,
               stride_x1, stride_r1, stride_r_out, stride_y1, stride_q, stride_s_row, stride_s_group,
               stride_x2, stride_y2, stride_x1_split, stride_x2_split, n_cols1, n_cols2, n_split,
               eps1, eps2, q_min, q_max, group_eps,
               ACT: tl.constexpr, HAS_RES: tl.constexpr, STORE_Y1: tl.constexpr, HAS_X2: tl.constexpr,
               SPLITK: tl.constexpr, ROUND: tl.constexpr, SOFT_ROUND: tl.constexpr, GROUPED: tl.constexpr,
               GROUP: tl.constexpr, BLOCK_N1: tl.constexpr, BLOCK_N2: tl.constexpr):
    # the row as (groups, GROUP columns) from the start: a group's amax is a reduction along
    # a tile row, with no change of layout
    grp = tl.arange(0, BLOCK_N1 // GROUP)
    cols = grp[:, None] * GROUP + tl.arange(0, GROUP)[None, :]
    mask = cols < n_cols1
    x_ptrs = x1_ptr + row * stride_x1 + cols
    x = _load_row(x_ptrs, mask, stride_x1_split, n_split, SPLITK)
    if ACT == "":
        if HAS_RES:
            x += tl.load(r1_ptr + row * stride_r1 + cols, mask=mask, other=0.0).to(tl.float32)
            tl.store(r_out_ptr + row * stride_r_out + cols, x.to(r_out_ptr.dtype.element_ty), mask=mask)
        y = _rms(x, tl.load(w1_ptr + cols, mask=mask, other=0.0).to(tl.float32), n_cols1, eps1)
    else:  # masked lanes: act(0) * 0 = 0, below any amax
        y = _apply_activation(x, ACT) * _load_row(x_ptrs + n_cols1, mask, stride_x1_split, n_split, SPLITK)
    if STORE_Y1:
        tl.store(y1_ptr + row * stride_y1 + cols, y.to(y1_ptr.dtype.element_ty), mask=mask)
    if ROUND:
        y = y.to(x1_ptr.dtype.element_ty).to(tl.float32)
    if GROUPED:  # masked lanes hold 0, below any amax
        scale = tl.math.div_rn(_nan_max(_amax(y, 1), group_eps), q_max)
        tl.store(s_ptr + row * stride_s_row + grp * stride_s_group, scale, mask=grp * GROUP < n_cols1)
        inv_scale = tl.math.div_rn(1.0, scale)[:, None]
    else:
        inv_scale = tl.math.div_rn(1.0, tl.load(s_ptr).to(tl.float32))
    tl.store(q_ptr + row * stride_q + cols, _quantize(y, inv_scale, q_min, q_max, q_ptr.dtype.element_ty, SOFT_ROUND),
             mask=mask)
    if HAS_X2:
        cols2 = tl.arange(0, BLOCK_N2)
        mask2 = cols2 < n_cols2
        x2 = _load_row(x2_ptr + row * stride_x2 + cols2, mask2, stride_x2_split, n_split, SPLITK)
        y2 = _rms(x2, tl.load(w2_ptr + cols2, mask=mask2, other=0.0).to(tl.float32), n_cols2, eps2)
        tl.store(y2_ptr + row * stride_y2 + cols2, y2.to(y2_ptr.dtype.element_ty), mask=mask2)


@triton.jit
def _gate(z, GATE: tl.constexpr):
    if GATE == "silu":
        return z / (1.0 + tl.exp(-z))
    else:
        tl.static_assert(GATE == "sigmoid")
        return 1.0 / (1.0 + tl.exp(-z))


@triton.jit
def _ceil_pow2(s):
    """The least power of 2 >= ``s`` (fp32, s >= 0), exactly: the exponent carried up by
    any mantissa bit (aiter's ``exp2(ceil(log2(s)))`` goes one power too high where the
    approximate log2 of a power of 2 lands above it); NaN kept."""
    up = (s.to(tl.int32, bitcast=True) + 0x7FFFFF) & 0x7F800000
    return tl.where(s != s, s, up.to(tl.float32, bitcast=True))


@triton.jit
def _fused_rms_gated_quant_kernel(
    x_ptr, z_ptr, w_ptr, b_ptr, q_ptr,
    s_ptr,                        # fp32 (n_rows, n_groups) at (stride_s_row, stride_s_group): written
    stride_x, stride_z, stride_q, stride_s_row, stride_s_group,
    n_rows, n_cols, group_size,   # group_size divides n_cols
    eps, q_min, q_max, min_scale,  # runtime fp32
    GATE: tl.constexpr,           # "silu" | "sigmoid": the gate applied to z
    HAS_Z: tl.constexpr,
    HAS_BIAS: tl.constexpr,
    NORM_BEFORE_GATE: tl.constexpr,  # y = norm(x) * gate(z); else y = norm(x * gate(z))
    UE8M0: tl.constexpr,          # scales rounded up to a power of 2
    SOFT_ROUND: tl.constexpr,
    INT64: tl.constexpr,
    BLOCK_M: tl.constexpr,        # rows per program
    BLOCK_G: tl.constexpr,        # next power of 2 >= n_cols / group_size
    GROUP: tl.constexpr,          # next power of 2 >= group_size
):
    """Gated RMSNorm (Mamba / Qwen3-Next's ``RMSNormGated``) quantized per group of
    ``group_size`` columns: BLOCK_M rows a program, each held as (groups, GROUP) with
    columns ``g * group_size + j`` (j < group_size). The RMS is over the whole row. A
    group's scale is ``max(amax / q_max, min_scale)`` (UE8M0: ``amax / q_max`` rounded up to
    a power of 2 first); NaN in a group stays in its scale and values."""
    eps = tl.cast(eps, tl.float32)
    q_min = tl.cast(q_min, tl.float32)
    q_max = tl.cast(q_max, tl.float32)
    min_scale = tl.cast(min_scale, tl.float32)
    pid = tl.program_id(0)
    if INT64:
        pid = pid.to(tl.int64)
    rows = pid * BLOCK_M + tl.arange(0, BLOCK_M)
    grp = tl.arange(0, BLOCK_G)
    j = tl.arange(0, GROUP)
    cols = grp[:, None] * group_size + j[None, :]
    col_mask = (j < group_size)[None, :] & (cols < n_cols)
    row_mask = rows < n_rows
    mask = row_mask[:, None, None] & col_mask[None, :, :]
    x = tl.load(x_ptr + rows[:, None, None] * stride_x + cols[None, :, :], mask=mask, other=0.0).to(tl.float32)
    if HAS_Z:
        g = _gate(tl.load(z_ptr + rows[:, None, None] * stride_z + cols[None, :, :], mask=mask,
                          other=0.0).to(tl.float32), GATE)
        if not NORM_BEFORE_GATE:
            x = x * g
    sq = tl.sum(tl.sum(x * x, axis=2), axis=1)
    rstd = tl.math.rsqrt(sq / n_cols + eps)
    y = x * rstd[:, None, None] * tl.load(w_ptr + cols, mask=col_mask, other=0.0).to(tl.float32)[None, :, :]
    if HAS_BIAS:
        y += tl.load(b_ptr + cols, mask=col_mask, other=0.0).to(tl.float32)[None, :, :]
    if HAS_Z:
        if NORM_BEFORE_GATE:
            y = y * g
    scale = tl.math.div_rn(_amax(y, 2), q_max)
    if UE8M0:
        scale = _ceil_pow2(scale)
    scale = _nan_max(scale, min_scale)
    s_mask = row_mask[:, None] & (grp * group_size < n_cols)[None, :]
    tl.store(s_ptr + rows[:, None] * stride_s_row + grp[None, :] * stride_s_group, scale, mask=s_mask)
    q = _quantize(y, tl.math.div_rn(1.0, scale)[:, :, None], q_min, q_max, q_ptr.dtype.element_ty, SOFT_ROUND)
    tl.store(q_ptr + rows[:, None, None] * stride_q + cols[None, :, :], q, mask=mask)
