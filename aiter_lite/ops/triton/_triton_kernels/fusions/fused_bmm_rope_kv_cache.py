"""MLA's absorbed query: ``q_nope @ W_UK^T`` per head, the batched matmul, in one launch with
the RoPE + concat + latent-cache write (``fused_qk_concat``'s ``_cat_program``).

A program takes BLOCK_M tokens of one head and ``tiles_per_prog`` tiles of BLOCK_N of its L
output channels, and walks the P input channels a group at a time (ONCE: one group covers
all P, the tokens' q loaded, and quantized, once for all the program's channels). Offsets
within a tile are 32-bit from 64-bit bases unless TILE64. PREQUANT (aiter's fp8 form): each
token's group of q is quantized to W's fp8 format with its own scale (amax / fp8 max), multiplied in that
format and the group's product scaled back; at the end the weights' per-tensor scale. fp8
operands enter ``tl.dot`` as fp16 (every fp8 value is exact in fp16, the products exact in
its fp32 accumulation; NVIDIA converts e4m3 and e5m2 to fp16 in hardware, inf and NaN kept,
where Triton's e5m2 -> bf16 is a shift that turns them into numbers), so one kernel serves
every GPU and both forms.
"""

import triton
import triton.language as tl

from aiter_lite.ops.triton._triton_kernels.fusions.fused_qk_concat import _cat_program
from aiter_lite.ops.triton._triton_kernels.quant.mx_quant import _INF_BITS, _e2m1, _e8m0_exponent, _pow2
from aiter_lite.ops.triton._triton_kernels.quant.quant import _quantize


@triton.jit
def _wide(x):
    """x in fp32, fp8 NaN and inf decoded from their bits: the interpreter's conversion turns
    them into numbers (e5m2's NaN into 114688)."""
    y = x.to(tl.float32)
    if x.dtype == tl.float8e5:
        bits = x.to(tl.uint8, bitcast=True).to(tl.int32) & 0x7F
        y = tl.where(bits > 0x7C, float("nan"), tl.where(bits == 0x7C, y * float("inf"), y))
    elif x.dtype == tl.float8e4nv:
        y = tl.where((x.to(tl.uint8, bitcast=True).to(tl.int32) & 0x7F) == 0x7F, float("nan"), y)
    elif x.dtype == tl.float8e4b8:
        y = tl.where(x.to(tl.uint8, bitcast=True).to(tl.int32) == 0x80, float("nan"), y)
    return y


@triton.jit
def _dot(a, b, dtype: tl.constexpr, DOT_FP32: tl.constexpr):
    """a @ b with both in ``dtype`` (exact products) and fp32 sums; DOT_FP32 (the interpreter,
    whose 16-bit dot is wrong): the same values as fp32, multiplied in full fp32."""
    if DOT_FP32:  # fp8 and 16-bit values widen to fp32 directly (exact)
        return tl.dot(_wide(a), _wide(b), input_precision="ieee")
    return tl.dot(a.to(dtype), b.to(dtype), out_dtype=tl.float32)


@triton.jit
def _quantized_group(a, q_min, q_max, dtype: tl.constexpr, SOFT_ROUND: tl.constexpr):
    """Each row of ``a`` quantized to ``dtype`` with its own scale (amax / fp8 max): (the fp8
    values, the scales); a row holding NaN or inf has no scale (NaN: its outputs NaN)."""
    a = a.to(tl.float32)
    amax = tl.max(tl.abs(a), axis=1)
    bad = (tl.max((a != a).to(tl.int32), axis=1) > 0) | (amax == float("inf"))
    scale = tl.where(bad, float("nan"), amax / q_max)
    inv = tl.where(scale == 0.0, 0.0, tl.math.div_rn(1.0, tl.where(scale == 0.0, 1.0, scale)))
    return _quantize(a, inv[:, None], q_min, q_max, dtype, SOFT_ROUND), scale


@triton.jit
def _e8m0_value(b):
    """e8m0 bytes (int32, 0 .. 255) as fp32 ``2^(b - 127)``; 255 is NaN."""
    v = _pow2(tl.maximum(b - 127, -126)) * tl.where(b == 0, 0.5, 1.0)
    return tl.where(b == 255, float("nan"), v)


@triton.jit
def _e2m1_value(c):
    """e2m1 codes (int32, the sign in bit 3) as fp32: 0, 0.5, 1, 1.5, 2, 3, 4, 6."""
    m = c & 7
    v = tl.where(m < 2, m.to(tl.float32) * 0.5, (2 + (m & 1)).to(tl.float32) * _pow2((m >> 1) - 2))
    return tl.where((c & 8) != 0, -v, v)


@triton.jit
def _mxfp4_rows(a, q_max):
    """Each row of the fp32 (BLOCK_M, 32) tile ``a`` as MXFP4 by aiter's rule (e8m0 scale of
    the row's amax rounded as ``dynamic_mxfp4_quant``'s "even", e2m1 values to nearest even):
    (the e2m1 values, fp32; the row's scale 2^s, NaN where the row holds a NaN or an inf, as
    the fp8 form's: its token's outputs NaN)."""
    amax_bits = tl.max(tl.abs(a).to(tl.int32, bitcast=True), axis=1)  # NaN: above inf's bits
    nan = amax_bits >= _INF_BITS
    s = _e8m0_exponent(tl.minimum(amax_bits, _INF_BITS), q_max, "even")
    f = _pow2(tl.maximum(-s, -126))[:, None]
    h = tl.where(s > 126, 0.5, 1.0)[:, None]
    v = _e2m1_value(_e2m1(tl.abs(a) * f, h, tl.where(nan, 0.0, tl.where(s > 126, 12.0, 6.0))[:, None]) & 7)
    return tl.where(a < 0, -v, v), _e8m0_value(tl.where(nan, 255, s + 127))


@triton.jit
def _fp4_weights(w_tile, wsb_tile, sws_k, k0, n_in, n_mask, GROUP: tl.constexpr, BLOCK_N: tl.constexpr):
    """A (GROUP = 32, BLOCK_N) tile of packed e2m1 weights (two a byte along the input
    channels, the low nibble first) as fp32 values, and its columns' e8m0 scales."""
    kb = tl.arange(0, GROUP // 2)
    b = tl.load(w_tile + k0 // 2 + kb[:, None], mask=(k0 // 2 + kb < n_in // 2)[:, None] & n_mask[None, :],
                other=0).to(tl.int32)
    codes = tl.reshape(tl.permute(tl.join(b & 15, b >> 4), (0, 2, 1)), (GROUP, BLOCK_N))
    scale = tl.load(wsb_tile + (k0 // GROUP) * sws_k, mask=n_mask, other=127).to(tl.int32)
    return _e2m1_value(codes), _e8m0_value(scale)


@triton.jit
def _store_out(o_tile, acc, ws_ptr, mask, o_min, o_max, HAS_WS: tl.constexpr, O_FP8: tl.constexpr,
               SOFT_ROUND: tl.constexpr, WS_DIV: tl.constexpr = False):
    if HAS_WS:  # WS_DIV: divided (times its fp32 reciprocal)
        ws = tl.load(ws_ptr).to(tl.float32)
        acc = acc * (tl.math.div_rn(1.0, ws) if WS_DIV else ws)
    if O_FP8:
        tl.store(o_tile, _quantize(acc, 1.0, o_min, o_max, o_tile.dtype.element_ty, SOFT_ROUND), mask=mask)
    else:
        tl.store(o_tile, acc.to(o_tile.dtype.element_ty), mask=mask)


@triton.jit
def _tile_once(aq, scale, w_head, sw_n, n0, n_hi, cols, k, k_mask, o_row, ws_ptr, m_mask, o_min, o_max,
               PREQUANT: tl.constexpr, HAS_WS: tl.constexpr, O_FP8: tl.constexpr, SOFT_ROUND: tl.constexpr,
               DOT_FP32: tl.constexpr):
    """Output channels n0 .. n0 + BLOCK_N of the tokens whose q (quantized: aq, per-token
    ``scale``) spans every input channel."""
    n_mask = n0 + cols < n_hi
    w = tl.load((w_head + tl.cast(n0, tl.int64) * sw_n) + cols[None, :] * sw_n + k[:, None],
                mask=k_mask[:, None] & n_mask[None, :], other=0.0)
    if PREQUANT:
        acc = _dot(aq, w, tl.float16, DOT_FP32) * scale[:, None]
    else:
        acc = _dot(aq, w, w_head.dtype.element_ty, DOT_FP32)
    _store_out(o_row + n0 + cols[None, :], acc, ws_ptr, m_mask[:, None] & n_mask[None, :], o_min, o_max, HAS_WS,
               O_FP8, SOFT_ROUND)


@triton.jit
def _tile_stepped(q_tile, w_head, sw_n, n0, n_hi, n_in, cols, k, o_row, ws_ptr, m_mask, q_min, q_max, o_min, o_max,
                  wsb_head, sws_n, sws_k,
                  PREQUANT: tl.constexpr, HAS_WS: tl.constexpr, O_FP8: tl.constexpr, SOFT_ROUND: tl.constexpr,
                  GROUP: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, DOT_FP32: tl.constexpr,
                  W_FP4: tl.constexpr):
    """Output channels n0 .. n0 + BLOCK_N, the input channels GROUP at a time (PREQUANT: each
    group of q quantized with its own scales; W_FP4: MXFP4 weights, GROUP 32, with their
    e8m0 scales, q quantized to MXFP4 where PREQUANT)."""
    n_mask = n0 + cols < n_hi
    w_tile = (w_head + tl.cast(n0, tl.int64) * sw_n) + cols[None, :] * sw_n
    wsb_tile = (wsb_head + tl.cast(n0, tl.int64) * sws_n) + cols * sws_n
    wt = w_head.dtype.element_ty
    acc = tl.zeros([BLOCK_M, BLOCK_N], tl.float32)
    for k0 in range(0, n_in, GROUP):
        k_mask = k0 + k < n_in
        a = tl.load(q_tile + k0 + k[None, :], mask=m_mask[:, None] & k_mask[None, :], other=0.0)
        if W_FP4:  # e2m1 values and their power-of-2 scales: exact in bf16, the products exact in fp32
            wv, pw = _fp4_weights(w_tile, wsb_tile, sws_k, k0, n_in, n_mask, GROUP, BLOCK_N)
            if PREQUANT:
                av, pa = _mxfp4_rows(a.to(tl.float32), q_max)
                acc += _dot(av, wv, tl.bfloat16, DOT_FP32) * (pa[:, None] * pw[None, :])
            else:
                acc += _dot(a, wv, q_tile.dtype.element_ty, DOT_FP32) * pw[None, :]
        elif PREQUANT:
            w = tl.load(w_tile + k0 + k[:, None], mask=k_mask[:, None] & n_mask[None, :], other=0.0)
            aq, scale = _quantized_group(a, q_min, q_max, wt, SOFT_ROUND)
            acc += _dot(aq, w, tl.float16, DOT_FP32) * scale[:, None]
        else:
            w = tl.load(w_tile + k0 + k[:, None], mask=k_mask[:, None] & n_mask[None, :], other=0.0)
            acc += _dot(a, w, wt, DOT_FP32)
    _store_out(o_row + n0 + cols[None, :], acc, ws_ptr, m_mask[:, None] & n_mask[None, :], o_min, o_max, HAS_WS,
               O_FP8, SOFT_ROUND, W_FP4)


@triton.jit
def _mla_bmm_program(
    pid,                             # this program among the matmul's: head, then token block, then channel split
    q_ptr, w_ptr, ws_ptr, out_ptr,   # q (H, B, P), w (H, L, P), ws one fp32 element, out (B, H, >= L)
    wsb_ptr,                         # W_FP4: w packed (H, L, P / 2), its e8m0 scales (H, L, P / 32) here
    sq_h, sq_b, sw_h, sw_n, so_b, so_h, sws_h, sws_n, sws_k,
    n_tokens, n_out, n_in,
    tiles_per_prog,                  # output channels a program, in tiles of BLOCK_N
    q_min, q_max,                    # PREQUANT: the weights' fp8 (W_FP4: e2m1) range; O_FP8: the output's
    o_min, o_max,
    PREQUANT: tl.constexpr,
    HAS_WS: tl.constexpr,
    O_FP8: tl.constexpr,
    SOFT_ROUND: tl.constexpr,
    GROUP: tl.constexpr,             # input channels a step (PREQUANT: a quantization group)
    ONCE: tl.constexpr,              # GROUP covers every input channel: q loaded (and quantized) once
    N_LOOP: tl.constexpr,            # tiles_per_prog > 1: the program walks its channels a tile at a time
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    DOT_FP32: tl.constexpr,
    TILE64: tl.constexpr,            # offsets within a tile past 2^31 (else 32-bit from 64-bit bases)
    W_FP4: tl.constexpr,             # MXFP4 weights (ONCE false, GROUP 32); ws (HAS_WS) divides the output
):
    n_splits = tl.cdiv(n_out, tiles_per_prog * BLOCK_N)
    per_head = tl.cdiv(n_tokens, BLOCK_M) * n_splits
    h = (pid // per_head).to(tl.int64)
    pid = pid % per_head
    m0 = (pid // n_splits) * BLOCK_M
    n_lo = (pid % n_splits) * tiles_per_prog * BLOCK_N  # tile-aligned: the stores vectorize
    n_hi = tl.minimum(n_lo + tiles_per_prog * BLOCK_N, n_out)
    rows = tl.arange(0, BLOCK_M)
    cols = tl.arange(0, BLOCK_N)
    k = tl.arange(0, GROUP)
    if TILE64:
        rows = rows.to(tl.int64)
        cols = cols.to(tl.int64)
    m_mask = m0 + rows < n_tokens
    q_tile = (q_ptr + h * sq_h + m0.to(tl.int64) * sq_b) + rows[:, None] * sq_b   # (BLOCK_M, 1)
    o_row = (out_ptr + m0.to(tl.int64) * so_b + h * so_h) + rows[:, None] * so_b  # (BLOCK_M, 1)
    w_head = w_ptr + h * sw_h
    wsb_head = wsb_ptr + h * sws_h
    if ONCE:
        k_mask = k < n_in
        a = tl.load(q_tile + k[None, :], mask=m_mask[:, None] & k_mask[None, :], other=0.0)
        if PREQUANT:
            aq, scale = _quantized_group(a, q_min, q_max, w_ptr.dtype.element_ty, SOFT_ROUND)
        else:
            aq = a
            scale = tl.full([BLOCK_M], 1.0, tl.float32)
        if N_LOOP:
            for t in range(0, tiles_per_prog):
                _tile_once(aq, scale, w_head, sw_n, n_lo + t * BLOCK_N, n_hi, cols, k, k_mask, o_row, ws_ptr, m_mask, o_min, o_max,
                           PREQUANT, HAS_WS, O_FP8, SOFT_ROUND, DOT_FP32)
        else:
            _tile_once(aq, scale, w_head, sw_n, n_lo, n_hi, cols, k, k_mask, o_row, ws_ptr, m_mask, o_min, o_max,
                       PREQUANT, HAS_WS, O_FP8, SOFT_ROUND, DOT_FP32)
    elif N_LOOP:
        for t in range(0, tiles_per_prog):
            _tile_stepped(q_tile, w_head, sw_n, n_lo + t * BLOCK_N, n_hi, n_in, cols, k, o_row, ws_ptr, m_mask, q_min,
                          q_max, o_min, o_max, wsb_head, sws_n, sws_k, PREQUANT, HAS_WS, O_FP8, SOFT_ROUND, GROUP,
                          BLOCK_M, BLOCK_N, DOT_FP32, W_FP4)
    else:
        _tile_stepped(q_tile, w_head, sw_n, n_lo, n_hi, n_in, cols, k, o_row, ws_ptr, m_mask, q_min, q_max, o_min,
                      o_max, wsb_head, sws_n, sws_k, PREQUANT, HAS_WS, O_FP8, SOFT_ROUND, GROUP, BLOCK_M, BLOCK_N,
                      DOT_FP32, W_FP4)


@triton.jit
def _mla_bmm_tma_tile(tile, q_desc, w_desc, o_desc, out_ptr, n_tokens, n_out, n_in, BLOCK_M: tl.constexpr,
                      BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, DOT_FP32: tl.constexpr):
    """The bf16 / fp16 matmul's output tile ``tile`` (head, then tokens, then channels) with
    tensor-descriptor (TMA) loads and stores, which clip at the tensors' edges (no masks);
    returns (head, first token, first channel)."""
    n_n = tl.cdiv(n_out, BLOCK_N)
    per_head = tl.cdiv(n_tokens, BLOCK_M) * n_n
    h = tile // per_head
    r = tile % per_head
    m0 = (r // n_n) * BLOCK_M
    n0 = (r % n_n) * BLOCK_N
    acc = tl.zeros([BLOCK_M, BLOCK_N], tl.float32)
    for k0 in range(0, n_in, BLOCK_K):
        a = q_desc.load([h, m0, k0]).reshape(BLOCK_M, BLOCK_K)
        b = w_desc.load([h, n0, k0]).reshape(BLOCK_N, BLOCK_K)
        acc += _dot(a, b.T, out_ptr.dtype.element_ty, DOT_FP32)
    o_desc.store([m0, h, n0], acc.to(out_ptr.dtype.element_ty).reshape(BLOCK_M, 1, BLOCK_N))
    return h, m0, n0


@triton.jit(do_not_specialize=["n_tokens", "tiles_per_prog", "n_bmm", "n_cache_slots", "n_rows", "n_extra",
                            "n_q_progs"])
def _mla_bmm_rope_cache_kernel(
    # the matmul (_mla_bmm_program): q_out[:, h, :L] = q[h] @ w[h]^T, the grid's first n_bmm programs
    q_ptr, w_ptr, ws_ptr, out_ptr, wsb_ptr,
    q_desc, w_desc, o_desc,          # TMA: q, w and out[:, :, :L] as tensor descriptors (else None)
    sq_h, sq_b, sw_h, sw_n, so_b, so_h, so_d, sws_h, sws_n, sws_k,
    n_tokens, n_heads, n_out, n_in, tiles_per_prog, q_min, q_max, o_min, o_max,
    n_bmm,
    # RoPE + concat + latent-cache write (_cat_program, as fused_qk_rope_cat_and_cache_mla with q_out's
    # latent part in place): q_pe rotated into q_out[..., L:], cat(k_nope, rope(k_pe)) into the cache
    qpe_ptr, kn_ptr, kpe_ptr, kv_ptr, slot_ptr, pos_ptr, cos_ptr, sin_ptr, kscale_ptr,
    sqpe_t, sqpe_h, sqpe_d, skn_t, skn_h, skn_d, skpe_t, skpe_h, skpe_d,
    skv_blk, skv_off, skv_h, skv_d,
    stride_t_r, stride_t_f, n_cache_slots, block_size, n_rows, n_kv_heads, d2, c_min, c_max,
    bo1_ptr, sbo1_t, sbo1_h, sbo1_d,
    bo2_ptr, sbo2_t, sbo2_h, sbo2_d,
    z1_ptr, sz1_t, sz1_h, sz1_d,
    n_extra, n_q_progs,
    PREQUANT: tl.constexpr, HAS_WS: tl.constexpr, O_FP8: tl.constexpr, SOFT_ROUND: tl.constexpr,
    GROUP: tl.constexpr, ONCE: tl.constexpr, N_LOOP: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
    DOT_FP32: tl.constexpr, TILE64: tl.constexpr, W_FP4: tl.constexpr,
    IS_NEOX: tl.constexpr, REUSE: tl.constexpr, HAS_SCALE: tl.constexpr, C_FP8: tl.constexpr,
    C_SOFT_ROUND: tl.constexpr, HALF: tl.constexpr, BLOCK_HALF: tl.constexpr, BLOCK_D1: tl.constexpr,
    BLOCK_D2: tl.constexpr, BLOCK_T: tl.constexpr, BLOCK_H: tl.constexpr, BLOCK_TK: tl.constexpr,
    BLOCK_HK: tl.constexpr, INT64: tl.constexpr, SHUFFLE: tl.constexpr,
    PARTS: tl.constexpr = 3,         # 1: the matmul's programs only; 2: the RoPE / cache programs only; 3: both
    TMA: tl.constexpr = False,       # the matmul's n_bmm programs persistent, on descriptors (_mla_bmm_tma_tile)
    BLOCK_K: tl.constexpr = 64,      # TMA: input channels a step
    STAGES: tl.constexpr = 1,        # TMA: the tile loop's pipeline depth
    BS_SHIFT: tl.constexpr = -1,     # block_size = 2^BS_SHIFT (else -1: a division)
):
    """MLA's absorbed query, its RoPE and the latent-cache write: the grid's first n_bmm
    programs the matmul's, the next n_q_progs q_pe's rotation into q_out beside the latent
    part (BLOCK_T tokens x BLOCK_H heads each), the rest the cache writes (BLOCK_TK tokens x
    BLOCK_HK heads). No part reads what another writes, so they share a launch; PARTS builds
    one side only (a program's resources are the kernel's: at prefill sizes the matmul's
    shared memory would hold the RoPE / cache programs to one or two an SM)."""
    # scalars to fp32 (inductor passes Python floats as fp64); tl.cast: a float has no .to in the interpreter
    q_min = tl.cast(q_min, tl.float32)
    q_max = tl.cast(q_max, tl.float32)
    o_min = tl.cast(o_min, tl.float32)
    o_max = tl.cast(o_max, tl.float32)
    pid = tl.program_id(0)
    if pid < n_bmm:
        if PARTS != 2:
            if TMA:  # persistent programs, each walking its tiles
                n_tiles = tl.cdiv(n_tokens, BLOCK_M) * tl.cdiv(n_out, BLOCK_N) * n_heads
                for tile in tl.range(pid, n_tiles, n_bmm, flatten=True, num_stages=STAGES):
                    _mla_bmm_tma_tile(tile, q_desc, w_desc, o_desc, out_ptr, n_tokens, n_out, n_in, BLOCK_M, BLOCK_N,
                                      BLOCK_K, DOT_FP32)
            else:
                _mla_bmm_program(pid, q_ptr, w_ptr, ws_ptr, out_ptr, wsb_ptr, sq_h, sq_b, sw_h, sw_n, so_b, so_h,
                                 sws_h, sws_n, sws_k, n_tokens, n_out, n_in, tiles_per_prog, q_min, q_max, o_min,
                                 o_max, PREQUANT, HAS_WS, O_FP8, SOFT_ROUND, GROUP, ONCE, N_LOOP, BLOCK_M, BLOCK_N,
                                 DOT_FP32, TILE64, W_FP4)
    elif pid < n_bmm + n_q_progs:
        if PARTS != 1:  # q_pe rotated into q_out: _cat_program's first pair only (no second-pair heads)
            _cat_program(n_bmm, out_ptr, qpe_ptr, out_ptr, kn_ptr, kpe_ptr, kv_ptr, slot_ptr, pos_ptr, cos_ptr,
                         sin_ptr, kscale_ptr, so_b, so_h, so_d, sqpe_t, sqpe_h, sqpe_d, so_b, so_h, so_d, skn_t, skn_h,
                         skn_d, skpe_t, skpe_h, skpe_d, skv_blk, skv_off, skv_h, skv_d, stride_t_r, stride_t_f,
                         n_tokens, n_tokens, n_cache_slots, block_size, n_rows, n_heads, 0, n_out, d2, c_min, c_max,
                         bo1_ptr, sbo1_t, sbo1_h, sbo1_d, bo2_ptr, sbo2_t, sbo2_h, sbo2_d, z1_ptr, sz1_t, sz1_h,
                         sz1_d, n_extra, o_min, o_max,
                         True, IS_NEOX, REUSE, True, HAS_SCALE, O_FP8, C_FP8, C_SOFT_ROUND, HALF, BLOCK_HALF,
                         BLOCK_D1, BLOCK_D2, BLOCK_T, BLOCK_H, INT64, SHUFFLE, False, True, True, False, BS_SHIFT)
    else:
        if PARTS != 1:  # the cache writes: the second pair only (no first-pair heads)
            _cat_program(n_bmm + n_q_progs, out_ptr, qpe_ptr, out_ptr, kn_ptr, kpe_ptr, kv_ptr, slot_ptr, pos_ptr,
                         cos_ptr, sin_ptr, kscale_ptr, so_b, so_h, so_d, sqpe_t, sqpe_h, sqpe_d, so_b, so_h, so_d,
                         skn_t, skn_h, skn_d, skpe_t, skpe_h, skpe_d, skv_blk, skv_off, skv_h, skv_d, stride_t_r,
                         stride_t_f, n_tokens, n_tokens, n_cache_slots, block_size, n_rows, 0, n_kv_heads, n_out, d2,
                         c_min, c_max, bo1_ptr, sbo1_t, sbo1_h, sbo1_d, bo2_ptr, sbo2_t, sbo2_h, sbo2_d, z1_ptr,
                         sz1_t, sz1_h, sz1_d, n_extra, o_min, o_max,
                         True, IS_NEOX, REUSE, True, HAS_SCALE, O_FP8, C_FP8, C_SOFT_ROUND, HALF, BLOCK_HALF,
                         BLOCK_D1, BLOCK_D2, BLOCK_TK, BLOCK_HK, INT64, SHUFFLE, False, True, True, False, BS_SHIFT)
