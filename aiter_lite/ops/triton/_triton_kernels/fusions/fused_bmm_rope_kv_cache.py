"""MLA's absorbed query: ``q_nope @ W_UK^T`` per head, the batched matmul that precedes the
RoPE + concat + latent-cache write (``fused_kv_cache``'s ``_cat_kernel``).

A program takes BLOCK_M tokens of one head and BLOCK_N of its L output channels and walks
the P input channels a group at a time. PREQUANT (aiter's fp8 form): each token's group of
q is quantized to W's fp8 format with its own scale (amax / fp8 max), multiplied in that
format and the group's product scaled back; at the end the weights' per-tensor scale. The
operands enter ``tl.dot`` as bf16 (fp8 and bf16 values are exact in bf16; the products are
exact in its fp32 accumulation), so one kernel serves every GPU and both forms.
"""

import triton
import triton.language as tl

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


@triton.jit(do_not_specialize=["n_tokens"])
def _mla_bmm_kernel(
    q_ptr, w_ptr, ws_ptr, out_ptr,   # q (H, B, P), w (H, L, P), ws one fp32 element, out (B, H, >= L)
    sq_h, sq_b, sw_h, sw_n, so_b, so_h,
    n_tokens, n_out, n_in,
    q_min, q_max,                    # PREQUANT: the weights' fp8 range; O_FP8: the output's
    o_min, o_max,
    PREQUANT: tl.constexpr,
    HAS_WS: tl.constexpr,
    O_FP8: tl.constexpr,
    SOFT_ROUND: tl.constexpr,
    GROUP: tl.constexpr,             # input channels a step (PREQUANT: a quantization group)
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    DOT_FP32: tl.constexpr,
):
    q_min = tl.cast(q_min, tl.float32)
    q_max = tl.cast(q_max, tl.float32)
    o_min = tl.cast(o_min, tl.float32)
    o_max = tl.cast(o_max, tl.float32)
    h = tl.program_id(1).to(tl.int64)
    n_nblocks = tl.cdiv(n_out, BLOCK_N)
    pid = tl.program_id(0)
    m = (pid // n_nblocks) * BLOCK_M + tl.arange(0, BLOCK_M)
    n = (pid % n_nblocks) * BLOCK_N + tl.arange(0, BLOCK_N)
    m_mask = m < n_tokens
    n_mask = n < n_out
    k = tl.arange(0, GROUP)
    q_rows = q_ptr + h * sq_h + m.to(tl.int64)[:, None] * sq_b
    w_cols = w_ptr + h * sw_h + n.to(tl.int64)[None, :] * sw_n
    acc = tl.zeros([BLOCK_M, BLOCK_N], tl.float32)
    for k0 in range(0, n_in, GROUP):
        kk = k0 + k
        k_mask = kk < n_in
        a = tl.load(q_rows + kk[None, :], mask=m_mask[:, None] & k_mask[None, :], other=0.0)
        w = tl.load(w_cols + kk[:, None], mask=k_mask[:, None] & n_mask[None, :], other=0.0)
        if PREQUANT:
            a = a.to(tl.float32)
            amax = tl.max(tl.abs(a), axis=1)
            # a NaN or inf in the group has no scale: the token's outputs NaN
            bad = (tl.max((a != a).to(tl.int32), axis=1) > 0) | (amax == float("inf"))
            scale = tl.where(bad, float("nan"), amax / q_max)
            inv = tl.where(scale == 0.0, 0.0, tl.math.div_rn(1.0, tl.where(scale == 0.0, 1.0, scale)))
            aq = _quantize(a, inv[:, None], q_min, q_max, w_ptr.dtype.element_ty, SOFT_ROUND)
            acc += _dot(aq, w, tl.bfloat16, DOT_FP32) * scale[:, None]
        else:
            acc += _dot(a, w, w_ptr.dtype.element_ty, DOT_FP32)
    if HAS_WS:
        acc = acc * tl.load(ws_ptr).to(tl.float32)
    o = out_ptr + m.to(tl.int64)[:, None] * so_b + h * so_h + n[None, :]
    om = m_mask[:, None] & n_mask[None, :]
    if O_FP8:
        tl.store(o, _quantize(acc, 1.0, o_min, o_max, out_ptr.dtype.element_ty, SOFT_ROUND), mask=om)
    else:
        tl.store(o, acc.to(out_ptr.dtype.element_ty), mask=om)
