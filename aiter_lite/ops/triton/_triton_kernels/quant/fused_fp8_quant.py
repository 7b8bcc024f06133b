"""RMSNorm fused with fp8 / int8 quantization in aiter's ``fused_fp8_quant`` forms: the
row read once, quantized per group of columns or by a static per-tensor scale.

``_fused_rms_quant_kernel``: one row per program, held in registers (BLOCK_N1 >= the
width). ``x1`` (plus ``r1`` where HAS_RES: the fp32 sum stored to ``r_out`` in its dtype)
is normalized in fp32, ``x1 * rsqrt(mean(x1^2) + eps1) * w1``, and quantized from that
fp32 value, as aiter's kernel does (``ROUND``: rounded to x1's dtype first, aiter's
``rmsnorm_convert_to_inp1_type``). ``GROUPED``: each GROUP columns get the scale
``max(amax, group_eps) / q_max``, written at (row, group) through the scale's strides (a
transposed layout included); else the static scale at ``s_ptr`` (one value). The row is
held as (groups, GROUP) in both.
STORE_Y1 stores the normalized row unquantized. HAS_X2: a second input's row (its own
width, weight and eps) normalized by the same program, stored unquantized.

NaN: a NaN in a group makes its scale NaN and its values NaN (fp8) or 0 (int8), as the
group quant kernel's; the rest of the row's groups are unaffected unless the NaN reaches
the row's RMS (then every value of the row is NaN, as the unfused norm's).
"""

import triton
import triton.language as tl

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
def _fused_rms_quant_kernel(
    x1_ptr, w1_ptr, r1_ptr, r_out_ptr, y1_ptr, q_ptr,
    s_ptr,                        # fp32: GROUPED, (n_rows, n_groups) at (stride_s_row, stride_s_group), written;
                                  # else the static scale, one element read
    x2_ptr, w2_ptr, y2_ptr,
    stride_x1, stride_r1, stride_r_out, stride_y1, stride_q, stride_s_row, stride_s_group, stride_x2, stride_y2,
    n_cols1, n_cols2,
    eps1, eps2, q_min, q_max, group_eps,  # runtime fp32
    HAS_RES: tl.constexpr,
    STORE_Y1: tl.constexpr,
    HAS_X2: tl.constexpr,
    ROUND: tl.constexpr,          # the normalized row rounded to x1's dtype before quantization
    SOFT_ROUND: tl.constexpr,     # fp8 rounded in fp32 before the conversion (the interpreter)
    INT64: tl.constexpr,          # row offsets can pass 2^31
    GROUPED: tl.constexpr,        # a scale per GROUP columns, else the static scale
    GROUP: tl.constexpr,          # columns a tile row (the quant group where GROUPED; a power of 2)
    BLOCK_N1: tl.constexpr,       # a multiple of GROUP
    BLOCK_N2: tl.constexpr,
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
    # the row as (groups, GROUP columns) from the start: a group's amax is a reduction along
    # a tile row, with no change of layout
    grp = tl.arange(0, BLOCK_N1 // GROUP)
    cols = grp[:, None] * GROUP + tl.arange(0, GROUP)[None, :]
    mask = cols < n_cols1
    x = tl.load(x1_ptr + row * stride_x1 + cols, mask=mask, other=0.0).to(tl.float32)
    if HAS_RES:
        x += tl.load(r1_ptr + row * stride_r1 + cols, mask=mask, other=0.0).to(tl.float32)
        tl.store(r_out_ptr + row * stride_r_out + cols, x.to(r_out_ptr.dtype.element_ty), mask=mask)
    y = _rms(x, tl.load(w1_ptr + cols, mask=mask, other=0.0).to(tl.float32), n_cols1, eps1)
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
        x2 = tl.load(x2_ptr + row * stride_x2 + cols2, mask=mask2, other=0.0).to(tl.float32)
        y2 = _rms(x2, tl.load(w2_ptr + cols2, mask=mask2, other=0.0).to(tl.float32), n_cols2, eps2)
        tl.store(y2_ptr + row * stride_y2 + cols2, y2.to(y2_ptr.dtype.element_ty), mask=mask2)
