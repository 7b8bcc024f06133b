"""Activation kernels: silu, gelu (erf), gelu_tanh, relu, elementwise or gated, forward
and backward; forward only: fatrelu, swish (x * sigmoid(beta x): quick GELU, gpt-oss's GLU),
gelu_new and gelu_fast (vLLM's, rounded where vLLM's kernels round), gpt-oss's clamped
SwiGLU over interleaved gate / up columns, and torch's two-op rounding of a gated op.

One kernel serves every public name in both directions: ``ACTIVATION``, ``GATED`` and
``BACKWARD`` are the constexpr flags, rows/columns/strides are runtime values.
"""

import triton
import triton.language as tl
from triton.language.extra import libdevice

_SQRT1_2: tl.constexpr = tl.constexpr(0.7071067811865476)  # 1 / sqrt(2)
_GELU_TANH_2BETA: tl.constexpr = tl.constexpr(1.5957691216057308)  # 2 * sqrt(2 / pi)
_GELU_TANH_KAPPA: tl.constexpr = tl.constexpr(0.044715)
_INV_SQRT_2PI: tl.constexpr = tl.constexpr(0.3989422804014327)  # 1 / sqrt(2 pi)


_NEG_LOG2E: tl.constexpr = tl.constexpr(-1.4426950408889634)  # -log2(e), rounded to fp32 where it is used


@triton.jit
def _exp_neg(x):
    """``exp(-x)`` for a sum with 1 (a sigmoid's ``1 + e``): ``2^(x * -log2 e)``, what
    tl.exp computes (``(-x) * log2 e`` is the same product) without its fix-up of results
    below fp32's normals (ex2.approx.ftz on NVIDIA, v_exp_f32 alone on AMD): such an e
    vanishes in 1 + e, and in 1 - e, so the sums and everything after them keep their
    bits, for three instructions an element less on NVIDIA."""
    return tl.exp2(x * _NEG_LOG2E)


@triton.jit
def _silu(x):
    # x * sigmoid(x); for x -> -inf exp overflows to inf and x / inf -> -0, never NaN.
    return x / (1.0 + _exp_neg(x))


@triton.jit
def _gelu(x):
    return 0.5 * x * (1.0 + tl.erf(x * _SQRT1_2))


@triton.jit
def _gelu_tanh(x):
    # 0.5 * x * (1 + tanh(u)) == x * sigmoid(2u), u = sqrt(2/pi) * (x + 0.044715 x^3).
    # The sigmoid form has no tanh and no inf/inf: finite for every finite x
    # (x^3 may overflow to +-inf, which only drives exp to 0 or inf).
    u2 = _GELU_TANH_2BETA * (x + _GELU_TANH_KAPPA * x * x * x)
    return x / (1.0 + _exp_neg(u2))


@triton.jit
def _relu(x):
    # where(x < 0) rather than maximum(x, 0): NaN propagates as in torch.relu.
    return tl.where(x < 0.0, 0.0, x)


@triton.jit
def _apply_activation(x, ACTIVATION: tl.constexpr):
    if ACTIVATION == "silu":
        return _silu(x)
    elif ACTIVATION == "gelu":
        return _gelu(x)
    elif ACTIVATION == "gelu_tanh":
        return _gelu_tanh(x)
    else:
        tl.static_assert(ACTIVATION == "relu")
        return _relu(x)


@triton.jit
def _exp(x, PRECISE: tl.constexpr):
    if PRECISE:
        return libdevice.exp(x)  # torch's expf; tl.exp is ex2.approx
    else:
        return tl.exp(x)


@triton.jit
def _div(a, b, PRECISE: tl.constexpr):
    if PRECISE:
        return tl.math.div_rn(a, b)  # torch's IEEE division; `/` is div.full (2 ulp)
    else:
        return a / b


@triton.jit
def _sigmoid_div(x, e, PRECISE: tl.constexpr):
    """``x / (1 + e)``, divided as torch divides (IEEE) where PRECISE."""
    return _div(x, 1.0 + e, PRECISE)


@triton.jit
def _silu_rounded(x, beta, PRECISE: tl.constexpr, OUT16: tl.constexpr, QUICK: tl.constexpr):
    """silu (beta 1) or quick GELU (QUICK: beta 1.702, vLLM's), ``x / (1 + expf(-beta x))``
    in fp32, where the result is rounded to a 16-bit type next (OUT16: 1 bf16, 2 fp16) on
    NVIDIA (PRECISE == 2): cheaper formulas whose rounded value is torch's for every input
    of that type, enumerated on the GPU (op_tests/triton_tests/test_activation.py, every
    value). The IEEE division's check and slow-path branch, and expf, made these forms bound
    by instructions issued (mul_and_silu 16384 x 14336 bf16 on an H200: 360 us; 320.7, the
    copy's time, now). The exponential is ex2.approx.ftz of ``(x * -beta) * log2(e)`` (what tl.exp
    computes, without its denormal-result fix-up: such an e vanishes in 1 + e); the
    quotient div.full's (bf16), or x times rcp.approx.ftz (fp16: the same rounded values
    as div.full; in bf16 its flushed reciprocal of 1 + e past 2^126 zeroes quotients bf16
    keeps); the few inputs where that rounds apart from torch take torch's value from a
    select (a compare and a select an element, where expf costs six more instructions and
    IEEE division a check and a branch):

    ========= ====== ==============================================================
    form      dtype  inputs patched (-> torch's value)
    ========= ====== ==============================================================
    silu      bf16   none
    silu      fp16   -2.724609375 (0xc173), -4.921875 (0xc4ec)
    quick     bf16   -11.6875 (0xc13b)
    quick     fp16   0.0003743171691894531 (0x0e22), -1.7822265625 (0xbf21),
                     -3.935546875 (0xc3df)
    ========= ====== ==============================================================

    Everywhere else (fp32, AMD, the interpreter): ``_sigmoid_div`` with ``_exp``, IEEE
    division and expf where PRECISE (AMD: no GPU here to enumerate on)."""
    if PRECISE == 2 and OUT16 != 0:
        e = _exp_neg(x * beta)
        if OUT16 == 1:
            y = x / (1.0 + e)
        else:  # fp16: no quotient under 2^-24 survives its rounding, so the reciprocal may flush
            r = tl.inline_asm_elementwise("rcp.approx.ftz.f32 $0, $1;", "=r,r", [1.0 + e], dtype=tl.float32,
                                          is_pure=True, pack=1)
            y = x * r
        if OUT16 == 1 and QUICK:
            y = tl.where(x == -11.6875, -2.6775524020195007e-08, y)
        elif OUT16 == 2 and QUICK:
            y = tl.where(x == 0.0003743171691894531, 0.00018715858459472656, y)
            y = tl.where(x == -1.7822265625, -0.0819091796875, y)
            y = tl.where(x == -3.935546875, -0.004848480224609375, y)
        elif OUT16 == 2:
            y = tl.where(x == -2.724609375, -0.1676025390625, y)
            y = tl.where(x == -4.921875, -0.035614013671875, y)
    else:
        y = _sigmoid_div(x, _exp(-x * beta, PRECISE), PRECISE)
    return y


@triton.jit
def _tanh(x, PRECISE: tl.constexpr):
    if PRECISE:
        return libdevice.tanh(x)
    else:
        # +-1 at the extremes (exp overflows to inf or drops to 0), never NaN
        return 2.0 / (1.0 + _exp_neg(2.0 * x)) - 1.0


@triton.jit
def _tanh_rounded(x, PRECISE: tl.constexpr, DTYPE: tl.constexpr):
    """tanh of a DTYPE value, rounded to DTYPE next (gelu_new / gelu_fast). With PRECISE the
    rounded value is tanhf's for every 16-bit input (exhaustive test on the GPU,
    op_tests/triton_tests/test_activation.py), by cheaper means than tanhf's branch on
    NVIDIA (PRECISE == 2): bf16 the SFU's tanh.approx (2^-11 relative; one instruction),
    fp16 ``(1 - e) / (1 + e)``, e = exp2-based exp(-2|x|), the sign put back. fp32, and
    AMD (no GPU here to prove it on), keep tanhf. H200, gelu_new 16384 x 14336 bf16: 316
    us with tanhf, 226 with tanh.approx (281 with the fp16 form)."""
    if PRECISE == 2 and DTYPE == tl.bfloat16:
        return tl.inline_asm_elementwise("tanh.approx.f32 $0, $1;", "=r,r", [x], dtype=tl.float32, is_pure=True,
                                         pack=1)
    elif PRECISE == 2 and DTYPE == tl.float16:
        e = _exp_neg(2.0 * tl.abs(x))
        t = (1.0 - e) / (1.0 + e)
        return tl.where(x < 0, -t, t)  # NaN stays NaN
    else:
        return _tanh(x, PRECISE)


@triton.jit
def _rnd(x, DTYPE: tl.constexpr):
    """x rounded to DTYPE and widened again (a no-op for fp32)."""
    return x.to(DTYPE).to(tl.float32)


@triton.jit
def _activation_ex(x, param, ACTIVATION: tl.constexpr, DTYPE: tl.constexpr, PRECISE: tl.constexpr,
                   OUT16: tl.constexpr = 0):
    """``_apply_activation`` and the forward-only activations, fp32 in and out. ``param``:
    fatrelu's threshold, swish's beta. ``DTYPE``: the input's, where gelu_new / gelu_fast
    round as vLLM's kernels do (operations on the dtype's values). ``PRECISE``: torch's
    formulas with the device's expf / tanhf and IEEE division (bits as torch's after the
    rounding to a 16-bit type that follows where ``OUT16``: ``_silu_rounded``)."""
    if ACTIVATION == "fatrelu":
        return tl.where(x <= param, 0.0, x)  # F.threshold: NaN propagates
    elif ACTIVATION == "swish":
        return _sigmoid_div(x, _exp(-x * param, PRECISE), PRECISE)
    elif ACTIVATION == "gelu_quick":  # swish at vLLM's beta 1.702 (``param``), proven for it alone
        return _silu_rounded(x, param, PRECISE, OUT16, True)
    elif ACTIVATION == "gelu_new":
        x3 = _rnd(_rnd(x * x, DTYPE) * x, DTYPE)
        inner = _rnd(0.79788456 * _rnd(x + _rnd(0.044715 * x3, DTYPE), DTYPE), DTYPE)
        t = _rnd(_tanh_rounded(inner, PRECISE, DTYPE), DTYPE)
        return _rnd(0.5 * x, DTYPE) * _rnd(1.0 + t, DTYPE)
    elif ACTIVATION == "gelu_fast":
        a = _rnd(x * 0.79788456, DTYPE)
        # (T)(0.044715 f) * x rounded before the 1 is added, as vLLM's kernel: an fma with +0
        # (not foldable into a multiply) keeps the compiler from fusing the T multiply and
        # add into one fma.rn.bf16 / f16 (one rounding: 2 bf16, 51 fp16 values differed)
        b = _rnd(1.0 + _rnd(tl.math.fma(_rnd(0.044715 * x, DTYPE), x, 0.0), DTYPE), DTYPE)
        t = _rnd(_tanh_rounded(_rnd(a * b, DTYPE), PRECISE, DTYPE), DTYPE)
        return _rnd(0.5 * x, DTYPE) * _rnd(1.0 + t, DTYPE)
    elif PRECISE and ACTIVATION == "silu":
        return _silu_rounded(x, 1.0, PRECISE, OUT16, False)
    elif PRECISE and ACTIVATION == "gelu_tanh":
        # torch's tanh form; nvcc contracts x + kappa x^3 into one fma
        inner = 0.7978845608028654 * tl.math.fma(_GELU_TANH_KAPPA, x * x * x, x)
        return 0.5 * x * (1.0 + _tanh(inner, PRECISE))
    else:
        return _apply_activation(x, ACTIVATION)


@triton.jit
def _act_fwd_tile(x_ptr, u_ptr, y_ptr, stride_x_row, stride_u_row, stride_y_row, u_col0, n_rows, n_cols, param,
                  limit, pid_m, pid_n, cols, col_mask, ACTIVATION: tl.constexpr, GATED: tl.constexpr,
                  INTERLEAVED: tl.constexpr, CLAMP: tl.constexpr, ROUND_ACT: tl.constexpr, PRECISE: tl.constexpr,
                  EVEN: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    if EVEN:
        mask = None
    else:
        mask = (rows < n_rows)[:, None] & col_mask[None, :]
    x_ty = x_ptr.dtype.element_ty
    # Masked lanes load garbage that is never stored: no `other` needed.
    if INTERLEAVED:
        # gate, up, gate, up...: one contiguous 2 * BLOCK_N load a row, split in registers
        cols2 = pid_n * (2 * BLOCK_N) + tl.arange(0, 2 * BLOCK_N)
        if EVEN:
            mask2 = None
        else:
            mask2 = (rows < n_rows)[:, None] & (cols2 < 2 * n_cols)[None, :]
        pairs = tl.load(x_ptr + rows[:, None] * stride_x_row + cols2[None, :], mask=mask2).to(tl.float32)
        gate, up = tl.split(tl.reshape(pairs, (BLOCK_M, BLOCK_N, 2)))
    else:
        gate = tl.load(x_ptr + rows[:, None] * stride_x_row + cols[None, :], mask=mask).to(tl.float32)
        if GATED:
            up = tl.load(u_ptr + rows[:, None] * stride_u_row + (u_col0 + cols)[None, :], mask=mask).to(tl.float32)
    if CLAMP:
        # gpt-oss: gate clamped from above, up both ways, then up + 1 (NaN propagates)
        gate = tl.where(gate > limit, limit, gate)
        up = tl.where(up > limit, limit, tl.where(up < -limit, -limit, up)) + 1.0
    # the activation rounded to the 16-bit input's type next (torch's two ops on it, or an
    # elementwise output of that type): _silu_rounded's cheaper formulas (NVIDIA)
    out16: tl.constexpr = (1 if x_ty == tl.bfloat16 else 2 if x_ty == tl.float16 else 0) if (
        ROUND_ACT or (not GATED and y_ptr.dtype.element_ty == x_ty)) else 0
    y = _activation_ex(gate, param, ACTIVATION, x_ty, PRECISE, out16)
    if ROUND_ACT:
        y = _rnd(y, x_ty)  # torch's act(gate) * up: the activation stored in the dtype first
    if GATED:
        y = y * up
    tl.store(y_ptr + rows[:, None] * stride_y_row + cols[None, :], y.to(y_ptr.dtype.element_ty), mask=mask)


# ---------------------------------------------------------------------------
# backward


@triton.jit
def _activation_and_grad(x, ACTIVATION: tl.constexpr):
    """``(act(x), act'(x))`` in fp32, finite for every finite x (no 0 * inf)."""
    if ACTIVATION == "silu":
        s = 1.0 / (1.0 + _exp_neg(x))
        a = x * s
        # s * (1 + x (1 - s)) written as s + a (1 - s): x -> -inf gives 0 + (-0) * 1, not 0 * -inf
        return a, s + a * (1.0 - s)
    elif ACTIVATION == "gelu":
        cdf = 0.5 * (1.0 + tl.erf(x * _SQRT1_2))
        return x * cdf, cdf + x * _INV_SQRT_2PI * tl.exp(-0.5 * x * x)
    elif ACTIVATION == "gelu_tanh":
        # a = x * sigmoid(2u), u = beta (x + kappa x^3); a' = s + 2 beta x s (1 - s) (1 + 3 kappa x^2)
        u2 = _GELU_TANH_2BETA * (x + _GELU_TANH_KAPPA * x * x * x)
        s = 1.0 / (1.0 + _exp_neg(u2))
        t = s * (1.0 - s)  # 0 where s saturates: the correction is 0 there, whatever x^2 is
        corr = tl.where(t == 0.0, 0.0, _GELU_TANH_2BETA * x * t * (1.0 + 3.0 * _GELU_TANH_KAPPA * x * x))
        return x * s, s + corr
    else:
        tl.static_assert(ACTIVATION == "relu")
        # torch's threshold_backward: the gradient passes where the output is > 0 (NaN: 0)
        return tl.where(x < 0.0, 0.0, x), tl.where(x > 0.0, 1.0, 0.0)


@triton.jit
def _act_bwd_tile(x_ptr, u_ptr, dy_ptr, dx_ptr, du_ptr, stride_x_row, stride_u_row, stride_dy_row, stride_dx_row,
                  stride_du_row, u_col0, n_rows, n_cols, pid_m, cols, col_mask, ACTIVATION: tl.constexpr,
                  GATED: tl.constexpr, EVEN: tl.constexpr, BLOCK_M: tl.constexpr):
    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    if EVEN:
        mask = None
    else:
        mask = (rows < n_rows)[:, None] & col_mask[None, :]
    x_offs = rows[:, None] * stride_x_row + cols[None, :]
    dx_offs = rows[:, None] * stride_dx_row + cols[None, :]
    dy = tl.load(dy_ptr + rows[:, None] * stride_dy_row + cols[None, :], mask=mask).to(tl.float32)
    a, da = _activation_and_grad(tl.load(x_ptr + x_offs, mask=mask).to(tl.float32), ACTIVATION)
    dx_ty = dx_ptr.dtype.element_ty
    if GATED:
        u_cols = (u_col0 + cols)[None, :]
        up = tl.load(u_ptr + rows[:, None] * stride_u_row + u_cols, mask=mask).to(tl.float32)
        tl.store(dx_ptr + dx_offs, (dy * up * da).to(dx_ty), mask=mask)
        tl.store(du_ptr + rows[:, None] * stride_du_row + u_cols, (dy * a).to(du_ptr.dtype.element_ty), mask=mask)
    else:
        tl.store(dx_ptr + dx_offs, (dy * da).to(dx_ty), mask=mask)


# ---------------------------------------------------------------------------
# the kernel


@triton.jit
def _act_tile(x_ptr, u_ptr, y_ptr, dy_ptr, du_ptr, stride_x_row, stride_u_row, stride_y_row, stride_dy_row,
              stride_du_row, u_col0, n_rows, n_cols, param, limit, pid_m, pid_n, cols, col_mask,
              ACTIVATION: tl.constexpr, GATED: tl.constexpr, BACKWARD: tl.constexpr, INTERLEAVED: tl.constexpr,
              CLAMP: tl.constexpr, ROUND_ACT: tl.constexpr, PRECISE: tl.constexpr, EVEN: tl.constexpr,
              BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    if BACKWARD:
        _act_bwd_tile(x_ptr, u_ptr, dy_ptr, y_ptr, du_ptr, stride_x_row, stride_u_row, stride_dy_row, stride_y_row,
                      stride_du_row, u_col0, n_rows, n_cols, pid_m, cols, col_mask, ACTIVATION, GATED, EVEN, BLOCK_M)
    else:
        _act_fwd_tile(x_ptr, u_ptr, y_ptr, stride_x_row, stride_u_row, stride_y_row, u_col0, n_rows, n_cols, param,
                      limit, pid_m, pid_n, cols, col_mask, ACTIVATION, GATED, INTERLEAVED, CLAMP, ROUND_ACT, PRECISE,
                      EVEN, BLOCK_M, BLOCK_N)


@triton.jit
def _act_and_mul_kernel(
    x_ptr,  # the input; gated: the gate
    u_ptr,  # gated: the up values, column u_col0 on of each row (x_ptr with u_col0 = n_cols: one gate|up row)
    y_ptr,  # the output; with BACKWARD x's (the gate's) gradient, laid out as x
    dy_ptr,  # BACKWARD: the output's gradient, (n_rows, n_cols)
    du_ptr,  # BACKWARD, gated: up's gradient, laid out as up (y_ptr when x and up share rows)
    stride_x_row,
    stride_u_row,
    stride_y_row,
    stride_dy_row,
    stride_du_row,
    u_col0,  # up's first column in its rows: n_cols where gate and up share a row, else 0
    n_rows,
    n_cols,  # output columns; a gated input row holds 2 * n_cols (gate, then up)
    param,  # runtime fp32: fatrelu's threshold, swish's beta
    limit,  # runtime fp32: CLAMP's limit
    ACTIVATION: tl.constexpr,  # "silu" | "gelu" | "gelu_tanh" | "relu"; forward only: "fatrelu" | "swish" | "gelu_quick" | "gelu_new" | "gelu_fast"
    GATED: tl.constexpr,  # y = act(x) * up   else   y = act(x)
    BACKWARD: tl.constexpr,  # dgate = dy * up * act'(gate), dup = dy * act(gate)   else   dx = dy * act'(x)
    INTERLEAVED: tl.constexpr,  # gated, forward: gate in x's even columns, up in the odd ones (vLLM's swigluoai)
    CLAMP: tl.constexpr,  # forward: gate = min(gate, limit), up = clamp(up, -limit, limit) + 1 (gpt-oss)
    ROUND_ACT: tl.constexpr,  # forward: act(gate) rounded to x's dtype before the multiply (torch's two ops)
    PRECISE: tl.constexpr,  # forward: torch's formulas, its bits (the device's expf / tanhf, IEEE division): 2 on NVIDIA, 1 AMD, 0 off
    INT64: tl.constexpr,  # offsets can pass 2^31: index in int64
    EVEN: tl.constexpr,  # tiles divide (n_rows, n_cols): no masks
    ONE_PASS: tl.constexpr,  # one program per row block (else stride over row blocks)
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
):
    # Grid (column blocks, row blocks), columns fastest: neighbouring programs
    # stream neighbouring memory (rows-fastest order was 5% slower at
    # 32768 x 14336 on an H200). Nothing but a multiply on the way to the first
    # load: decode shapes are latency-bound, and a runtime divide plus 64-bit
    # index math before the loads cost 5-9% at M <= 16. Axis 1 stops at 65535,
    # so past that many row blocks each program strides over the rest.
    # scalars to fp32 (inductor passes Python floats as fp64); tl.cast: a float has no .to in the interpreter
    param = tl.cast(param, tl.float32)
    limit = tl.cast(limit, tl.float32)
    pid_n = tl.program_id(0)
    if INT64:
        pid_n = pid_n.to(tl.int64)
    cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    col_mask = cols < n_cols
    if ONE_PASS:
        pid_m = tl.program_id(1)
        if INT64:
            pid_m = pid_m.to(tl.int64)
        _act_tile(x_ptr, u_ptr, y_ptr, dy_ptr, du_ptr, stride_x_row, stride_u_row, stride_y_row, stride_dy_row,
                  stride_du_row, u_col0, n_rows, n_cols, param, limit, pid_m, pid_n, cols, col_mask, ACTIVATION,
                  GATED, BACKWARD, INTERLEAVED, CLAMP, ROUND_ACT, PRECISE, EVEN, BLOCK_M, BLOCK_N)
    else:
        for pid_m in range(tl.program_id(1), tl.cdiv(n_rows, BLOCK_M), tl.num_programs(1)):
            if INT64:
                pid_m = pid_m.to(tl.int64)
            _act_tile(x_ptr, u_ptr, y_ptr, dy_ptr, du_ptr, stride_x_row, stride_u_row, stride_y_row,
                      stride_dy_row, stride_du_row, u_col0, n_rows, n_cols, param, limit, pid_m, pid_n, cols,
                      col_mask, ACTIVATION, GATED, BACKWARD, INTERLEAVED, CLAMP, ROUND_ACT, PRECISE, EVEN, BLOCK_M,
                      BLOCK_N)
