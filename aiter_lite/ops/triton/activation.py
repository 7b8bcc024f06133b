"""Activations on the Triton backend: gated (``*_and_mul``) and elementwise.

Signatures follow aiter / vLLM: ``silu_and_mul(out, input)`` writes
``silu(input[..., :d]) * input[..., d:]`` into ``out`` (d = input.shape[-1] // 2).
Inputs may have any rank and strided rows (unit stride in the last dim);
fp32/fp16/bf16 in, the output's dtype out; math in fp32.

Forward only (vLLM's activation ops, which the vLLM forms in ``aiter_lite.vllm`` call):
``act_and_mul_rounded`` (torch's rounding: the activation stored in the input's dtype before
the multiply, torch's formulas with the device's expf / tanhf), ``fatrelu_and_mul``,
``swigluoai_and_mul`` (gpt-oss, interleaved gate / up), ``gelu_new``, ``gelu_fast``,
``gelu_quick``; each refuses an input that requires grad.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Literal

import torch

from aiter_lite.ops.triton._triton_kernels.activation import _act_and_mul_kernel
from aiter_lite.spec.device import INTERPRETER, DeviceProfile, device_profile
from aiter_lite.utils.aliases import lazy_aliases
from aiter_lite.utils.checks import (
    check_bool,
    check_choice,
    check_float_tensor,
    check_real,
    check_same_device,
    check_triton_device,
    check_unit_last_stride,
    rows_view,
)
from aiter_lite.utils.fast_launch import launch
from aiter_lite.utils.launch import cdiv, next_power_of_2
from aiter_lite.utils.launcher import launcher
from aiter_lite.utils.logger import debug_on, log_call
from aiter_lite.utils.registry import public_op

__all__ = [
    "silu_and_mul",
    "gelu_and_mul",
    "gelu_tanh_and_mul",
    "fused_silu_mul",
    "act_and_mul",
    "act_mul",
    "silu",
    "gelu",
    "relu",
    "act_and_mul_rounded",
    "fatrelu_and_mul",
    "swigluoai_and_mul",
    "gelu_new",
    "gelu_fast",
    "gelu_quick",
    "ActLaunchConfig",
    "act_launch_config",
]

Activation = Literal["silu", "gelu", "gelu_tanh", "relu"]
_ACTIVATIONS = ("silu", "gelu", "gelu_tanh", "relu")


@dataclass(frozen=True)
class ActLaunchConfig:
    BLOCK_M: int  # rows per program
    BLOCK_N: int  # output columns per program
    num_warps: int


# Measured on an H200 (bf16 silu_and_mul, d = 14336 and 28672, M = 1..32768;
# scripts/tune_activation.py): 2048-output tiles with 8 warps (one 16-byte
# vector per thread per access) are best or within 1% of best at every M, at
# 4.38 TB/s for M >= 16384; 4096-output tiles lose 1%, 8192+ lose 3-10% at M <= 512.
# Wider than 1024 columns gains nothing and wastes masked lanes on odd widths.
_TILE = 2048
_MAX_BLOCK_N = 1024
# Problems too small for two programs per SM (decode) are latency-bound: they
# shrink the tile down to 512 outputs and give each lane 4 elements instead of 8.
# Under CUDA graphs on an H200 (d = 14336 / 28672, M = 1 and 16), 512-output
# tiles with 4 warps ran 1.16-1.80 us, 2-5% faster than 1024 outputs with 4 warps
# and level with or ahead of static-shape torch.compile; 256-output tiles lose 2-25%.
_MIN_TILE = 512
_FLAT_WIDTH = 4096  # row width for contiguous elementwise inputs
_ONE_ROW = 1 << 20  # fewer elements, not a multiple of _FLAT_WIDTH: one row, one launch
_MAX_GRID_Y = 65535  # CUDA and HIP limit of grid axis 1


@functools.lru_cache(maxsize=1024)
def act_launch_config(n_rows: int, n_cols: int, profile: DeviceProfile = INTERPRETER) -> ActLaunchConfig:
    """Tile shape and warps for one activation launch over an (n_rows, n_cols) output.

    A tile of ``_TILE`` outputs at most ``_MAX_BLOCK_N`` wide, rows filling the
    rest (several rows per program when rows are short). On a GPU, problems too
    small for two programs per SM shrink the tile down to ``_MIN_TILE``.
    Cached: a serving loop asks for the same few shapes on every step.
    """
    block_n = min(next_power_of_2(max(n_cols, 1)), _MAX_BLOCK_N)
    block_m = min(max(_TILE // block_n, 1), next_power_of_2(max(n_rows, 1)))
    per_lane = 8  # one 16-byte bf16 vector per lane per access
    if not profile.interpreter:
        want = 2 * profile.sms
        if cdiv(n_rows, block_m) * cdiv(n_cols, block_n) < want:
            per_lane = 4
        while block_m * block_n > _MIN_TILE and cdiv(n_rows, block_m) * cdiv(n_cols, block_n) < want:
            if block_m > 1:
                block_m //= 2
            else:
                block_n //= 2
    # 8 warps of 32 lanes for a 2048 tile on NVIDIA, 4 wavefronts of 64 on AMD.
    num_warps = profile.warps_for(block_m * block_n, per_lane, hi=8)
    return ActLaunchConfig(block_m, block_n, num_warps)


def _launch(x2: torch.Tensor, y2: torch.Tensor, dy2: torch.Tensor | None, activation: str, gated: bool,
            config: ActLaunchConfig | None, u2: torch.Tensor | None = None, du2: torch.Tensor | None = None,
            mode: "_Mode | None" = None) -> None:
    """The kernel over 2-D views: y2 = act(x2) (gated: of its halves, or act(x2) * u2 where
    the up values are their own rows ``u2``), or with ``dy2`` (the output's gradient) y2 =
    x2's gradient (and du2 = u2's). ``mode``: the forward-only options (:class:`_Mode`)."""
    mode = mode or _PLAIN
    n_rows, n_cols = (y2 if dy2 is None else dy2).shape
    profile = device_profile(x2.device)
    cfg = config or act_launch_config(n_rows, n_cols, profile)
    row_blocks = cdiv(n_rows, cfg.BLOCK_M)
    col_blocks = cdiv(n_cols, cfg.BLOCK_N)
    u_col0 = n_cols if gated and u2 is None else 0  # up in x2's rows, n_cols on
    u2 = x2 if u2 is None else u2
    du2 = y2 if du2 is None else du2
    # Bound on any lane's offset, masked lanes of the last tiles included (a gated
    # row's up half sits n_cols further on).
    stride = max(t.stride(0) for t in (x2, y2, u2, du2, x2 if dy2 is None else dy2))
    max_offset = row_blocks * cfg.BLOCK_M * stride + 2 * col_blocks * cfg.BLOCK_N + n_cols
    launch(
        _act_and_mul_kernel, (col_blocks, min(row_blocks, _MAX_GRID_Y)),
        x2, u2, y2, dy2, du2, x2.stride(0), u2.stride(0), y2.stride(0), 0 if dy2 is None else dy2.stride(0),
        du2.stride(0), u_col0, n_rows, n_cols, mode.param, mode.limit,
        ACTIVATION=activation,
        GATED=gated,
        BACKWARD=dy2 is not None,
        INTERLEAVED=mode.interleaved,
        CLAMP=mode.clamp,
        ROUND_ACT=mode.round_act,
        PRECISE=profile.device_math if mode.precise else 0,
        INT64=max_offset >= 2**31,
        EVEN=n_rows % cfg.BLOCK_M == 0 and n_cols % cfg.BLOCK_N == 0,
        ONE_PASS=row_blocks <= _MAX_GRID_Y,
        BLOCK_M=cfg.BLOCK_M,
        BLOCK_N=cfg.BLOCK_N,
        num_warps=cfg.num_warps,
    )


@dataclass(frozen=True)
class _Mode:
    """The forward-only options of a launch (the kernel's runtime scalars and flags)."""
    param: float = 0.0  # fatrelu's threshold, swish's beta
    limit: float = 0.0  # clamp's limit
    interleaved: bool = False  # gate and up in alternate columns
    clamp: bool = False  # gpt-oss: min(gate, limit), clamp(up, -limit, limit) + 1
    round_act: bool = False  # act(gate) rounded to the input's dtype before the multiply
    precise: bool = False  # the device's expf / tanhf and IEEE division, torch's formulas


_PLAIN = _Mode()


@launcher(mutates=("y2",))
def _launch_act_and_mul(x2: torch.Tensor, y2: torch.Tensor, activation: str, gated: bool,
                        config: ActLaunchConfig | None = None) -> None:
    """The forward over 2-D views; ``config`` pins a launch (tests, tuning)."""
    _launch(x2, y2, None, activation, gated, config)


@launcher(mutates=("y2",))
def _launch_act_ex(x2: torch.Tensor, u2: torch.Tensor | None, y2: torch.Tensor, activation: str, gated: bool,
                   param: float, limit: float, interleaved: bool, clamp: bool, round_act: bool,
                   config: ActLaunchConfig | None = None) -> None:
    """The forward with the forward-only options, math as torch's (precise functions on a
    GPU): y2 = act(x2) * u2 where ``u2`` (gated, up values in their own rows), else of x2's
    halves, or of its alternate columns (``interleaved``)."""
    _launch(x2, y2, None, activation, gated, config, u2=u2,
            mode=_Mode(param, limit, interleaved, clamp, round_act, precise=True))


@launcher(mutates=("dx2",))
def _launch_act_and_mul_bwd(x2: torch.Tensor, dy2: torch.Tensor, dx2: torch.Tensor, activation: str, gated: bool,
                            config: ActLaunchConfig | None = None) -> None:
    """The backward over 2-D views: x2 as the forward read it, dy2 the output's gradient,
    dx2 x2's gradient; the forward's tiles and grid."""
    _launch(x2, dx2, dy2, activation, gated, config)


@launcher(mutates=("y2",))
def _launch_act_mul(gate2: torch.Tensor, up2: torch.Tensor, y2: torch.Tensor, activation: str,
                    config: ActLaunchConfig | None = None) -> None:
    """``y2 = act(gate2) * up2`` over 2-D views of three tensors."""
    _launch(gate2, y2, None, activation, True, config, u2=up2)


@launcher(mutates=("dgate2", "dup2"))
def _launch_act_mul_bwd(gate2: torch.Tensor, up2: torch.Tensor, dy2: torch.Tensor, dgate2: torch.Tensor,
                        dup2: torch.Tensor, activation: str, config: ActLaunchConfig | None = None) -> None:
    """The gradients of gate2 and up2 from the output's gradient dy2, one pass."""
    _launch(gate2, dgate2, dy2, activation, True, config, u2=up2, du2=dup2)


def _flat_pieces(*tensors: torch.Tensor):
    """Contiguous tensors of one size as rows of _FLAT_WIDTH, then one short row for the
    remainder (full-width tiles whatever the shape): a list of views, a tuple per piece.
    Below _ONE_ROW elements with a remainder, one row of them all (one launch: at decode
    sizes the second launch's host time, and a launch plan, outweigh a masked last tile)."""
    flat = [t.view(-1) for t in tensors]
    n = flat[0].numel()
    if n % _FLAT_WIDTH and n < _ONE_ROW:
        return [tuple(f.view(1, -1) for f in flat)]
    main = n - n % _FLAT_WIDTH
    pieces = []
    if main:
        pieces.append(tuple(f[:main].view(-1, _FLAT_WIDTH) for f in flat))
    if main < n:
        pieces.append(tuple(f[main:].view(1, -1) for f in flat))
    return pieces


def _act_forward(op: str, in_name: str, x: torch.Tensor, activation: str, gated: bool,
                 config: ActLaunchConfig | None = None) -> torch.Tensor:
    """A new tensor: ``act(x[..., :d]) * x[..., d:]`` (gated) or ``act(x)``, x checked."""
    shape = (*x.shape[:-1], x.shape[-1] // 2) if gated else x.shape
    y = torch.empty(shape, dtype=x.dtype, device=x.device)
    if y.numel() == 0:
        return y
    if gated or not x.is_contiguous():
        x2 = rows_view(op, in_name, x, writable=False)
        _launch_act_and_mul(x2, y.view(x2.shape[0], -1), activation, gated, config)
    else:
        for x2, y2 in _flat_pieces(x, y):
            _launch_act_and_mul(x2, y2, activation, False, config)
    return y


def _act_backward(op: str, in_name: str, x: torch.Tensor, dy: torch.Tensor, activation: str,
                  gated: bool) -> torch.Tensor:
    """x's gradient (x's shape and dtype, contiguous) from the output's gradient ``dy``."""
    dx = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    if dx.numel() == 0:
        return dx
    dy = dy.contiguous()  # an expanded or transposed gradient: one layout for the kernel
    if gated:
        x2 = rows_view(op, in_name, x, writable=False)
        _launch_act_and_mul_bwd(x2, dy.view(x2.shape[0], -1), dx.view(x2.shape), activation, True)
    else:
        for x2, dy2, dx2 in _flat_pieces(x.contiguous(), dy, dx):
            _launch_act_and_mul_bwd(x2, dy2, dx2, activation, False)
    return dx


class _ActFunction(torch.autograd.Function):
    """``act(x[..., :d]) * x[..., d:]`` (gated) or ``act(x)`` with x's gradient by the
    backward kernel (fp32 math, x's dtype)."""

    @staticmethod
    def forward(ctx, x, activation, gated, op, in_name, config):
        ctx.save_for_backward(x)
        ctx.activation, ctx.gated, ctx.op, ctx.in_name = activation, gated, op, in_name
        return _act_forward(op, in_name, x, activation, gated, config)

    @staticmethod
    def backward(ctx, dy):
        (x,) = ctx.saved_tensors
        return _act_backward(ctx.op, ctx.in_name, x, dy, ctx.activation, ctx.gated), None, None, None, None, None


def _recording(t: torch.Tensor) -> bool:
    """Whether autograd records an op on ``t``."""
    return t.requires_grad and torch.is_grad_enabled()


def _check_gated(op: str, out: torch.Tensor | None, input: torch.Tensor, names: tuple[str, str],
                 optional_out: bool) -> None:
    """``input`` (gate, then up) and ``out`` (None allowed where ``optional_out``) of a gated
    op; ``names`` are the caller's for out and input."""
    out_name, in_name = names
    check_float_tensor(op, in_name, input)
    check_triton_device(op, in_name, input)
    if input.dim() == 0 or input.shape[-1] % 2:
        raise ValueError(f"{op}: {in_name} last dim must be even (gate, then up), got shape {tuple(input.shape)}")
    check_unit_last_stride(op, in_name, input)
    if out is None and optional_out:
        return
    check_float_tensor(op, out_name, out)
    check_same_device(op, out_name, out, in_name, input)
    expected = (*input.shape[:-1], input.shape[-1] // 2)
    if tuple(out.shape) != expected:
        raise ValueError(f"{op}: {out_name} must have shape {expected} for {in_name} {tuple(input.shape)}, "
                         f"got {tuple(out.shape)}")
    check_unit_last_stride(op, out_name, out)


def _gated(op: str, out: torch.Tensor | None, input: torch.Tensor, activation: str,
           config: ActLaunchConfig | None = None, names: tuple[str, str] = ("out", "input"),
           optional_out: bool = False) -> torch.Tensor:
    """Checked ``out = act(input[..., :d]) * input[..., d:]``, into a new tensor where ``out``
    is None (allowed where ``optional_out``); ``names`` are the caller's for out and input.
    Where autograd records ``input`` the result is differentiable (copied into ``out`` when
    given, as the native op's)."""
    _check_gated(op, out, input, names, optional_out)
    out_name, in_name = names
    if debug_on():
        log_call(op, **{out_name: out, in_name: input})
    if _recording(input):
        y = _ActFunction.apply(input, activation, True, op, in_name, config)
        return y if out is None else out.copy_(y)
    if out is None:
        return _act_forward(op, in_name, input, activation, True, config)
    if out.numel() == 0:
        return out
    _launch_act_and_mul(rows_view(op, in_name, input, writable=False), rows_view(op, out_name, out, writable=True),
                        activation, True, config)
    return out


@public_op(mutates=("out",))
def act_and_mul(out: torch.Tensor, input: torch.Tensor, activation: Activation,
                config: ActLaunchConfig | None = None) -> torch.Tensor:
    """``out = act(input[..., :d]) * input[..., d:]``, d = input.shape[-1] // 2; returns ``out``."""
    return _gated("act_and_mul", out, input, check_choice("act_and_mul", "activation", activation, _ACTIVATIONS),
                  config)


@public_op(mutates=("out",))
def silu_and_mul(out: torch.Tensor, input: torch.Tensor) -> torch.Tensor:
    """``out = silu(input[..., :d]) * input[..., d:]`` (SwiGLU); returns ``out``."""
    return _gated("silu_and_mul", out, input, "silu")


@public_op(mutates=("out",))
def gelu_and_mul(out: torch.Tensor, input: torch.Tensor) -> torch.Tensor:
    """``out = gelu(input[..., :d]) * input[..., d:]`` with exact (erf) GELU (GeGLU); returns ``out``."""
    return _gated("gelu_and_mul", out, input, "gelu")


@public_op(mutates=("out",))
def gelu_tanh_and_mul(out: torch.Tensor, input: torch.Tensor) -> torch.Tensor:
    """``out = gelu_tanh(input[..., :d]) * input[..., d:]``; returns ``out``."""
    return _gated("gelu_tanh_and_mul", out, input, "gelu_tanh")


@public_op(buffers=("out",))
def fused_silu_mul(x: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
    """Allocating SwiGLU: ``silu(x[..., :d]) * x[..., d:]`` into ``out`` (allocated when None)."""
    return _gated("fused_silu_mul", out, x, "silu", names=("out", "x"), optional_out=True)


def _check_act_mul(op: str, gate, up) -> None:
    check_float_tensor(op, "gate", gate)
    check_triton_device(op, "gate", gate)
    check_float_tensor(op, "up", up)
    check_same_device(op, "up", up, "gate", gate)
    if up.shape != gate.shape:
        raise ValueError(f"{op}: up must have gate's shape {tuple(gate.shape)}, got {tuple(up.shape)}")
    if up.dtype != gate.dtype:
        raise TypeError(f"{op}: up must have gate's dtype {gate.dtype}, got {up.dtype}")
    if gate.dim() == 0:
        raise ValueError(f"{op}: gate must have at least one dim, got a 0-d tensor")
    check_unit_last_stride(op, "gate", gate)
    check_unit_last_stride(op, "up", up)


def _act_mul_forward(op: str, gate: torch.Tensor, up: torch.Tensor, activation: str) -> torch.Tensor:
    y = torch.empty(gate.shape, dtype=gate.dtype, device=gate.device)
    if y.numel():
        g2 = rows_view(op, "gate", gate, writable=False)
        _launch_act_mul(g2, rows_view(op, "up", up, writable=False), y.view(g2.shape), activation)
    return y


class _ActMulFunction(torch.autograd.Function):
    """``act(gate) * up`` with both gradients from one backward pass."""

    @staticmethod
    def forward(ctx, gate, up, activation, op):
        ctx.save_for_backward(gate, up)
        ctx.activation, ctx.op = activation, op
        return _act_mul_forward(op, gate, up, activation)

    @staticmethod
    def backward(ctx, dy):
        gate, up = ctx.saved_tensors
        dgate = torch.empty(gate.shape, dtype=gate.dtype, device=gate.device)
        dup = torch.empty(up.shape, dtype=up.dtype, device=up.device)
        if dgate.numel():
            g2 = rows_view(ctx.op, "gate", gate, writable=False)
            _launch_act_mul_bwd(g2, rows_view(ctx.op, "up", up, writable=False),
                                dy.contiguous().view(g2.shape), dgate.view(g2.shape), dup.view(g2.shape),
                                ctx.activation)
        return dgate, dup, None, None


@public_op
def act_mul(gate: torch.Tensor, up: torch.Tensor, activation: Activation = "silu") -> torch.Tensor:
    """``act(gate) * up`` as a new tensor, gate and up separate tensors of one shape (a
    Hugging Face MLP's ``gate_proj(x)`` and ``up_proj(x)``: no concatenation); Liger's
    ``LigerSiLUMulFunction`` / ``LigerGELUMulFunction``. Differentiable in gate and up (one
    backward pass writes both gradients)."""
    op = "act_mul"
    activation = check_choice(op, "activation", activation, _ACTIVATIONS)
    _check_act_mul(op, gate, up)
    if debug_on():
        log_call(op, gate=gate, up=up, activation=activation)
    if torch.is_grad_enabled() and (gate.requires_grad or up.requires_grad):
        return _ActMulFunction.apply(gate, up, activation, op)
    return _act_mul_forward(op, gate, up, activation)


def _elementwise(op: str, x: torch.Tensor, activation: str) -> torch.Tensor:
    check_float_tensor(op, "x", x)
    check_unit_last_stride(op, "x", x)
    check_triton_device(op, "x", x)
    if debug_on():
        log_call(op, x=x)
    if _recording(x):
        return _ActFunction.apply(x, activation, False, op, "x", None)
    # Contiguous: rows of _FLAT_WIDTH whatever the shape (full-width tiles even when the
    # last dim is tiny), plus one short row for the remainder.
    return _act_forward(op, "x", x, activation, False)


@public_op
def silu(x: torch.Tensor) -> torch.Tensor:
    """``x * sigmoid(x)``."""
    return _elementwise("silu", x, "silu")


@public_op
def gelu(x: torch.Tensor, approximate: Literal["none", "tanh"] = "none") -> torch.Tensor:
    """GELU, exact (erf) or with the tanh approximation, as ``torch.nn.functional.gelu``."""
    check_choice("gelu", "approximate", approximate, ("none", "tanh"))
    return _elementwise("gelu", x, "gelu" if approximate == "none" else "gelu_tanh")


@public_op
def relu(x: torch.Tensor) -> torch.Tensor:
    """``max(x, 0)``, NaN propagating."""
    return _elementwise("relu", x, "relu")


# ---------------------------------------------------------------------------
# forward-only forms (vLLM's activation ops and their semantics): no backward kernel

_FORWARD_ONLY = "a forward-only activation form (vLLM's inference op); train with silu_and_mul / act_and_mul / act_mul"
_QUICK_GELU_BETA = 1.702


def _gated_ex(op: str, out: torch.Tensor, input: torch.Tensor, activation: str, *, param: float = 0.0,
              limit: float = 0.0, interleaved: bool = False, clamp: bool = False, round_act: bool = False,
              act_first: bool = True) -> torch.Tensor:
    """Checked ``out = act(gate) * up`` with the forward-only options; ``act_first`` False:
    the activation of the second half times the first (vLLM's mul_and_silu)."""
    _check_gated(op, out, input, ("out", "input"), False)
    if debug_on():
        log_call(op, out=out, input=input, activation=activation)
    if out.numel() == 0:
        return out
    x2 = rows_view(op, "input", input, writable=False)
    y2 = rows_view(op, "out", out, writable=True)
    d = y2.shape[1]
    if act_first or interleaved:
        _launch_act_ex(x2, None, y2, activation, True, param, limit, interleaved, clamp, round_act)
    else:  # views of the two halves: no copy
        _launch_act_ex(x2[:, d:], x2[:, :d], y2, activation, True, param, limit, False, clamp, round_act)
    return out


def _elementwise_ex(op: str, out: torch.Tensor | None, x: torch.Tensor, activation: str, param: float = 0.0,
                    names: tuple[str, str] = ("out", "x")) -> torch.Tensor:
    """Checked ``out = act(x)`` (a new tensor where ``out`` is None), any shape, strided rows."""
    out_name, in_name = names
    check_float_tensor(op, in_name, x)
    check_triton_device(op, in_name, x)
    check_unit_last_stride(op, in_name, x)
    if out is None:
        out = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    else:
        check_float_tensor(op, out_name, out)
        check_same_device(op, out_name, out, in_name, x)
        if out.shape != x.shape:
            raise ValueError(f"{op}: {out_name} must have {in_name}'s shape {tuple(x.shape)}, got {tuple(out.shape)}")
        check_unit_last_stride(op, out_name, out)
    if debug_on():
        log_call(op, **{out_name: out, in_name: x})
    if out.numel() == 0:
        return out
    if x.is_contiguous() and out.is_contiguous():
        for x2, y2 in _flat_pieces(x, out):
            _launch_act_ex(x2, None, y2, activation, False, param, 0.0, False, False, False)
    else:
        xs = x if x.dim() else x.view(1)
        ys = out if out.dim() else out.view(1)
        _launch_act_ex(rows_view(op, in_name, xs, writable=False), None, rows_view(op, out_name, ys, writable=True),
                       activation, False, param, 0.0, False, False, False)
    return out


@public_op(mutates=("out",), no_grad=_FORWARD_ONLY)
def act_and_mul_rounded(out: torch.Tensor, input: torch.Tensor, activation: Activation,
                        act_first: bool = True) -> torch.Tensor:
    """``out = act(input[..., :d]) * input[..., d:]`` as torch's two ops compute it (and
    vLLM's kernels): the activation, by torch's formula with the device's expf / tanhf /
    erff and IEEE division, is rounded to input's dtype before the multiply (bf16 on NVIDIA:
    silu's quotient by div.full, proven to round the same for every bf16 value by an
    exhaustive GPU test; it keeps the op at the copy's rate). ``act_first``
    False: ``input[..., :d] * act(input[..., d:])`` (vLLM's mul_and_silu). Returns ``out``."""
    op = "act_and_mul_rounded"
    activation = check_choice(op, "activation", activation, _ACTIVATIONS)
    return _gated_ex(op, out, input, activation, round_act=True, act_first=check_bool(op, "act_first", act_first))


@public_op(mutates=("out",), no_grad=_FORWARD_ONLY)
def fatrelu_and_mul(out: torch.Tensor, input: torch.Tensor, threshold: float = 0.0) -> torch.Tensor:
    """FATReLU gate (MiniCPM-S): ``out = where(g > threshold, g, 0) * input[..., d:]``, g =
    ``input[..., :d]`` (``F.threshold``: a NaN gate stays NaN); returns ``out``."""
    op = "fatrelu_and_mul"
    return _gated_ex(op, out, input, "fatrelu", param=check_real(op, "threshold", threshold))


@public_op(mutates=("out",), no_grad=_FORWARD_ONLY)
def swigluoai_and_mul(out: torch.Tensor, input: torch.Tensor, alpha: float = 1.702,
                      limit: float = 7.0) -> torch.Tensor:
    """gpt-oss's clamped SwiGLU over interleaved columns (gate ``input[..., 0::2]``, up
    ``input[..., 1::2]``): ``g = min(gate, limit)``, ``u = clamp(up, -limit, limit)``,
    ``out = (u + 1) * g * sigmoid(alpha * g)`` in fp32, one rounding; returns ``out``."""
    op = "swigluoai_and_mul"
    alpha = check_real(op, "alpha", alpha)
    limit = check_real(op, "limit", limit)
    return _gated_ex(op, out, input, "swish", param=alpha, limit=limit, interleaved=True, clamp=True)


@public_op(no_grad=_FORWARD_ONLY)
def gelu_new(x: torch.Tensor) -> torch.Tensor:
    """GPT-2's GELU, ``0.5 x (1 + tanh(0.79788456 (x + 0.044715 x^3)))``, rounded to x's dtype
    where vLLM's kernel (and Hugging Face's NewGELUActivation in that dtype) rounds: its bits
    for every bf16 / fp16 value (an exhaustive GPU test; the kernel's tanh is cheaper than
    tanhf and rounds the same, ``_tanh_rounded``)."""
    return _elementwise_ex("gelu_new", None, x, "gelu_new")


@public_op(no_grad=_FORWARD_ONLY)
def gelu_fast(x: torch.Tensor) -> torch.Tensor:
    """``0.5 x (1 + tanh(0.79788456 x (1 + 0.044715 x^2)))``, rounded to x's dtype where
    vLLM's kernel (and Hugging Face's FastGELUActivation in that dtype) rounds (its bits, as
    gelu_new)."""
    return _elementwise_ex("gelu_fast", None, x, "gelu_fast")


@public_op(no_grad=_FORWARD_ONLY)
def gelu_quick(x: torch.Tensor) -> torch.Tensor:
    """Quick GELU, ``x * sigmoid(1.702 x)`` as vLLM computes it, ``x / (1 + expf(-1.702 x))``
    in fp32, one rounding (bf16 on NVIDIA: div.full, the same bits for every bf16 value by
    an exhaustive GPU test)."""
    return _elementwise_ex("gelu_quick", None, x, "gelu_quick", _QUICK_GELU_BETA)


# aiter's name at this path (aiter_lite defines it with the other activation + quant ops)
__getattr__ = lazy_aliases(globals(), {
    "act_mul_and_fp8_group_quant": "aiter_lite.ops.triton.quant.act_quant",
})
from aiter_lite.ops.triton.quant.mx_quant import act_mul_and_mxfp4_quant  # noqa: E402,F401  (aiter's name here)
