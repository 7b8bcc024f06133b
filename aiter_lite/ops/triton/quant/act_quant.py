"""Gated activation fused with fp8 / int8 quantization on the Triton backend.

``y = act(x[..., :d]) * x[..., d:]`` (d = x.shape[-1] // 2) in fp32, rounded to x's dtype
as :func:`aiter_lite.ops.triton.activation.act_and_mul` stores it, then quantized as the
quant ops quantize: the result is ``act_and_mul`` followed by the quant op, in one pass
(x read once, y never written to memory).

* ``act_mul_and_fp8_group_quant(x, activation, group_size, dtype_quant)`` (aiter's name):
  a scale per ``group_size`` columns of each row of y, as ``per_token_group_quant_fp8``;
* ``act_mul_and_fp8_quant(x, activation, scale=None, dtype_quant=None, *, scale_ub=None)``:
  static per tensor when ``scale`` is given, else a scale per row, as ``scaled_fp8_quant``
  with ``use_per_token_if_dynamic``;
* ``silu_and_mul_quant(out, input, scale)``: vLLM's static form, into a caller's ``out``.

``activation`` is "silu", "gelu" (erf) or "gelu_tanh". Inputs: float32 / float16 /
bfloat16 of any rank with an even last dim (gate, then up), unit stride in the last
dim, rows of any stride. The quantized dtype (default :func:`get_fp8_e4m3_dtype` of x's
device) is float8_e4m3fn, float8_e4m3fnuz, float8_e5m2 or int8, as far as the device
stores it; values saturate to its range. NaN as the quant ops: a NaN in y makes its row's
(group's) dynamic scale NaN and the values under it NaN in fp8, 0 in int8; other rows and
groups are unaffected.
"""

from __future__ import annotations

import functools
from typing import Literal

import torch

from aiter_lite.ops.triton._triton_kernels.quant.act_quant import _act_quant_kernel
from aiter_lite.ops.triton.activation import act_launch_config
from aiter_lite.ops.triton.quant.dtypes import check_quant_dtype_supported
from aiter_lite.ops.triton.quant.quant import (
    QuantLaunchConfig,
    _check_group,
    _check_q,
    _check_scale,
    _soft_round,
    per_token_launch_config,
)
from aiter_lite.spec.device import INTERPRETER, DeviceProfile, device_profile
from aiter_lite.spec.quant import GROUP_EPS, QUANT_DTYPES, get_fp8_e4m3_dtype, min_scale, quant_range
from aiter_lite.utils.checks import check_bool, check_choice, check_row_input, rows_view
from aiter_lite.utils.fast_launch import launch
from aiter_lite.utils.launch import cdiv, next_power_of_2
from aiter_lite.utils.launcher import launcher
from aiter_lite.utils.logger import debug_on, log_call
from aiter_lite.utils.registry import public_op

# why the public ops here refuse a call autograd would record (utils.registry.public_op)
_NO_GRAD = "its outputs are quantized values and scales"

__all__ = [
    "act_mul_and_fp8_group_quant",
    "act_mul_and_fp8_quant",
    "act_quant_launch_config",
    "silu_and_mul_quant",
]

Activation = Literal["silu", "gelu", "gelu_tanh"]
_ACTIVATIONS = ("silu", "gelu", "gelu_tanh")
_MAX_GRID_Y = 65535  # CUDA and HIP limit of grid axis 1


# Unmeasured starting points (no GPU timing behind them yet), taken from the unfused
# ops, whose memory traffic the fused kernel shares: two input halves read, one narrower
# output written. "static" and "group" tiles are act_and_mul's (measured for it).
# "per_token" rows are laid out as the per-token quant kernel's (rows up to 16384 columns
# in registers, several short rows to a program, wider rows looped), with fewer outputs
# per lane, since each output holds a gate, an up and y: at most _OUTPUTS_PER_LANE in
# registers (a 16384-wide gelu row took 210 registers at 8 warps, 124 at 16, sm_90 offline
# compile), and looped rows step by _LOOP_BLOCK outputs, the quant kernel's 8192-element
# step in input elements (88-108 registers at 8 warps; 8192-output steps took 170-187).
_OUTPUTS_PER_LANE = 32
_LOOP_BLOCK = 4096
_MAX_ROW_IN_REGS = 16384


@functools.lru_cache(maxsize=1024)
def act_quant_launch_config(scaling: str, n_rows: int, n_cols: int, profile: DeviceProfile = INTERPRETER,
                            group_size: int = 1) -> QuantLaunchConfig:
    """Tile and warps of one fused launch over an (n_rows, n_cols) output, ``scaling`` one of
    "static", "per_token", "group" (tiles at least ``group_size`` wide)."""
    if scaling == "per_token":
        cfg = per_token_launch_config(n_rows, n_cols, profile)
        # this kernel has no split-row mode: rows the quant kernel splits are looped here
        if cfg.LOOPED or cfg.SPLIT or cfg.BLOCK_N > _MAX_ROW_IN_REGS:
            return QuantLaunchConfig(1, _LOOP_BLOCK, profile.row_warps(_LOOP_BLOCK), LOOPED=True)
        warps = max(cfg.num_warps, profile.warps_for(cfg.BLOCK_M * cfg.BLOCK_N, _OUTPUTS_PER_LANE, lo=1, hi=16))
        return QuantLaunchConfig(cfg.BLOCK_M, cfg.BLOCK_N, warps)
    cfg = act_launch_config(n_rows, n_cols, profile)
    if cfg.BLOCK_N >= group_size:
        return QuantLaunchConfig(cfg.BLOCK_M, cfg.BLOCK_N, cfg.num_warps)
    block_m = min(max(cfg.BLOCK_M * cfg.BLOCK_N // group_size, 1), next_power_of_2(max(n_rows, 1)))
    return QuantLaunchConfig(block_m, group_size, profile.row_warps(block_m * group_size))


# ---------------------------------------------------------------------------
# checks


def _check_input(op: str, name: str, x, activation) -> int:
    """x's output width d (x holds gate, then up)."""
    check_choice(op, "activation", activation, _ACTIVATIONS)
    check_row_input(op, name, x)
    if x.shape[-1] % 2:
        raise ValueError(f"{op}: {name} last dim must be even (gate, then up), got shape {tuple(x.shape)}")
    return x.shape[-1] // 2


def _q_dtype(op: str, dtype_quant, x: torch.Tensor) -> torch.dtype:
    dtype = get_fp8_e4m3_dtype(x.device) if dtype_quant is None else dtype_quant
    if dtype not in QUANT_DTYPES:
        raise TypeError(f"{op}: dtype_quant must be one of {', '.join(str(d) for d in QUANT_DTYPES)}, got {dtype}")
    check_quant_dtype_supported(op, "dtype_quant", dtype, x.device)
    return dtype


# ---------------------------------------------------------------------------
# launches (torch.ops.aiter_lite custom ops under torch.compile)


def _needs_int64(n_rows: int, n_cols: int, cfg: QuantLaunchConfig, row_stride: int, s_group: int) -> bool:
    """Whether a lane's offset can pass 2^31: masked lanes of the last tiles included, an
    up half n_cols past its gate, a (column-major) scale's group stride."""
    rows = cdiv(n_rows, cfg.BLOCK_M) * cfg.BLOCK_M
    cols = cdiv(n_cols, cfg.BLOCK_N) * cfg.BLOCK_N
    return rows * row_stride + cols + n_cols + cols * s_group >= 2**31


@launcher(mutates=("q2", "scale"))
def _launch_act_quant(x2: torch.Tensor, q2: torch.Tensor, scale: torch.Tensor, scale_ub: torch.Tensor | None,
                      activation: str, scaling: str, group_size: int, round_y: bool = True,
                      config: QuantLaunchConfig | None = None, weights: torch.Tensor | None = None,
                      limit: float = 0.0, ue8m0: bool = False, shuffle: bool = False) -> None:
    """The kernel over 2-D views: x2 (M, 2d), q2 (M, d); scale one element ("static"),
    (M,) ("per_token") or (M, G) ("group"; uint8 e8m0 bytes with ``ue8m0``, the padded
    shuffled buffer with ``shuffle``), unused ("none": y stored in q2's dtype); y rounded to
    x2's dtype before quantization where ``round_y``; ``limit`` > 0: SwiGLU's clamp;
    ``weights`` (M, 1) or (M, d): y's factors. ``config`` pins a launch (tests, tuning)."""
    n_rows, n_cols = q2.shape
    cfg = config or act_quant_launch_config("static" if scaling == "none" else scaling, n_rows, n_cols,
                                            device_profile(x2.device), group_size)
    if scaling == "group" and cfg.BLOCK_N % group_size:
        raise ValueError(f"act_quant: a group launch's BLOCK_N must be a multiple of group_size {group_size}, "
                         f"got {cfg.BLOCK_N}")
    if scaling == "per_token":  # a program owns whole rows: a 1-D grid
        if cfg.SPLIT or (not cfg.LOOPED and cfg.BLOCK_N < n_cols):
            raise ValueError(f"act_quant: a per-token launch holds whole rows: it loops (LOOPED) or its BLOCK_N "
                             f"covers the {n_cols} columns; got {cfg}")
        _act_quant_rows(x2, q2, scale, scale_ub, activation, scaling, 1, cfg, round_y)
        return
    # Tiles, columns fastest (as act_and_mul); grid axis 1 stops at 65535, so further
    # row blocks go to further launches.
    step = _MAX_GRID_Y * cfg.BLOCK_M
    extra = dict(weights=weights, limit=limit, ue8m0=ue8m0, shuffle=shuffle)
    if n_rows <= step or shuffle:  # (a shuffled buffer's offsets need the whole rows: 65535 row blocks at most)
        if cdiv(n_rows, cfg.BLOCK_M) > _MAX_GRID_Y:
            raise ValueError(f"act_quant: {n_rows} rows in {cfg.BLOCK_M}-row blocks pass the grid's 65535 with "
                             f"shuffled scales")
        _act_quant_rows(x2, q2, scale, None, activation, scaling, group_size, cfg, round_y, **extra)
        return
    for start in range(0, n_rows, step):
        rows = slice(start, min(start + step, n_rows))
        _act_quant_rows(x2[rows], q2[rows], scale if scaling in ("static", "none") else scale[rows], None,
                        activation, scaling, group_size, cfg, round_y,
                        **{**extra, "weights": None if weights is None else weights[rows]})


def _act_quant_rows(x2, q2, scale, scale_ub, activation: str, scaling: str, group_size: int,
                    cfg: QuantLaunchConfig, round_y: bool, weights=None, limit: float = 0.0, ue8m0: bool = False,
                    shuffle: bool = False) -> None:
    n_rows, n_cols = q2.shape
    q_min, q_max = quant_range(q2.dtype) if scaling != "none" else (0.0, 0.0)
    s_row = 0 if scaling in ("static", "none") or shuffle else scale.stride(0)
    s_group = scale.stride(1) if scaling == "group" and not shuffle else 0
    w_row, w_col = (0, 0) if weights is None else (weights.stride(0), weights.stride(1) if weights.shape[1] > 1 else 0)
    row_blocks = cdiv(n_rows, cfg.BLOCK_M)
    per_token = scaling == "per_token"
    launch(
        _act_quant_kernel, (row_blocks,) if per_token else (cdiv(n_cols, cfg.BLOCK_N), row_blocks),
        x2, q2, scale, scale if scale_ub is None else scale_ub, weights,
        x2.stride(0), q2.stride(0), s_row, s_group, w_row, w_col,
        n_rows, n_cols, limit, scale.shape[1] if shuffle else 0,
        GROUP_EPS, q_min, q_max, min_scale(q2.dtype) if per_token else 0.0,
        ACTIVATION=activation, MODE=scaling, HAS_UB=scale_ub is not None, LOOPED=per_token and cfg.LOOPED,
        EVEN=n_rows % cfg.BLOCK_M == 0 and n_cols % cfg.BLOCK_N == 0,
        INT64=_needs_int64(n_rows, n_cols, cfg, max(x2.stride(0), q2.stride(0), s_row, w_row), s_group + w_col)
        or (shuffle and scale.numel() >= 2**31),
        SOFT_ROUND=_soft_round(q2.dtype, q2.device) if scaling != "none" else False, BLOCK_M=cfg.BLOCK_M, BLOCK_N=cfg.BLOCK_N,
        GROUP=group_size, ROUND_Y=round_y, CLAMP=limit > 0,
        WEIGHTS="" if weights is None else "row" if weights.shape[1] == 1 else "full", UE8M0=ue8m0, SHUFFLE=shuffle,
        num_warps=cfg.num_warps,
    )


def _rows(op: str, name: str, x: torch.Tensor, q: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    return rows_view(op, name, x, writable=False), rows_view(op, "out", q, writable=True)


# ---------------------------------------------------------------------------
# public ops


@public_op(no_grad=_NO_GRAD)
def act_mul_and_fp8_group_quant(x: torch.Tensor, activation: Activation, group_size: int,
                                dtype_quant: torch.dtype | None = None, column_major_scales: bool = False, *,
                                config: QuantLaunchConfig | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """``y = act(x[..., :d]) * x[..., d:]`` quantized per group of ``group_size`` (a power
    of 2) columns of a row, each with scale ``max(amax, 1e-10) / q_max``. Returns
    ``(q, scales)``: q (*x.shape[:-1], d) of ``dtype_quant``, scales fp32
    (*x.shape[:-1], ceil(d / group_size)) (a last group may be partial), column-major
    (stride 1 along the rows) with ``column_major_scales`` for 2-D x. A NaN in a group of y
    makes that group's scale NaN and its values NaN (fp8) or 0 (int8). ``config`` pins a
    launch (tests, tuning)."""
    op = "act_mul_and_fp8_group_quant"
    d = _check_input(op, "x", x, activation)
    dtype = _q_dtype(op, dtype_quant, x)
    group_size, _ = _check_group(op, group_size, GROUP_EPS)
    column_major_scales = check_bool(op, "column_major_scales", column_major_scales)
    if config is not None and config.BLOCK_N % group_size:
        raise ValueError(f"{op}: config's BLOCK_N must be a multiple of group_size {group_size}, got {config.BLOCK_N}")
    n_groups = cdiv(d, group_size)
    if column_major_scales:
        if x.dim() != 2:
            raise ValueError(f"{op}: column_major_scales needs a 2-D x, got shape {tuple(x.shape)}")
        scales = torch.empty((n_groups, x.shape[0]), dtype=torch.float32, device=x.device).t()
    else:
        scales = torch.empty((*x.shape[:-1], n_groups), dtype=torch.float32, device=x.device)
    q = torch.empty((*x.shape[:-1], d), dtype=dtype, device=x.device)
    if debug_on():
        log_call(op, x=x, activation=activation, group_size=group_size, dtype_quant=dtype,
                 column_major_scales=column_major_scales)
    if q.numel() == 0:
        return q, scales
    _launch_act_quant(*_rows(op, "x", x, q), scales.view(-1, n_groups), None, activation, "group", group_size,
                      config=config)
    return q, scales


@public_op(no_grad=_NO_GRAD)
def act_mul_and_fp8_quant(x: torch.Tensor, activation: Activation, scale: torch.Tensor | None = None,
                          dtype_quant: torch.dtype | None = None, scale_ub: torch.Tensor | None = None, *,
                          config: QuantLaunchConfig | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """``y = act(x[..., :d]) * x[..., d:]`` quantized to q (*x.shape[:-1], d) of
    ``dtype_quant``. ``scale`` given (one fp32 element): static, ``q = y / scale``,
    returns ``(q, scale)``. Else dynamic per token: a scale per row,
    ``max(min(amax, scale_ub) / q_max, 1 / (q_max * 512))``, returned as fp32
    (*x.shape[:-1], 1); a NaN in a row of y makes that row's scale NaN and its values NaN
    (fp8) or 0 (int8). ``config`` pins a launch (tests, tuning)."""
    op = "act_mul_and_fp8_quant"
    d = _check_input(op, "x", x, activation)
    dtype = _q_dtype(op, dtype_quant, x)
    if scale is not None:
        _check_scale(op, "scale", scale, 1, x, "x")
        if scale_ub is not None:
            raise ValueError(f"{op}: scale_ub bounds dynamic per-token scales; it cannot go with a static scale")
    elif scale_ub is not None:
        _check_scale(op, "scale_ub", scale_ub, 1, x, "x")
    if debug_on():
        log_call(op, x=x, activation=activation, scale=scale, dtype_quant=dtype, scale_ub=scale_ub)
    q = torch.empty((*x.shape[:-1], d), dtype=dtype, device=x.device)
    if scale is not None:
        if q.numel():
            _launch_act_quant(*_rows(op, "x", x, q), scale.reshape(1), None, activation, "static", 1, config=config)
        return q, scale
    scales = torch.empty((*x.shape[:-1], 1), dtype=torch.float32, device=x.device)
    if q.numel():
        ub = None if scale_ub is None else scale_ub.reshape(1)
        _launch_act_quant(*_rows(op, "x", x, q), scales.view(-1), ub, activation, "per_token", 1, config=config)
    elif scales.numel():  # rows of no columns: the floor
        scales.fill_(min_scale(dtype))
    return q, scales


@public_op(mutates=("out",), no_grad=_NO_GRAD)
def silu_and_mul_quant(out: torch.Tensor, input: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """vLLM's fused SwiGLU + static quantization: ``out = silu(input[..., :d]) * input[..., d:]``
    quantized with ``scale`` (one fp32 element) to out's dtype. Returns ``out``."""
    op = "silu_and_mul_quant"
    d = _check_input(op, "input", input, "silu")
    _check_q(op, out, input, ("out", "input"), shape=(*input.shape[:-1], d))
    _check_scale(op, "scale", scale, 1, input, "input")
    if debug_on():
        log_call(op, out=out, input=input, scale=scale)
    if out.numel():
        _launch_act_quant(*_rows(op, "input", input, out), scale.reshape(1), None, "silu", "static", 1)
    return out
