"""MX / NV block quantization of rows (aiter's ``dynamic_mxfp4_quant``, ``dynamic_mxfp8_quant``,
``dynamic_nvfp4_quant`` and their fused forms): one kernel, the row's producer (MODE) and the
output format (FORMAT) constexpr flags.

A block is GROUP consecutive columns of a row sharing one scale. FORMAT:

* "mxfp4" (OCP MX FP4): e2m1 values, two a byte (column 2k in the low nibble, 2k + 1 in the
  high one), a uint8 e8m0 scale ``2^(byte - 127)`` per 32 columns;
* "mxfp8": fp8 values in q's dtype, an e8m0 scale per 32 columns;
* "nvfp4": e2m1 values packed as mxfp4, an fp8 e4m3 scale (s's dtype) per 16 columns.

The e8m0 exponent s of a block whose largest ``|value|`` is ``a`` (SCALING; emax is the
exponent of the element format's largest value ``q_max``: 2 for e2m1, 8 e4m3fn, 7 e4m3fnuz,
15 e5m2):

* "even" (aiter's; AMD Quark's ``even_round``): ``a`` rounded to a power of two, up where its
  mantissa is 0.75 or more (``bits + 0x200000``, mantissa dropped), minus emax;
* "floor": ``floor(log2 a) - emax`` (the OCP MX rule; values past q_max saturate);
* "ceil": ``ceil(log2 a) - emax``;
* "rceil": ``ceil(log2(a / q_max))`` (NVIDIA's and torchao's RCEIL);

clamped to [-127, 127]; an infinite ``a`` (or one that rounds past fp32's range) takes 127.
Values are ``x * 2^-s`` (exact in fp32: two power-of-2 factors, each a normal number, so no
denormal factor is flushed on any target), rounded to the element format to nearest even and
saturated (e2m1: +-6; fp8: its range). NV: the scale ``g * a / 6`` (``g`` the global scale,
1 without one) saturated to the scale dtype's range and rounded to it; values
``x / (s_fp8 / g)`` with the rounded scale (0 where it is 0). Everything is integer or exact
fp32 arithmetic, no fp4 type and no log2 / exp2: the same bits on every target and in the
interpreter.

NaN: a block holding a NaN gets scale byte 0xFF (e8m0's NaN; NV: the scale dtype's NaN) and
every value of it code 0 (e2m1 has no NaN) or NaN (fp8): the block decodes to NaN, and no
other block changes (RMSNorm: a NaN reaches its whole row through the row's RMS).
"""

import triton
import triton.language as tl

from aiter_lite.ops.triton._triton_kernels.activation import _apply_activation
from aiter_lite.ops.triton._triton_kernels.quant.quant import _amax, _fp8_grid, _quantize

_INF_BITS: tl.constexpr = tl.constexpr(0x7F800000)
_E2M1_M0: tl.constexpr = tl.constexpr(8388608.0)  # 2^23: fp32's step is 1 in [2^23, 2^24)
_RCP6: tl.constexpr = tl.constexpr(1.0 / 6.0)  # rounded to fp32 where it meets an fp32 value, as torch does


@triton.jit
def _pow2(k):
    """``2.0 ** k`` in fp32, exactly, for integer k in [-126, 127]."""
    return ((k + 127) << 23).to(tl.float32, bitcast=True)


@triton.jit
def _max_nan(a, b):
    return tl.maximum(a, b, propagate_nan=tl.PropagateNan.ALL)


@triton.jit
def _amax_nan(y, INTERPRETER: tl.constexpr):
    """A block's ``max |y|`` (the tile's last two axes), NaN where it holds one. On a GPU a
    NaN-keeping float maximum: one instruction an element on NVIDIA (``max.NaN`` with the
    absolute value folded into its operands), where an integer maximum of the bits takes
    two. The interpreter runs a custom combine in Python, element by element: there the
    integer maximum of the bits (the same result: NaN's bits order above inf's)."""
    if INTERPRETER:
        return _amax(_amax(y, 3), 2)
    return tl.reduce(tl.reduce(tl.abs(y), 3, _max_nan), 2, _max_nan)


@triton.jit
def _e8m0_exponent(amax_bits, q_max, SCALING: tl.constexpr):
    """The block scale's exponent s (int32 in [-127, 127]) from the bits of a NaN-free amax
    (inf's bits at most)."""
    if SCALING == "rceil":
        v = tl.math.div_rn(amax_bits.to(tl.float32, bitcast=True), q_max).to(tl.int32, bitcast=True)
        e = (v >> 23) + ((v & 0x7FFFFF) != 0).to(tl.int32)
        emax = 0
    else:
        emax = ((q_max.to(tl.int32, bitcast=True) >> 23) & 0xFF) - 127
        if SCALING == "even":
            e = (amax_bits + 0x200000) >> 23
        elif SCALING == "floor":
            e = amax_bits >> 23
        else:
            tl.static_assert(SCALING == "ceil")
            e = (amax_bits >> 23) + ((amax_bits & 0x7FFFFF) != 0).to(tl.int32)
    return tl.where(e >= 255, 127, tl.minimum(tl.maximum(e - 127 - emax, -127), 127))


@triton.jit
def _e2m1(a, h, lim):
    """e2m1 magnitude codes of ``a * h`` (a fp32 >= 0; h a block's 1 or 0.5,
    MXFP4's scale 2^127 applied as 2^126 and this halving), rounded to nearest even and
    saturated to 6: int32 whose low 3 bits are the magnitude's code and whose bits above are
    the same in every code (the pack adds the sign in bit 3 and keeps the low byte of ``lo +
    16 * hi``). ``lim``: 6 / h, or 0 in a block holding a NaN: every code of that block 0
    (the minimum takes the number where one operand is NaN; the pack adds no sign there).

    The code is a concave piecewise-linear function of e2m1's value r: ``min(2r, r + 2,
    r / 2 + 4)`` (0, 0.5, 1, 1.5, 2, 3, 4, 6 -> 0 ... 7), linear between neighbouring values,
    so midpoints map to half-integers and the nearest even value to the even code: the code
    of v is that function of v rounded to an integer, ties to even. Each line plus 2^23 is
    one multiply-add (a power-of-2 product, exact, then one rounding to fp32's step 1 in
    [2^23, 2^24)); rounding is monotone, so the minimum of the three rounded lines is the
    rounded minimum, and its bits are 2^23's plus the code. The clamp comes first: no
    multiply that made ``a`` is fused into the additions (NVFP4's ``a`` is a rounded
    product, which a fused multiply-add would not round). Three multiply-adds (the FMA pipe)
    and three minima an element, no integer arithmetic but the sign; equal to the
    reference on every fp32 in [0, 16]."""
    a = tl.minimum(a, lim)
    c = tl.minimum(tl.minimum(a * (2.0 * h) + _E2M1_M0, a * h + (_E2M1_M0 + 2.0)), a * (0.5 * h) + (_E2M1_M0 + 4.0))
    return c.to(tl.int32, bitcast=True)


@triton.jit
def _mx_quant_kernel(
    x_ptr,                        # MODE "plain" / "rms": rows; "act": gate then up, n_cols apart; "flatten":
                                  # rows of segments of seg_len columns, stride_x_seg apart
    q_ptr,                        # packed e2m1 (uint8) or fp8 values: (n_rows, n_cols [/ 2]) at stride_q_row
    s_ptr,                        # scales: e8m0 (uint8) or fp8 e4m3 (nvfp4), (row, block) through the strides,
                                  # or SHUFFLE's layout of a (scale_rows, scale_cols) buffer
    w_ptr, r_ptr, r_out_ptr, y1_ptr,  # rms: weight, residual, x + residual out, the norm unquantized out
                                  # (r_out, y1, y2: contiguous rows)
    x2_ptr, w2_ptr, y2_ptr,       # rms: a second input's norm, unquantized, by cdiv(n_rows, BLOCK_M) more programs
    g_ptr,                        # nvfp4: the global scale (one fp32) where HAS_GLOBAL
    stride_x_row, stride_x_seg, stride_q_row, stride_s_row, stride_s_group,
    stride_r, stride_x2,
    n_rows, n_cols, seg_len, n_cols2,
    scale_rows, scale_cols,       # the scale extent written: (n_rows, blocks), or padded (bytes 127 past them)
    eps1, eps2, q_max, s_max,     # runtime fp32: norms' eps, the element format's max, nvfp4 scale dtype's max
    MODE: tl.constexpr,           # "plain" | "act" | "rms" | "flatten"
    ACTIVATION: tl.constexpr,     # "act": y = ACTIVATION(gate) * up
    FORMAT: tl.constexpr,         # "mxfp4" | "mxfp8" | "nvfp4"
    SCALING: tl.constexpr,        # e8m0 rule: "even" | "floor" | "ceil" | "rceil"
    STORE_Y1: tl.constexpr,
    HAS_X2: tl.constexpr,
    HAS_GLOBAL: tl.constexpr,
    SHUFFLE: tl.constexpr,        # scales in aiter's preshuffled layout (e8m0_shuffle) of the padded buffer
    SEG_SHIFT: tl.constexpr,      # "flatten": log2(seg_len) where a power of 2, else -1
    INT64: tl.constexpr,          # offsets can pass 2^31
    SOFT_ROUND: tl.constexpr,     # fp8 rounded in fp32 before its conversion (the interpreter)
    GROUP: tl.constexpr,          # columns a block: 32 (MX) or 16 (NV)
    VEC: tl.constexpr,            # columns of one 16-byte load of x (GROUP // VEC of them a block)
    BLOCK_M: tl.constexpr,        # rows a program
    BLOCK_N: tl.constexpr,        # columns a program, a multiple of GROUP ("rms": the whole, padded, row,
                                  # or with ROW_LOOP the columns of a chunk)
    BLOCK_N2: tl.constexpr,       # HAS_X2: the second input's row
    ROW_MAJOR: tl.constexpr,      # a 1-D grid, column blocks fastest (not with HAS_X2)
    ROW_LOOP: tl.constexpr,       # "rms": each row in BLOCK_N-column chunks, read twice
    LINES16: tl.constexpr,        # MXFP4 of bf16 rows ("plain" / "flatten") in bf16 arithmetic: _mxfp4_bf16_rows
):
    # scalars to fp32 (inductor passes Python floats as fp64); tl.cast: a float has no .to in the interpreter
    eps1 = tl.cast(eps1, tl.float32)
    eps2 = tl.cast(eps2, tl.float32)
    q_max = tl.cast(q_max, tl.float32)
    s_max = tl.cast(s_max, tl.float32)
    NG: tl.constexpr = BLOCK_N // GROUP
    if ROW_MAJOR:  # one axis, a row block's column blocks one after another (the order of the bytes)
        n_col_blocks = tl.cdiv(scale_cols * GROUP, BLOCK_N)
        pid_m = tl.program_id(0) // n_col_blocks
        pid_n = tl.program_id(0) % n_col_blocks
    else:
        pid_m = tl.program_id(0)  # row blocks (then HAS_X2's), column blocks on axis 1
        pid_n = tl.program_id(1)
    if HAS_X2:  # programs past the quantizing ones: the second input's rows (live apart from the first's)
        n_quant = tl.cdiv(scale_rows, BLOCK_M)
        if pid_m >= n_quant:
            pid_2 = pid_m - n_quant
            if INT64:
                pid_2 = pid_2.to(tl.int64)
            _rms_rows(x2_ptr, w2_ptr, y2_ptr, pid_2 * BLOCK_M + tl.arange(0, BLOCK_M), stride_x2, n_cols2, n_rows,
                      n_cols2, eps2, BLOCK_N2)
            return
    if INT64:
        pid_m = pid_m.to(tl.int64)
        pid_n = pid_n.to(tl.int64)
    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    grp = pid_n * NG + tl.arange(0, NG)
    if MODE == "rms":
        _rms_quant(x_ptr, q_ptr, s_ptr, w_ptr, r_ptr, r_out_ptr, y1_ptr, g_ptr, rows, stride_x_row, stride_q_row,
                   stride_s_row, stride_s_group, stride_r, n_rows, n_cols, scale_rows, scale_cols, eps1, q_max, s_max,
                   FORMAT, SCALING, STORE_Y1, HAS_GLOBAL, SHUFFLE, SOFT_ROUND, GROUP, VEC, NG, ROW_LOOP)
    elif LINES16:
        tl.static_assert((FORMAT == "mxfp4") & (MODE != "act"))
        _mxfp4_bf16_rows(x_ptr, q_ptr, s_ptr, rows, grp, stride_x_row, stride_x_seg, stride_q_row, stride_s_row,
                         stride_s_group, n_rows, n_cols, seg_len, scale_rows, scale_cols, q_max, MODE, SCALING,
                         SHUFFLE, SEG_SHIFT, GROUP)
    else:
        x, u = _load_rows(x_ptr, rows, grp, stride_x_row, stride_x_seg, n_rows, n_cols, seg_len, MODE, SEG_SHIFT,
                          GROUP, VEC)
        _mx_store(_produce(x, u, ACTIVATION, MODE), rows, grp, q_ptr, s_ptr, g_ptr, stride_q_row, stride_s_row,
                  stride_s_group, n_rows, n_cols, scale_rows, scale_cols, q_max, s_max, FORMAT, SCALING, HAS_GLOBAL,
                  SHUFFLE, SOFT_ROUND, GROUP)


@triton.jit
def _rms_quant(x_ptr, q_ptr, s_ptr, w_ptr, r_ptr, r_out_ptr, y1_ptr, g_ptr, rows, stride_x_row, stride_q_row,
               stride_s_row, stride_s_group, stride_r, n_rows, n_cols, scale_rows, scale_cols, eps, q_max, s_max,
               FORMAT: tl.constexpr, SCALING: tl.constexpr, STORE_Y1: tl.constexpr, HAS_GLOBAL: tl.constexpr,
               SHUFFLE: tl.constexpr, SOFT_ROUND: tl.constexpr, GROUP: tl.constexpr, VEC: tl.constexpr,
               NG: tl.constexpr, LOOP: tl.constexpr):
    """RMSNorm (x + the residual where r_ptr is not None, its sum stored) of ``rows``,
    quantized. The whole (padded) row of NG blocks in registers; or (LOOP) in chunks of NG
    blocks: the sum of squares over the row's chunks, then each chunk read again (from the
    cache: the program read it just before), normalized and quantized, so no lane idles on a
    padded row and only a chunk is live."""
    ss = tl.zeros([rows.shape[0]], tl.float32)
    if LOOP:
        for c0 in range(0, n_cols, NG * GROUP):
            x = _rms_input(x_ptr, r_ptr, r_out_ptr, rows, c0 // GROUP + tl.arange(0, NG), stride_x_row, stride_r,
                           n_rows, n_cols, GROUP, VEC, True)
            ss += tl.sum(tl.sum(tl.sum(x * x, axis=3), axis=2), axis=1)
    else:
        x = _rms_input(x_ptr, r_ptr, r_out_ptr, rows, tl.arange(0, NG), stride_x_row, stride_r, n_rows, n_cols,
                       GROUP, VEC, True)
        ss += tl.sum(tl.sum(tl.sum(x * x, axis=3), axis=2), axis=1)
    rstd = tl.math.rsqrt(tl.math.div_rn(ss, tl.cast(n_cols, tl.float32)) + eps)[:, None, None, None]
    if LOOP:
        for c0 in range(0, scale_cols * GROUP, NG * GROUP):  # the scale buffer's padding columns included
            grp = c0 // GROUP + tl.arange(0, NG)
            x = _rms_input(x_ptr, r_ptr, r_out_ptr, rows, grp, stride_x_row, stride_r, n_rows, n_cols, GROUP, VEC,
                           False)
            _rms_out(x * rstd, w_ptr, y1_ptr, q_ptr, s_ptr, g_ptr, rows, grp, stride_q_row, stride_s_row,
                     stride_s_group, n_rows, n_cols, scale_rows, scale_cols, q_max, s_max, FORMAT, SCALING,
                     STORE_Y1, HAS_GLOBAL, SHUFFLE, SOFT_ROUND, GROUP)
    else:
        _rms_out(x * rstd, w_ptr, y1_ptr, q_ptr, s_ptr, g_ptr, rows, tl.arange(0, NG), stride_q_row, stride_s_row,
                 stride_s_group, n_rows, n_cols, scale_rows, scale_cols, q_max, s_max, FORMAT, SCALING, STORE_Y1,
                 HAS_GLOBAL, SHUFFLE, SOFT_ROUND, GROUP)


@triton.jit
def _rms_input(x_ptr, r_ptr, r_out_ptr, rows, grp, stride_x_row, stride_r, n_rows, n_cols, GROUP: tl.constexpr,
               VEC: tl.constexpr, STORE_SUM: tl.constexpr):
    """x (+ the residual, where r_ptr is not None; the sum stored with STORE_SUM) of rows x
    blocks ``grp``, fp32, as (rows, blocks, GROUP // VEC vectors, VEC columns): see _load_rows."""
    cols = _block_cols(grp, GROUP, VEC)
    r4 = rows[:, None, None, None]
    mask = (r4 < n_rows) & (cols < n_cols)
    x = tl.load(x_ptr + r4 * stride_x_row + cols, mask=mask, other=0.0).to(tl.float32)
    if r_ptr is not None:
        x += tl.load(r_ptr + r4 * stride_r + cols, mask=mask, other=0.0).to(tl.float32)
        if STORE_SUM:
            tl.store(r_out_ptr + r4 * n_cols + cols, x.to(r_out_ptr.dtype.element_ty), mask=mask)
    return x


@triton.jit
def _rms_out(x_rstd, w_ptr, y1_ptr, q_ptr, s_ptr, g_ptr, rows, grp, stride_q_row, stride_s_row, stride_s_group,
             n_rows, n_cols, scale_rows, scale_cols, q_max, s_max, FORMAT: tl.constexpr, SCALING: tl.constexpr,
             STORE_Y1: tl.constexpr, HAS_GLOBAL: tl.constexpr, SHUFFLE: tl.constexpr, SOFT_ROUND: tl.constexpr,
             GROUP: tl.constexpr):
    """``x * rstd`` of rows x blocks ``grp`` times the weight: stored unquantized (STORE_Y1)
    and quantized."""
    cols = _block_cols(grp, GROUP, x_rstd.shape[3])
    y = x_rstd * tl.load(w_ptr + cols, mask=cols < n_cols, other=0.0).to(tl.float32)
    if STORE_Y1:
        r4 = rows[:, None, None, None]
        tl.store(y1_ptr + r4 * n_cols + cols, y.to(y1_ptr.dtype.element_ty), mask=(r4 < n_rows) & (cols < n_cols))
    _mx_store(y, rows, grp, q_ptr, s_ptr, g_ptr, stride_q_row, stride_s_row, stride_s_group, n_rows, n_cols,
              scale_rows, scale_cols, q_max, s_max, FORMAT, SCALING, HAS_GLOBAL, SHUFFLE, SOFT_ROUND, GROUP)


@triton.jit
def _load_rows(x_ptr, rows, grp, stride_x_row, stride_x_seg, n_rows, n_cols, seg_len, MODE: tl.constexpr,
               SEG_SHIFT: tl.constexpr, GROUP: tl.constexpr, VEC: tl.constexpr):
    """The producer's inputs of rows x blocks ``grp``, as loaded (x's dtype): ("act") the gate and
    the up halves, else x twice. The tile is (rows, blocks, GROUP // VEC vectors, VEC columns):
    the compiler gives each lane whole blocks (a 16-byte vector is its fastest axis; the
    blocks, not the vectors, go across the lanes), so a block's amax and scale are one lane's
    work, with no shuffles between lanes."""
    cols = _block_cols(grp, GROUP, VEC)
    r4 = rows[:, None, None, None]
    mask = (r4 < n_rows) & (cols < n_cols)
    x_rows = x_ptr + r4 * stride_x_row
    if MODE == "flatten":
        if SEG_SHIFT >= 0:  # seg_len = 2^SEG_SHIFT, a constant: shifts, and runs of it contiguous (vector loads)
            SEG: tl.constexpr = 1 << SEG_SHIFT
            seg_offs = (cols // SEG) * stride_x_seg + cols % SEG
        else:
            seg_offs = (cols // seg_len) * stride_x_seg + cols % seg_len
        x = tl.load(x_rows + seg_offs, mask=mask, other=0.0)
    else:
        x = tl.load(x_rows + cols, mask=mask, other=0.0)
    if MODE == "act":  # masked lanes: act(0) * 0 = 0, below any amax
        u = tl.load(x_rows + n_cols + cols, mask=mask, other=0.0)
    else:  # one if / else: the compiler builds every branch a constexpr return does not end
        tl.static_assert((MODE == "plain") | (MODE == "flatten"))
        u = x
    return x, u


@triton.jit
def _produce(x, u, ACTIVATION: tl.constexpr, MODE: tl.constexpr):
    """The values to quantize, fp32, from _load_rows's pair."""
    if MODE == "act":
        y = _apply_activation(x.to(tl.float32), ACTIVATION) * u.to(tl.float32)
    else:
        y = x.to(tl.float32)
    return y


@triton.jit
def _block_cols(grp, GROUP: tl.constexpr, VEC: tl.constexpr):
    """Columns of blocks ``grp`` as (1, blocks, GROUP // VEC, VEC)."""
    return (grp[None, :, None, None] * GROUP + tl.arange(0, GROUP // VEC)[None, None, :, None] * VEC
            + tl.arange(0, VEC)[None, None, None, :])


# The bf16 MXFP4 form works on 32-bit words of two bf16 values (column 2k in the low half), loaded
# as int32, so each inline-asm instance's operands are explicit whatever layout the compiler
# chooses. _PAIR_PTX: e2m1 codes of one word ($1) under the block's 2^-s ($2, both halves) and
# line slopes 2h, h, h / 2 ($3-$5): |x| (bits and 0x7FFF7FFF) * 2^-s = r; the lines r * slope +
# 132 / 134 / 136, bf16's step being 1 in [128, 256), so each is rounded to nearest even once;
# their minimum and 139 (6's code); +-1 from the sign bit times -4 added: 128 + the code (+ 8 for
# a negative value), the code in the low byte of each half.
_PAIR_PTX: tl.constexpr = tl.constexpr(
    "{ .reg .b32 a, r, l1, l2, l3, s, z, b1, b2, b3, top, k;\n"
    "mov.b32 z, 0x80008000; mov.b32 b1, 0x43044304; mov.b32 b2, 0x43064306; mov.b32 b3, 0x43084308;\n"
    "mov.b32 top, 0x430B430B; mov.b32 k, 0xC080C080;\n"
    "and.b32 a, $1, 0x7FFF7FFF;\n"
    "fma.rn.bf16x2 r, a, $2, z;\n"
    "fma.rn.bf16x2 l1, r, $3, b1;\n"
    "fma.rn.bf16x2 l2, r, $4, b2;\n"
    "fma.rn.bf16x2 l3, r, $5, b3;\n"
    "min.bf16x2 l1, l1, l2;\n"
    "min.bf16x2 l3, l3, top;\n"
    "min.bf16x2 l1, l1, l3;\n"
    "lop3.b32 s, $1, a, 0x3F803F80, 0xBE;\n"  # (x ^ |x|) | 1.0: +-1
    "fma.rn.bf16x2 $0, s, k, l1; }")
# Four words of _PAIR_PTX's codes ($1-$4, columns 0-1, 2-3, 4-5, 6-7) into one word of 8 e2m1
# values, column 2k in byte k's low nibble: bytes 0 and 2 of each gathered, the odd columns' shifted.
_PACK_PTX: tl.constexpr = tl.constexpr(
    "{ .reg .b32 u0, u1, lo, hi;\n"
    "prmt.b32 u0, $1, $2, 0x6240;\n"
    "prmt.b32 u1, $3, $4, 0x6240;\n"
    "prmt.b32 lo, u0, u1, 0x5410;\n"
    "prmt.b32 hi, u0, u1, 0x7632;\n"
    "shl.b32 hi, hi, 4;\n"
    "or.b32 $0, lo, hi; }")
# the largest of two words' bf16 halves, NaN kept (x's bits past inf's)
_MAX_PTX: tl.constexpr = tl.constexpr("max.NaN.bf16x2 $0, $1, $2;")


@triton.jit
def _max_bf16x2(a, b):
    return tl.inline_asm_elementwise(_MAX_PTX, "=r,r,r", [a, b], dtype=tl.int32, is_pure=True, pack=1)


@triton.jit
def _mxfp4_bf16_rows(x_ptr, q_ptr, s_ptr, rows, grp, stride_x_row, stride_x_seg, stride_q_row, stride_s_row,
                     stride_s_group, n_rows, n_cols, seg_len, scale_rows, scale_cols, q_max, MODE: tl.constexpr,
                     SCALING: tl.constexpr, SHUFFLE: tl.constexpr, SEG_SHIFT: tl.constexpr, GROUP: tl.constexpr):
    """MXFP4 of bf16 rows in bf16 arithmetic, two values an instruction (NVIDIA's HFMA2 /
    HMNMX2): rows x blocks ``grp`` loaded as 32-bit words of two values ((rows, blocks, 4
    vectors, 4 words): 16-byte loads), the codes packed by byte permutes into 32-bit words of
    8 values, a block's 16 bytes stored at once (n_cols a multiple of 32; x's rows, segments
    and q's rows 4-byte aligned). The same bytes as _mx_store's fp32 lines: ``|x| * 2^-s`` is a power-of-2
    product of a bf16 (r < 8; a product below bf16's normals rounds to code 0 either way),
    each line a power-of-2 product plus an even integer rounded once to bf16's step 1."""
    tl.static_assert(GROUP == 32)
    BLOCK_M: tl.constexpr = rows.shape[0]
    NG: tl.constexpr = grp.shape[0]
    r4 = rows[:, None, None, None]
    pc = _block_cols(grp, GROUP // 2, 4)  # (1, blocks, 4, 4): words of two columns (2 pc and 2 pc + 1)
    mask = (r4 < n_rows) & (grp * GROUP < n_cols)[None, :, None, None]  # whole blocks (n_cols a multiple of 32)
    if MODE == "flatten":  # segments of an even length, an even stride apart
        if SEG_SHIFT >= 1:
            SEG: tl.constexpr = 1 << (SEG_SHIFT - 1)
            offs = (pc // SEG) * (stride_x_seg // 2) + pc % SEG
        else:
            offs = (pc // (seg_len // 2)) * (stride_x_seg // 2) + pc % (seg_len // 2)
    else:
        offs = pc
    x_rows = (x_ptr + r4 * stride_x_row).to(tl.pointer_type(tl.int32), bitcast=True)  # (the rows' alignment kept)
    xw = tl.load(x_rows + offs, mask=mask, other=0)
    amax = tl.reduce(tl.reduce(xw & 0x7FFF7FFF, 3, _max_bf16x2), 2, _max_bf16x2)
    amax_bits = tl.maximum(amax & 0xFFFF, (amax >> 16) & 0xFFFF) << 16  # of the fp32 value
    nan = amax_bits > _INF_BITS
    s = _e8m0_exponent(tl.minimum(amax_bits, _INF_BITS), q_max, SCALING)
    # 2^-s as 2^-126 where s = 127 and the slopes halved: bf16 bits in both halves of a word
    f = ((127 - tl.minimum(s, 126)) << 7) * 0x10001
    half = tl.where(s > 126, 0x00800080, 0)
    shape: tl.constexpr = xw.shape
    t = tl.inline_asm_elementwise(
        _PAIR_PTX, "=r,r,r,r,r,r",
        [xw, tl.broadcast_to(f[:, :, None, None], shape), tl.broadcast_to((0x40004000 - half)[:, :, None, None], shape),
         tl.broadcast_to((0x3F803F80 - half)[:, :, None, None], shape),
         tl.broadcast_to((0x3F003F00 - half)[:, :, None, None], shape)],
        dtype=tl.int32, is_pure=True, pack=1)
    t02, t13 = tl.split(tl.reshape(t, (BLOCK_M, NG, 4, 2, 2)))
    t0, t2 = tl.split(t02)
    t1, t3 = tl.split(t13)
    words = tl.inline_asm_elementwise(_PACK_PTX, "=r,r,r,r,r", [t0, t1, t2, t3], dtype=tl.int32, is_pure=True,
                                      pack=1)
    words = tl.where(nan[:, :, None], 0, words)  # a NaN block: every code 0
    r3 = rows[:, None, None]
    w = grp[None, :, None] * 4 + tl.arange(0, 4)[None, None, :]  # 32-bit words of q: 8 columns each
    q_rows = (q_ptr + r3 * stride_q_row).to(tl.pointer_type(tl.int32), bitcast=True)
    tl.store(q_rows + w, words, mask=(r3 < n_rows) & (grp * GROUP < n_cols)[None, :, None])  # whole blocks: 16-byte stores
    s_out = tl.where(nan, 255, s + 127)
    s_out = tl.where((rows < n_rows)[:, None] & (grp * GROUP < n_cols)[None, :], s_out, 127).to(tl.uint8)
    _store_scales(s_out, rows, grp, s_ptr, stride_s_row, stride_s_group, scale_rows, scale_cols, SHUFFLE)


@triton.jit
def _mx_store(y, rows, grp, q_ptr, s_ptr, g_ptr, stride_q_row, stride_s_row, stride_s_group, n_rows, n_cols,
              scale_rows, scale_cols, q_max, s_max, FORMAT: tl.constexpr, SCALING: tl.constexpr,
              HAS_GLOBAL: tl.constexpr, SHUFFLE: tl.constexpr, SOFT_ROUND: tl.constexpr, GROUP: tl.constexpr):
    """The (rows, blocks ``grp``, GROUP // VEC, VEC columns) tile y quantized: values into q,
    scales into s."""
    BLOCK_M: tl.constexpr = y.shape[0]
    NG: tl.constexpr = y.shape[1]
    NV: tl.constexpr = y.shape[2]
    VEC: tl.constexpr = y.shape[3]
    r4 = rows[:, None, None, None]
    cols = _block_cols(grp, GROUP, VEC)
    if FORMAT == "nvfp4":
        amax = _amax_nan(y, SOFT_ROUND)
        sf = amax * _RCP6
        if HAS_GLOBAL:
            g = tl.load(g_ptr).to(tl.float32)
            sf = g * sf
        sf = tl.clamp(sf, -s_max, s_max, propagate_nan=tl.PropagateNan.ALL)
        s_dtype: tl.constexpr = s_ptr.dtype.element_ty
        if SOFT_ROUND:
            s_val = _fp8_grid(sf, s_dtype)
        else:
            s_val = sf.to(s_dtype).to(tl.float32)
        s_out = _quantize(sf, 1.0, -s_max, s_max, s_dtype, SOFT_ROUND)
        if HAS_GLOBAL:
            s_val = s_val * tl.where(g == 0.0, 0.0, tl.math.div_rn(1.0, tl.where(g == 0.0, 1.0, g)))
        inv = tl.where(s_val == 0.0, 0.0, tl.math.div_rn(1.0, tl.where(s_val == 0.0, 1.0, s_val)))
        nan = inv != inv  # a NaN in the block, or a NaN global scale
        codes = _e2m1(tl.abs(y) * inv[:, :, None, None], 1.0, tl.where(nan, 0.0, 6.0)[:, :, None, None])
    else:
        amax_bits = _amax_nan(y, SOFT_ROUND).to(tl.int32, bitcast=True)  # NaN: above inf's bits
        nan = amax_bits > _INF_BITS
        s = _e8m0_exponent(tl.minimum(amax_bits, _INF_BITS), q_max, SCALING)
        # 2^-s as 2^-126 where s = 127 (2^-127 alone is a denormal, which a target may flush to 0),
        # the last halving h in _e2m1's lines (MXFP4) or a second factor (MXFP8)
        f = _pow2(tl.maximum(-s, -126))[:, :, None, None]
        h = tl.where(s > 126, 0.5, 1.0)[:, :, None, None]
        s_out = tl.where(nan, 255, s + 127)
        s_out = tl.where((rows < n_rows)[:, None] & (grp * GROUP < n_cols)[None, :], s_out, 127)  # padding: 1.0
        s_out = s_out.to(tl.uint8)
        if FORMAT == "mxfp8":
            v = tl.where(nan[:, :, None, None], float("nan"), y * f * h)
            tl.store(q_ptr + r4 * stride_q_row + cols,
                     _quantize(v, 1.0, -q_max, q_max, q_ptr.dtype.element_ty, SOFT_ROUND),
                     mask=(r4 < n_rows) & (cols < n_cols))
        else:
            tl.static_assert(FORMAT == "mxfp4")
            codes = _e2m1(tl.abs(y) * f, h, tl.where(nan, 0.0, tl.where(s > 126, 12.0, 6.0))[:, :, None, None])
    if FORMAT != "mxfp8":
        lo, hi = tl.split(tl.reshape(codes, (BLOCK_M, NG, NV, VEC // 2, 2)))
        # the signs (bit 3 of each code; none in a NaN block): each value's sign bit, 0 or 1,
        # times 8 or 0 a block, by multiply-adds (the FMA pipe) where shifts and masks take the
        # integer one
        two = tl.where(nan, 0, 2).to(tl.uint32)[:, :, None, None]  # a value the compiler cannot fold
        s_lo, s_hi = tl.split(tl.reshape(tl.umulhi(y.to(tl.uint32, bitcast=True), two).to(tl.int32),
                                         (BLOCK_M, NG, NV, VEC // 2, 2)))
        byte = _block_cols(grp, GROUP // 2, VEC // 2)
        packed = (lo + hi * 16 + s_lo * 8 + s_hi * 128).to(tl.uint8)
        tl.store(q_ptr + r4 * stride_q_row + byte, packed,
                 mask=(r4 < n_rows) & (byte < n_cols // 2))  # n_cols even

    _store_scales(s_out, rows, grp, s_ptr, stride_s_row, stride_s_group, scale_rows, scale_cols, SHUFFLE)


@triton.jit
def _store_scales(s_out, rows, grp, s_ptr, stride_s_row, stride_s_group, scale_rows, scale_cols,
                  SHUFFLE: tl.constexpr):
    """A (rows, blocks ``grp``) tile of scales into s."""
    s_mask = (rows < scale_rows)[:, None] & (grp < scale_cols)[None, :]
    tl.store(s_ptr + _scale_offsets(rows, grp, stride_s_row, stride_s_group, scale_cols, SHUFFLE), s_out,
             mask=s_mask)


@triton.jit
def _scale_offsets(rows, grp, stride_s_row, stride_s_group, scale_cols, SHUFFLE: tl.constexpr):
    """Offsets of the (rows, blocks ``grp``) scales: through the strides, or (SHUFFLE) aiter's
    e8m0_shuffle layout of a (rows, scale_cols) buffer, 32 x 8 tiles."""
    m = rows[:, None]
    n = grp[None, :]
    if SHUFFLE:
        return ((m % 32) // 16 + ((n % 8) // 4) * 2 + (m % 16) * 4 + (n % 4) * 64 + (n // 8) * 256
                + (m // 32) * 32 * scale_cols)
    return m * stride_s_row + n * stride_s_group


@triton.jit
def _rms_rows(x_ptr, w_ptr, y_ptr, rows, stride_x, stride_y, n_rows, n_cols, eps, BLOCK_N: tl.constexpr):
    """``rows`` of x normalized (RMSNorm, weight w) into y, in y's dtype."""
    cols = tl.arange(0, BLOCK_N)
    mask = (rows < n_rows)[:, None] & (cols < n_cols)[None, :]
    x = tl.load(x_ptr + rows[:, None] * stride_x + cols[None, :], mask=mask, other=0.0).to(tl.float32)
    rstd = tl.math.rsqrt(tl.math.div_rn(tl.sum(x * x, axis=1), tl.cast(n_cols, tl.float32)) + eps)
    y = x * rstd[:, None] * tl.load(w_ptr + cols, mask=cols < n_cols, other=0.0).to(tl.float32)[None, :]
    tl.store(y_ptr + rows[:, None] * stride_y + cols[None, :], y.to(y_ptr.dtype.element_ty), mask=mask)
