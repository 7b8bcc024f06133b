"""Activation kernels: silu, gelu (erf), gelu_tanh, relu, elementwise or gated, forward
and backward.

One kernel serves every public name in both directions: ``ACTIVATION``, ``GATED`` and
``BACKWARD`` are the constexpr flags, rows/columns/strides are runtime values.
"""

import triton
import triton.language as tl

_SQRT1_2: tl.constexpr = tl.constexpr(0.7071067811865476)  # 1 / sqrt(2)
_GELU_TANH_2BETA: tl.constexpr = tl.constexpr(1.5957691216057308)  # 2 * sqrt(2 / pi)
_GELU_TANH_KAPPA: tl.constexpr = tl.constexpr(0.044715)
_INV_SQRT_2PI: tl.constexpr = tl.constexpr(0.3989422804014327)  # 1 / sqrt(2 pi)


@triton.jit
def _silu(x):
    # x * sigmoid(x); for x -> -inf exp overflows to inf and x / inf -> -0, never NaN.
    return x / (1.0 + tl.exp(-x))


@triton.jit
def _gelu(x):
    return 0.5 * x * (1.0 + tl.erf(x * _SQRT1_2))


@triton.jit
def _gelu_tanh(x):
    # 0.5 * x * (1 + tanh(u)) == x * sigmoid(2u), u = sqrt(2/pi) * (x + 0.044715 x^3).
    # The sigmoid form has no tanh and no inf/inf: finite for every finite x
    # (x^3 may overflow to +-inf, which only drives exp to 0 or inf).
    u2 = _GELU_TANH_2BETA * (x + _GELU_TANH_KAPPA * x * x * x)
    return x / (1.0 + tl.exp(-u2))


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
def _act_fwd_tile(x_ptr, u_ptr, y_ptr, stride_x_row, stride_u_row, stride_y_row, u_col0, n_rows, n_cols, pid_m,
                  cols, col_mask, ACTIVATION: tl.constexpr, GATED: tl.constexpr, EVEN: tl.constexpr,
                  BLOCK_M: tl.constexpr):
    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    x_offs = rows[:, None] * stride_x_row + cols[None, :]
    if EVEN:
        mask = None
    else:
        mask = (rows < n_rows)[:, None] & col_mask[None, :]
    # Masked lanes load garbage that is never stored: no `other` needed.
    y = _apply_activation(tl.load(x_ptr + x_offs, mask=mask).to(tl.float32), ACTIVATION)
    if GATED:
        y = y * tl.load(u_ptr + rows[:, None] * stride_u_row + (u_col0 + cols)[None, :], mask=mask).to(tl.float32)
    tl.store(y_ptr + rows[:, None] * stride_y_row + cols[None, :], y.to(y_ptr.dtype.element_ty), mask=mask)


# ---------------------------------------------------------------------------
# backward


@triton.jit
def _activation_and_grad(x, ACTIVATION: tl.constexpr):
    """``(act(x), act'(x))`` in fp32, finite for every finite x (no 0 * inf)."""
    if ACTIVATION == "silu":
        s = 1.0 / (1.0 + tl.exp(-x))
        a = x * s
        # s * (1 + x (1 - s)) written as s + a (1 - s): x -> -inf gives 0 + (-0) * 1, not 0 * -inf
        return a, s + a * (1.0 - s)
    elif ACTIVATION == "gelu":
        cdf = 0.5 * (1.0 + tl.erf(x * _SQRT1_2))
        return x * cdf, cdf + x * _INV_SQRT_2PI * tl.exp(-0.5 * x * x)
    elif ACTIVATION == "gelu_tanh":
        # a = x * sigmoid(2u), u = beta (x + kappa x^3); a' = s + 2 beta x s (1 - s) (1 + 3 kappa x^2)
        u2 = _GELU_TANH_2BETA * (x + _GELU_TANH_KAPPA * x * x * x)
        s = 1.0 / (1.0 + tl.exp(-u2))
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
              stride_du_row, u_col0, n_rows, n_cols, pid_m, cols, col_mask, ACTIVATION: tl.constexpr,
              GATED: tl.constexpr, BACKWARD: tl.constexpr, EVEN: tl.constexpr, BLOCK_M: tl.constexpr):
    if BACKWARD:
        _act_bwd_tile(x_ptr, u_ptr, dy_ptr, y_ptr, du_ptr, stride_x_row, stride_u_row, stride_dy_row, stride_y_row,
                      stride_du_row, u_col0, n_rows, n_cols, pid_m, cols, col_mask, ACTIVATION, GATED, EVEN, BLOCK_M)
    else:
        _act_fwd_tile(x_ptr, u_ptr, y_ptr, stride_x_row, stride_u_row, stride_y_row, u_col0, n_rows, n_cols, pid_m,
                      cols, col_mask, ACTIVATION, GATED, EVEN, BLOCK_M)


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
    ACTIVATION: tl.constexpr,  # "silu" | "gelu" | "gelu_tanh" | "relu"
    GATED: tl.constexpr,  # y = act(x) * up   else   y = act(x)
    BACKWARD: tl.constexpr,  # dgate = dy * up * act'(gate), dup = dy * act(gate)   else   dx = dy * act'(x)
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
                  stride_du_row, u_col0, n_rows, n_cols, pid_m, cols, col_mask, ACTIVATION, GATED, BACKWARD, EVEN,
                  BLOCK_M)
    else:
        for pid_m in range(tl.program_id(1), tl.cdiv(n_rows, BLOCK_M), tl.num_programs(1)):
            if INT64:
                pid_m = pid_m.to(tl.int64)
            _act_tile(x_ptr, u_ptr, y_ptr, dy_ptr, du_ptr, stride_x_row, stride_u_row, stride_y_row,
                      stride_dy_row, stride_du_row, u_col0, n_rows, n_cols, pid_m, cols, col_mask, ACTIVATION, GATED,
                      BACKWARD, EVEN, BLOCK_M)
