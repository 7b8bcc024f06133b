"""fp8 / int8 activation quantization kernels: per tensor (static or dynamic), per token,
per token group.

Every kernel quantizes the same way (``_quantize``): ``x * (1 / scale)`` in fp32,
saturated to the output dtype's range ``[q_min, q_max]`` (runtime values the wrapper
takes from the output dtype: no inf in fp8, no wrap in int8), rounded to the nearest
even integer for int8 (fp8's own conversion rounds to nearest even). Scales are
``amax / q_max`` by an IEEE division, so a scale equals the reference's bit for bit.

NaN stays visible, as in the reference: every amax is a NaN-keeping maximum
(``_nan_max``: ``tl.maximum`` and ``tl.max`` drop NaN by default), so a NaN in a row
(group, tensor) makes that scale NaN, and every value it scales NaN in fp8 (e4m3fn,
e4m3fnuz and e5m2 all have one) or 0 in int8 (which has none: the NaN scale carries it).
A NaN reaching a static scale is NaN in fp8, 0 in int8.
"""

import triton
import triton.language as tl

from aiter_lite.ops.triton._triton_kernels.split_rows import _segment_ticket, co_resident, segments_waiting


@triton.jit
def _rint(y):
    """Round to the nearest integer, ties to even (torch.round), for |y| < 2^22."""
    r = tl.floor(y + 0.5)
    odd = (r - 2.0 * tl.floor(r * 0.5)) != 0.0
    return tl.where((r - y == 0.5) & odd, r - 1.0, r)


@triton.jit
def _fp8_grid(y, dtype: tl.constexpr):
    """``y`` rounded to the nearest value of the fp8 ``dtype``, ties to even, in fp32:
    the step of y's binade (the smallest normal's below it), y / step rounded."""
    e = ((y.to(tl.int32, bitcast=True) >> 23) & 0xFF) - 127
    e = tl.maximum(e, 1 - dtype.exponent_bias) - dtype.fp_mantissa_width
    step = ((e + 127) << 23).to(tl.float32, bitcast=True)
    return _rint(y / step) * step


@triton.jit
def _nan_max(a, b):
    """``max(a, b)``, NaN where either is (``tl.maximum``'s default drops a NaN)."""
    return tl.maximum(a, b, propagate_nan=tl.PropagateNan.ALL)


@triton.jit
def _amax(x, axis):
    """``max |x|`` along ``axis``, NaN where any element there is NaN: an integer maximum
    of the bits of ``|x|`` (non-negative floats order as their bits do, NaN above inf),
    one built-in reduction where a NaN-keeping float combine would be a custom one."""
    return tl.max(_amax_bits(x), axis).to(tl.float32, bitcast=True)


@triton.jit
def _amax_bits(x):
    """``|x|`` (fp32) as int32 bits that order as the values do, NaN above inf (the sign
    bit cleared): integer maxima of them keep NaN, as the per-tensor amax's atomic does."""
    return tl.abs(x).to(tl.int32, bitcast=True)


@triton.jit
def _rint_sat_s32(y):
    """fp32 ``y`` rounded to the nearest integer (ties to even), saturated to int32, NaN to
    0: one NVIDIA conversion (``cvt.rni.sat.s32.f32``; PTX only)."""
    return tl.inline_asm_elementwise("cvt.rni.sat.s32.f32 $0, $1;", "=r,r", [y], dtype=tl.int32, is_pure=True, pack=1)


@triton.jit
def _quantize(x, inv_scale, q_min, q_max, dtype: tl.constexpr, SOFT_ROUND: tl.constexpr):
    """fp32 ``x`` scaled by ``inv_scale``, saturated, in ``dtype``; NaN stays NaN in fp8 and
    is 0 in int8 (a float-to-int conversion of NaN is undefined). int8 rounds to nearest,
    ties to even. SOFT_ROUND, the other rounding: fp8 values rounded in fp32 first, so the
    conversion is exact, and NaN written as its bits (Triton's interpreter converts fp32
    to fp8 without carrying a rounded-up mantissa into the exponent, and NaN to a number);
    int8 truncated toward zero (aiter's kernels' bits, ``AITER_INT8_ROUNDING=truncate``).
    SOFT_ROUND 2 (int8 on NVIDIA, to nearest): the product rounded, NaN to 0 and saturated
    by one conversion (``cvt.rni.sat.s32.f32``), then clamped as integers: the same values
    as rounding the clamped product (the bounds are integers), in one conversion and two
    integer min / max where the float form spends a dozen instructions, most on the integer
    pipe, and two conversions."""
    if dtype.is_int() and SOFT_ROUND == 2:
        k = _rint_sat_s32(x * inv_scale)
        return tl.minimum(tl.maximum(k, q_min.to(tl.int32)), q_max.to(tl.int32)).to(dtype)
    y = tl.clamp(x * inv_scale, q_min, q_max, propagate_nan=tl.PropagateNan.ALL)
    if dtype.is_int():
        if not SOFT_ROUND:  # else toward zero, the conversion's own
            y = _rint(y)
        q = tl.where(y != y, 0.0, y).to(dtype)
    elif SOFT_ROUND:  # one if / elif chain: the compiler builds every branch a constexpr return does not end
        nan_bits = 0x80 if dtype == tl.float8e4b8 else 0x7F  # e4m3fnuz's one NaN; e4m3fn's, an e5m2 NaN
        bits = _fp8_grid(y, dtype).to(dtype).to(tl.uint8, bitcast=True)
        q = tl.where(y != y, nan_bits, bits).to(tl.uint8).to(dtype, bitcast=True)
    else:
        q = y.to(dtype)
    return q


@triton.jit
def _ceil_pow2(s):
    """The least power of 2 >= ``s`` (fp32, s >= 0), exactly: the exponent carried up by
    any mantissa bit (aiter's ``exp2(ceil(log2(s)))`` goes one power too high where the
    approximate log2 of a power of 2 lands above it); NaN kept."""
    up = (s.to(tl.int32, bitcast=True) + 0x7FFFFF) & 0x7F800000
    return tl.where(s != s, s, up.to(tl.float32, bitcast=True))


@triton.jit
def _scale_of(amax, q_max, min_scale):
    """``max(amax / q_max, min_scale)``: never 0 (an all-zero input quantizes to zeros); NaN
    for a NaN amax."""
    return _nan_max(tl.math.div_rn(amax, q_max), min_scale)


@triton.jit
def _row_scale(amax, ub_ptr, q_max, min_scale, HAS_UB: tl.constexpr):
    """A dynamic row scale: the amax capped at the upper bound (HAS_UB), over q_max, floored;
    NaN for a NaN amax (the cap keeps it)."""
    if HAS_UB:
        amax = tl.minimum(amax, tl.load(ub_ptr), propagate_nan=tl.PropagateNan.ALL)
    return _scale_of(amax, q_max, min_scale)


@triton.jit
def _load_f32(ptr, mask, EVEN: tl.constexpr, other=0.0):
    """fp32 of x at ``ptr``, ``other`` where masked (EVEN: every lane, ``mask`` unused)."""
    if EVEN:
        x = tl.load(ptr)
    else:
        x = tl.load(ptr, mask=mask, other=other)
    return x.to(tl.float32)


@triton.jit
def _tile(pid_m, pid_n, n_rows, n_cols, EVEN: tl.constexpr, INT64: tl.constexpr, BLOCK_M: tl.constexpr,
          BLOCK_N: tl.constexpr):
    """Rows, columns and mask of one (BLOCK_M, BLOCK_N) tile (callers drop the mask when
    EVEN: a helper returning None does not build on Triton 3.6)."""
    if INT64:
        pid_m = pid_m.to(tl.int64)
    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    mask = (rows < n_rows)[:, None] & (cols < n_cols)[None, :]
    return rows, cols, mask


@triton.jit
def _static_quant_kernel(
    x_ptr, q_ptr,
    scale_ptr,                    # fp32, one element: q = x / scale (GROUPED: a grid of them)
    stride_x_row, stride_q_row,
    stride_s_row, stride_s_col,   # GROUPED: the scale of (row, col) at (row // group_m, col // group_n)
    group_m, group_n,
    n_rows, n_cols,
    q_min, q_max,                 # the output dtype's range (fp32)
    GROUPED: tl.constexpr,        # a scale per (group_m, group_n) block: per token, per channel, 2-D blocks
    EVEN: tl.constexpr,           # tiles divide (n_rows, n_cols): no masks
    INT64: tl.constexpr,          # offsets can pass 2^31
    SOFT_ROUND: tl.constexpr,     # fp8 rounded in fp32 before the conversion (the interpreter)
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
):
    """Static per-tensor quantization of an (n_rows, n_cols) tile grid, columns fastest."""
    # scalars to fp32 (inductor passes Python floats as fp64); tl.cast: a float has no .to in the interpreter
    q_min = tl.cast(q_min, tl.float32)
    q_max = tl.cast(q_max, tl.float32)
    rows, cols, mask = _tile(tl.program_id(1), tl.program_id(0), n_rows, n_cols, EVEN, INT64, BLOCK_M, BLOCK_N)
    if GROUPED:
        s_off = (rows // group_m)[:, None] * stride_s_row + (cols // group_n)[None, :] * stride_s_col
        if EVEN:
            s = tl.load(scale_ptr + s_off)
        else:
            s = tl.load(scale_ptr + s_off, mask=mask, other=1.0)
        inv_scale = tl.math.div_rn(1.0, s)
    else:
        inv_scale = tl.math.div_rn(1.0, tl.load(scale_ptr))
    x = _load_f32(x_ptr + rows[:, None] * stride_x_row + cols[None, :], mask, EVEN)
    q = _quantize(x, inv_scale, q_min, q_max, q_ptr.dtype.element_ty, SOFT_ROUND)
    tl.store(q_ptr + rows[:, None] * stride_q_row + cols[None, :], q, mask=None if EVEN else mask)


@triton.jit
def _amax_scale_kernel(
    x_ptr,
    work_ptr,                     # int32 (3,), zero at entry, zero again at exit: amax's bits, arrivals
    scale_ptr,                    # fp32, one element: written by the last program
    stride_x_row,
    n_rows, n_cols,
    q_max, min_scale,
    EVEN: tl.constexpr,
    INT64: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
):
    """The tensor's scale. Grid (column blocks, programs down the rows): each program
    takes every num_programs(1)-th row block of its column block, and its amax joins
    the tensor's by an integer atomic max (|x| >= 0, whose float bits order as integers,
    NaN above inf: exact, so the same in any order); the last program to arrive writes
    ``_scale_of(amax)`` and zeroes the work words for the next call. The scale is
    written, never read first: the caller need not zero it."""
    # scalars to fp32 (inductor passes Python floats as fp64); tl.cast: a float has no .to in the interpreter
    q_max = tl.cast(q_max, tl.float32)
    min_scale = tl.cast(min_scale, tl.float32)
    acc = tl.zeros([BLOCK_M, BLOCK_N], tl.float32)
    for pid_m in range(tl.program_id(1), tl.cdiv(n_rows, BLOCK_M), tl.num_programs(1)):
        rows, cols, mask = _tile(pid_m, tl.program_id(0), n_rows, n_cols, EVEN, INT64, BLOCK_M, BLOCK_N)
        acc = _nan_max(acc, tl.abs(_load_f32(x_ptr + rows[:, None] * stride_x_row + cols[None, :], mask, EVEN)))
    amax = _amax(_amax(acc, 1), 0)
    tl.atomic_max(work_ptr, _amax_bits(amax), sem="relaxed", scope="gpu")
    n_programs = tl.num_programs(0) * tl.num_programs(1)
    if tl.atomic_add(work_ptr + 1, 1, sem="acq_rel", scope="gpu") == n_programs - 1:
        amax = tl.atomic_xchg(work_ptr, 0, sem="relaxed", scope="gpu").to(tl.float32, bitcast=True)
        tl.atomic_xchg(work_ptr + 1, 0, sem="relaxed", scope="gpu")
        tl.store(scale_ptr, _scale_of(amax, q_max, min_scale))


@co_resident(lambda a: a["grid"] if a["PHASE"] == 0 else 1)
@triton.jit
def _dynamic_per_tensor_kernel(
    x_ptr, q_ptr,
    work_ptr,                     # int32 (3,), zero at entry, zero again at exit: amax's bits, arrivals, departures
    scale_ptr,                    # fp32, one element: written by program 0
    stride_x_row, stride_q_row,
    n_rows, n_cols,
    q_min, q_max, min_scale,
    PHASE: tl.constexpr,          # 0: amax, wait, quantize; 1 / 2: the amax / the rest alone (interpreter)
    EVEN: tl.constexpr,
    INT64: tl.constexpr,
    SOFT_ROUND: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
):
    """Dynamic per-tensor quantization in one launch, every program resident at once: a
    program's tile stays in registers while the tensor's amax forms (an integer atomic
    max, as ``_amax_scale_kernel``); each program raises the arrival count, waits for
    all, then quantizes its tile with the one scale. The last program to leave zeroes
    the work words for the next call."""
    # scalars to fp32 (inductor passes Python floats as fp64); tl.cast: a float has no .to in the interpreter
    q_min = tl.cast(q_min, tl.float32)
    q_max = tl.cast(q_max, tl.float32)
    min_scale = tl.cast(min_scale, tl.float32)
    col_blocks = tl.cdiv(n_cols, BLOCK_N)
    pid = tl.program_id(0)
    n_programs = tl.num_programs(0)
    rows, cols, mask = _tile(pid // col_blocks, pid % col_blocks, n_rows, n_cols, EVEN, INT64, BLOCK_M, BLOCK_N)
    x = _load_f32(x_ptr + rows[:, None] * stride_x_row + cols[None, :], mask, EVEN)
    if PHASE != 2:
        amax = _amax(_amax(x, 1), 0)
        tl.atomic_max(work_ptr, _amax_bits(amax), sem="relaxed", scope="gpu")
        tl.atomic_add(work_ptr + 1, 1, sem="release", scope="gpu")
    if PHASE != 1:
        while tl.atomic_add(work_ptr + 1, 0, sem="acquire", scope="gpu") < n_programs:
            pass
        amax = tl.atomic_add(work_ptr, 0, sem="relaxed", scope="gpu").to(tl.float32, bitcast=True)
        scale = _scale_of(amax, q_max, min_scale)
        if pid == 0:
            tl.store(scale_ptr, scale)
        q = _quantize(x, tl.math.div_rn(1.0, scale), q_min, q_max, q_ptr.dtype.element_ty, SOFT_ROUND)
        tl.store(q_ptr + rows[:, None] * stride_q_row + cols[None, :], q, mask=None if EVEN else mask)
        if tl.atomic_add(work_ptr + 2, 1, sem="acq_rel", scope="gpu") == n_programs - 1:
            tl.atomic_xchg(work_ptr, 0, sem="relaxed", scope="gpu")
            tl.atomic_xchg(work_ptr + 1, 0, sem="relaxed", scope="gpu")
            tl.atomic_xchg(work_ptr + 2, 0, sem="relaxed", scope="gpu")


@triton.jit
def _per_token_quant_kernel(
    x_ptr, q_ptr,
    scale_ptr,                    # fp32 (n_rows,) at stride_s: written
    ub_ptr,                       # fp32, one element: upper bound on the amax (HAS_UB)
    stride_x_row, stride_q_row, stride_s,
    n_rows, n_cols,
    q_min, q_max, min_scale,
    HAS_UB: tl.constexpr,
    LOOPED: tl.constexpr,         # the row in BLOCK_N-wide chunks, read twice (amax, then quantize)
    EVEN: tl.constexpr,           # BLOCK_M divides n_rows and BLOCK_N divides n_cols
    SOFT_ROUND: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
):
    """Dynamic per-token (per-row) quantization: a row's scale from its amax (capped at
    the bound when HAS_UB), then the row quantized with it."""
    # scalars to fp32 (inductor passes Python floats as fp64); tl.cast: a float has no .to in the interpreter
    q_min = tl.cast(q_min, tl.float32)
    q_max = tl.cast(q_max, tl.float32)
    min_scale = tl.cast(min_scale, tl.float32)
    rows = tl.program_id(0).to(tl.int64) * BLOCK_M + tl.arange(0, BLOCK_M)
    row_mask = rows < n_rows
    x_rows = x_ptr + rows[:, None] * stride_x_row
    q_rows = q_ptr + rows[:, None] * stride_q_row
    cols = tl.arange(0, BLOCK_N)
    if LOOPED:
        amax = tl.zeros([BLOCK_M], tl.float32)
        for start in range(0, n_cols, BLOCK_N):
            mask = None if EVEN else row_mask[:, None] & (start + cols < n_cols)[None, :]
            x = _load_f32(x_rows + start + cols[None, :], mask, EVEN)
            amax = _nan_max(amax, _amax(x, 1))
    else:
        mask = None if EVEN else row_mask[:, None] & (cols < n_cols)[None, :]
        x = _load_f32(x_rows + cols[None, :], mask, EVEN)
        amax = _amax(x, 1)
    scale = _row_scale(amax, ub_ptr, q_max, min_scale, HAS_UB)
    tl.store(scale_ptr + rows * stride_s, scale, mask=row_mask)
    inv_scale = tl.math.div_rn(1.0, scale)[:, None]
    dtype = q_ptr.dtype.element_ty
    if LOOPED:
        for start in range(0, n_cols, BLOCK_N):
            mask = None if EVEN else row_mask[:, None] & (start + cols < n_cols)[None, :]
            x = _load_f32(x_rows + start + cols[None, :], mask, EVEN)
            tl.store(q_rows + start + cols[None, :], _quantize(x, inv_scale, q_min, q_max, dtype, SOFT_ROUND), mask=mask)
    else:
        tl.store(q_rows + cols[None, :], _quantize(x, inv_scale, q_min, q_max, dtype, SOFT_ROUND), mask=mask)


@co_resident(segments_waiting)
@triton.jit
def _per_token_split_kernel(
    x_ptr, q_ptr,
    scale_ptr,                    # fp32 (n_rows,) at stride_s: written by each row's first segment
    ub_ptr,                       # fp32, one element: upper bound on the amax (HAS_UB)
    slot_ptr,                     # int64 (n_rows * n_segs + 1,), zeroed: published segment amaxes, a ticket
    stride_x_row, stride_q_row, stride_s,
    n_rows, n_cols, n_segs,
    q_min, q_max, min_scale,
    HAS_UB: tl.constexpr,
    PHASE: tl.constexpr,          # 0 all at once; 1 / 2 publish / finish (the interpreter)
    EVEN: tl.constexpr,           # BLOCK_N divides n_cols: no masks held across the wait
    SOFT_ROUND: tl.constexpr,
    BLOCK_N: tl.constexpr,        # the segment: one tile, held in registers
    BLOCK_S: tl.constexpr,        # next power of 2 >= n_segs
):
    """Dynamic per-token quantization of rows wider than a program holds: a row split into
    BLOCK_N-wide segments, one program each, read once. Each program publishes its
    segment's amax, waits for its siblings', takes the row's (the same max of the same
    words in every sibling, so the same scale) and quantizes what it holds; the first
    segment writes the scale. Programs take their (row, segment) in start order (a
    ticket), so the siblings a program waits for have started or start as earlier rows
    finish; every offset is 64-bit (the ticket is int64)."""
    # scalars to fp32 (inductor passes Python floats as fp64); tl.cast: a float has no .to in the interpreter
    q_min = tl.cast(q_min, tl.float32)
    q_max = tl.cast(q_max, tl.float32)
    min_scale = tl.cast(min_scale, tl.float32)
    row, seg = _segment_ticket(slot_ptr, n_rows, n_segs, PHASE)
    cols = seg * BLOCK_N + tl.arange(0, BLOCK_N)
    x = _load_f32(x_ptr + row * stride_x_row + cols, cols < n_cols, EVEN)
    slot_row = slot_ptr + row * n_segs
    if PHASE != 2:  # publish: the amax's bits, with bit 32 set (an unpublished slot is 0)
        word = _amax_bits(_amax(x, 0)).to(tl.uint32, bitcast=True).to(tl.int64) | (1 << 32)
        tl.atomic_xchg(slot_row + seg, word, sem="relaxed", scope="gpu")
    if PHASE != 1:
        g = tl.arange(0, BLOCK_S)
        g_mask = g < n_segs
        zero = tl.zeros([BLOCK_S], dtype=tl.int64)
        v = tl.where(g_mask, tl.atomic_add(slot_row + g, zero, mask=g_mask, sem="relaxed", scope="gpu"), 1 << 32)
        while tl.sum((v == 0).to(tl.int32), axis=0) > 0:
            v = tl.where(g_mask, tl.atomic_add(slot_row + g, zero, mask=g_mask, sem="relaxed", scope="gpu"), 1 << 32)
        amax = _amax((v & 0xFFFFFFFF).to(tl.uint32).to(tl.float32, bitcast=True), 0)
        scale = _row_scale(amax, ub_ptr, q_max, min_scale, HAS_UB)
        if seg == 0:
            tl.store(scale_ptr + row * stride_s, scale)
        q = _quantize(x, tl.math.div_rn(1.0, scale), q_min, q_max, q_ptr.dtype.element_ty, SOFT_ROUND)
        q_seg = q_ptr + row * stride_q_row + cols
        if EVEN:
            tl.store(q_seg, q)
        else:
            tl.store(q_seg, q, mask=cols < n_cols)


@triton.jit
def _group_quant_kernel(
    x_ptr, q_ptr,
    scale_ptr,                    # fp32 (n_rows, n_groups) at (stride_s_row, stride_s_group): written
    stride_x_row, stride_q_row, stride_s_row, stride_s_group,
    stride_x_seg, seg_len,        # SEG: a row of x is segments of seg_len columns, stride_x_seg apart
    n_rows, n_cols, n_groups,     # n_groups = cdiv(n_cols, GROUP): a last group may be partial
    eps,                          # amax floor (fp32): an all-zero group gets scale eps / q_max
    q_min, q_max,
    EVEN: tl.constexpr,           # GROUP divides n_cols and BLOCK_G divides n_rows * n_groups
    SOFT_ROUND: tl.constexpr,
    SEG: tl.constexpr,            # 0: x's row contiguous; 1: segmented, GROUP divides seg_len; 2: segmented
    UE8M0: tl.constexpr,          # scales rounded up to a power of 2 (DeepGEMM's e8m0 scales)
    BLOCK_G: tl.constexpr,        # groups per program
    GROUP: tl.constexpr,          # columns a group (a power of 2)
):
    """Per-token-group quantization (DeepSeek-style): each GROUP columns of a row get
    their own scale ``max(amax, eps) / q_max``. A program takes BLOCK_G consecutive
    groups of the flattened (row, group) order, a group a tile row. SEG: the row of x is
    the concatenation of segments (a flattened (n_segments, seg_len) view of any segment
    stride: aiter's ``fused_flatten_fp8_group_quant``)."""
    # scalars to fp32 (inductor passes Python floats as fp64); tl.cast: a float has no .to in the interpreter
    eps = tl.cast(eps, tl.float32)
    q_min = tl.cast(q_min, tl.float32)
    q_max = tl.cast(q_max, tl.float32)
    g = tl.program_id(0).to(tl.int64) * BLOCK_G + tl.arange(0, BLOCK_G)
    row = g // n_groups
    grp = g % n_groups
    cols = grp[:, None] * GROUP + tl.arange(0, GROUP)[None, :]
    g_mask = g < n_rows * n_groups
    mask = None if EVEN else g_mask[:, None] & (cols < n_cols)
    if SEG == 0:
        x_cols = cols
    elif SEG == 1:  # a group within one segment: one division a group
        seg = (grp * GROUP) // seg_len
        x_cols = (seg * stride_x_seg + grp * GROUP - seg * seg_len)[:, None] + tl.arange(0, GROUP)[None, :]
    else:
        tl.static_assert(SEG == 2)
        x_cols = (cols // seg_len) * stride_x_seg + cols % seg_len
    x = _load_f32(x_ptr + row[:, None] * stride_x_row + x_cols, mask, EVEN)
    amax = _nan_max(_amax(x, 1), eps)
    scale = tl.math.div_rn(amax, q_max)
    if UE8M0:
        scale = _ceil_pow2(scale)
    tl.store(scale_ptr + row * stride_s_row + grp * stride_s_group, scale, mask=g_mask)
    q = _quantize(x, tl.math.div_rn(1.0, scale)[:, None], q_min, q_max, q_ptr.dtype.element_ty, SOFT_ROUND)
    tl.store(q_ptr + row[:, None] * stride_q_row + cols, q, mask=mask)


@triton.jit
def _int8_azp_quant_kernel(
    x_ptr, q_ptr,                 # q: int8
    scale_ptr,                    # fp32: one element (read), or (n_rows,) at stride_s (DYNAMIC: written)
    azp_ptr,                      # int32: one element (read), or (n_rows,) at stride_azp (DYNAMIC: written)
    stride_x_row, stride_q_row, stride_s, stride_azp,
    n_rows, n_cols,
    DYNAMIC: tl.constexpr,        # a scale and zero point per row from its min and max
    LOOPED: tl.constexpr,         # the row in BLOCK_N-wide chunks, read twice where DYNAMIC
    EVEN: tl.constexpr,           # BLOCK_M divides n_rows and BLOCK_N divides n_cols
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    NATIVE: tl.constexpr = 0,     # 1: a GPU (NaN-skipping min / max); 2: NVIDIA (and _azp_round's cvt.rni.sat)
):
    """Asymmetric int8 quantization (vLLM's azp form): ``q = sat8(rint(x * (1 / scale)) +
    azp)``, the product saturated to int32 first (NaN: 0). Static: one scale and azp.
    DYNAMIC: per row ``scale = (max - min) / 255``, ``azp = rint(-128 - min / scale)``.

    Integer-pipe instructions decide its speed (bf16 in, int8 out: 3 bytes an element): on
    a GPU (NATIVE) the min and max skip NaN themselves (a padded row's masked lanes are
    loaded as NaN: no select an element), and on NVIDIA the rounding, NaN and saturation
    are one conversion and integer min / max (_azp_round). sm_90 SASS an element
    (scripts/sass_count.py int8_azp_dynamic, 16384 x 14336): 33.7 with 17.3 on the integer
    pipe at first; 19.9 (12.0) with the float rounding, 127 registers; now 15.8 (8.5), 80
    registers (three programs an SM where two fit)."""
    rows = tl.program_id(0).to(tl.int64) * BLOCK_M + tl.arange(0, BLOCK_M)
    row_mask = rows < n_rows
    x_rows = x_ptr + rows[:, None] * stride_x_row
    q_rows = q_ptr + rows[:, None] * stride_q_row
    cols = tl.arange(0, BLOCK_N)
    if DYNAMIC:
        lo = tl.full([BLOCK_M], float("inf"), tl.float32)
        hi = tl.full([BLOCK_M], float("-inf"), tl.float32)
        if LOOPED:
            for start in range(0, n_cols, BLOCK_N):
                mask = row_mask[:, None] & (start + cols < n_cols)[None, :]
                x = _load_f32(x_rows + start + cols[None, :], mask, EVEN)
                c_lo, c_hi = _min_max_skip_nan(x, mask, EVEN, NATIVE)
                lo = tl.minimum(lo, c_lo)
                hi = tl.maximum(hi, c_hi)
        else:
            mask = row_mask[:, None] & (cols < n_cols)[None, :]
            if NATIVE:  # masked lanes loaded as NaN: the min / max skip them with no select an element
                x = _load_f32(x_rows + cols[None, :], mask, EVEN, float("nan"))
                lo, hi = _min_max_skip_nan(x, mask, True, NATIVE)
            else:
                x = _load_f32(x_rows + cols[None, :], mask, EVEN)
                lo, hi = _min_max_skip_nan(x, mask, EVEN, NATIVE)
        scale = tl.math.div_rn(hi - lo, 255.0)
        zp = -128.0 - tl.math.div_rn(lo, scale)
        zp = _rint(tl.clamp(tl.where(zp != zp, 0.0, zp), -4194304.0, 4194304.0))  # int32-saturated, |zp| <= 2^22
        tl.store(scale_ptr + rows * stride_s, scale, mask=row_mask)
        tl.store(azp_ptr + rows * stride_azp, zp.to(tl.int32), mask=row_mask)
        zp = zp[:, None]
        inv_scale = tl.math.div_rn(1.0, scale)[:, None]
    else:
        zp = tl.load(azp_ptr).to(tl.float32)
        inv_scale = tl.math.div_rn(1.0, tl.load(scale_ptr))
    if LOOPED or not DYNAMIC:
        for start in range(0, n_cols, BLOCK_N):
            mask = row_mask[:, None] & (start + cols < n_cols)[None, :]
            x = _load_f32(x_rows + start + cols[None, :], mask, EVEN)
            tl.store(q_rows + start + cols[None, :], _azp_round(x, inv_scale, zp, NATIVE), mask=None if EVEN else mask)
    else:
        tl.store(q_rows + cols[None, :], _azp_round(x, inv_scale, zp, NATIVE), mask=None if EVEN else mask)


@triton.jit
def _min_max_skip_nan(x, mask, EVEN: tl.constexpr, NATIVE: tl.constexpr):
    """Row-wise (min, max) of x over the mask, NaN skipped (masked lanes hold 0): +inf and
    -inf where every element is NaN, as the reference's masked amin / amax."""
    if NATIVE:  # a GPU's min.f32 / max.f32 return the other operand for a NaN: masked lanes as NaN
        if not EVEN:
            x = tl.where(mask, x, float("nan"))
        lo = tl.min(x, 1)
        hi = tl.max(x, 1)
        return tl.where(lo == lo, lo, float("inf")), tl.where(hi == hi, hi, float("-inf"))
    else:
        ok = x == x if EVEN else mask & (x == x)  # numpy's minimum keeps a NaN
        return tl.min(tl.where(ok, x, float("inf")), 1), tl.max(tl.where(ok, x, float("-inf")), 1)


@triton.jit
def _azp_round(x, inv_scale, zp, NATIVE: tl.constexpr = 0):
    """``sat8(rint(x * inv_scale) + zp)`` as int8; the product clamped to +-2^22 first (past
    it every int8 sum saturates; _rint is exact below it), NaN 0 (a saturating int32
    conversion's). NATIVE 2 (NVIDIA): the product rounded by one saturating conversion
    (``cvt.rni.sat.s32.f32``: ties to even, NaN 0), then clamped, offset by the zero point
    (``zp`` clamped to +-2^24 first: the sum cannot wrap, and past 2^23 it saturates as
    the float sum does) and saturated as int32: one conversion and four integer min / max
    / add instructions where the float form spends six on the integer pipe and two
    conversions (rint, then int8)."""
    y = x * inv_scale
    if NATIVE == 2:
        k = tl.minimum(tl.maximum(_rint_sat_s32(y), -4194304), 4194304)
        z = tl.minimum(tl.maximum(zp, -16777216.0), 16777216.0).to(tl.int32)
        return tl.minimum(tl.maximum(k + z, -128), 127).to(tl.int8)
    y = tl.clamp(tl.where(y != y, 0.0, y), -4194304.0, 4194304.0)
    y = _rint(y) + zp
    return tl.clamp(y, -128.0, 127.0).to(tl.int8)
