"""fp8 / int8 activation quantization on the Triton backend.

aiter's names, writing into caller-allocated outputs; the output's dtype picks the
format (float8_e4m3fn, float8_e4m3fnuz, float8_e5m2 or int8) and its range:

* ``static_per_tensor_quant_fp8_i8(qx, x_in, scale_in)``: ``qx = x_in / scale_in``;
* ``dynamic_per_tensor_quant_fp8_i8(qx, x_in, scale_out)``: the scale from the
  tensor's amax, written (the caller need not zero it; deterministic);
* ``dynamic_per_token_quant_fp8_i8(qx, x_in, scale_out, scale_ub=None)``: a scale per
  row (every dim but the last), its amax capped at ``scale_ub`` when given;
* ``per_token_group_quant(qx, x_in, scale_out, group_size, eps)``: a scale per
  ``group_size`` columns of a row (DeepSeek-style), ``scale_out`` in any layout
  (column-major for GEMMs that want it).

Asymmetric int8 (vLLM's zero-point form; int8 ``qx``, its own rounding, below):
``static_per_tensor_int8_azp_quant(qx, x_in, scale_in, azp_in)`` and
``dynamic_per_token_int8_azp_quant(qx, x_in, scale_out, azp_out)``: ``qx = sat8(rint(x /
scale) + azp)``, per row ``scale = (max - min) / 255``, ``azp = rint(-128 - min / scale)``.

And vLLM's allocating forms, returning ``(q, scale)``: :func:`scaled_fp8_quant`,
:func:`per_token_group_quant_fp8`, :func:`per_token_group_quant_int8`.

Semantics (all ops): scales are fp32, ``amax / q_max``, where ``q_max`` is the output
dtype's largest value (448 for e4m3fn, 240 for e4m3fnuz, 57344 for e5m2, 127 for int8);
a dynamic scale is never below ``1 / (q_max * 512)`` (per tensor, per token) or
``eps / q_max`` (groups), so all-zero rows quantize to zeros with a finite scale.
Values are ``x * (1 / scale)`` saturated to the dtype's range (never inf), int8
rounded to nearest even. Inputs: float32 / float16 / bfloat16 of any rank and width,
unit stride in the last dim, rows of any stride.

NaN and inf, as the native reference: a NaN in the input makes its dynamic scale NaN
(per tensor: the tensor's; per token: its row's only; per group: its group's only) and
every value under that scale NaN. fp8 (e4m3fn, e4m3fnuz, e5m2) writes NaN as its NaN
code; int8 has none and writes 0 (the NaN scale keeps the row marked, and dequantizes
to NaN). An inf makes its dynamic scale inf: its row quantizes to 0, the inf itself to
NaN (inf * 0). Under a static scale an inf saturates, a NaN is NaN in fp8 and 0 in int8.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import torch

from aiter_lite import envs
from aiter_lite.ops.triton._triton_kernels.quant.quant import (
    _amax_scale_kernel,
    _dynamic_per_tensor_kernel,
    _group_quant_kernel,
    _int8_azp_quant_kernel,
    _per_token_quant_kernel,
    _per_token_split_kernel,
    _static_quant_kernel,
)
from aiter_lite.ops.triton.quant.dtypes import check_quant_dtype_supported
from aiter_lite.spec.device import INTERPRETER, DeviceProfile, device_profile
from aiter_lite.spec.quant import (
    GROUP_EPS,
    QUANT_DTYPES,
    get_fp8_e4m3_dtype,
    min_scale,
    quant_range,
)
from aiter_lite.utils.checks import (
    check_bool,
    check_int,
    check_real,
    TRITON_INTERPRET,
    check_row_input,
    check_same_device,
    check_unit_last_stride,
    rows_view,
)
from aiter_lite.utils.fast_launch import launch
from aiter_lite.utils.launch import cdiv, grid_sms, next_power_of_2, split_row_slots, stream_buffer
from aiter_lite.utils.launcher import launcher
from aiter_lite.utils.logger import debug_on, log_call
from aiter_lite.utils.registry import public_op

# why the public ops here refuse a call autograd would record (utils.registry.public_op)
_NO_GRAD = "its outputs are quantized values and scales"

__all__ = [
    "static_per_tensor_quant_fp8_i8",
    "dynamic_per_tensor_quant_fp8_i8",
    "dynamic_per_token_quant_fp8_i8",
    "per_token_group_quant",
    "static_per_tensor_int8_azp_quant",
    "dynamic_per_token_int8_azp_quant",
    "scaled_fp8_quant",
    "per_token_group_quant_fp8",
    "per_token_group_quant_int8",
    "QuantLaunchConfig",
    "per_token_launch_config",
    "dynamic_per_tensor_launch_config",
    "static_launch_config",
]

_MAX_GRID_Y = 65535
# Dynamic per tensor in one launch: tiles of up to _ONE_LAUNCH_TILE elements held in
# registers (sm_90: 94 registers at 8192 with 8 warps, so two programs fit an SM with
# room to spare), at most _ONE_LAUNCH_PER_SM programs an SM, all resident at once.
_ONE_LAUNCH_TILE = 8192
_ONE_LAUNCH_MIN_TILE = 2048
_ONE_LAUNCH_PER_SM = 2


@dataclass(frozen=True)
class QuantLaunchConfig:
    BLOCK_M: int  # rows per program
    BLOCK_N: int  # columns per step: the whole row unless LOOPED
    num_warps: int
    LOOPED: bool = False
    SPLIT: bool = False  # per token: a row over programs of BLOCK_N columns each, waiting for each other


# Measured on an H200 (bf16 to e4m3fn, 2^26 elements; % of a bf16 copy):
# * per token: a row in registers at 32 elements a lane up to _MAX_ROW_IN_REGS (8192 with
#   8 warps 92.7%, 16384 with 16 warps 84.7%, 32768 with 32 warps 75.4%, against 74-77%
#   looped); wider rows looped in _LOOP_BLOCK chunks, 1024 lanes (1024 x 65536: 73.8%
#   against 56% for 8192-wide chunks at 8 warps), read twice (amax, then quantize) - the
#   second read mostly from L2. Short rows several to a program up to a _TILE-element tile.
#   Rows wider than _MAX_SPLIT_FROM, from one wave of rows up, split over _SPLIT_SEG-wide
#   programs that exchange their amax and wait for each other (read once): 512 x 131072
#   69.0 us (70.7%) against 86.6 looped, 256 x 262144 72.5 (67.3%) against 87.4, 4096 x
#   151936 572 (79.1%) against 724; 16384-wide segments lose (37-62%: fewer programs
#   resident), and so do 64 rows (38 against 20 us); at 65536 the split only ties.
# * static: tiles of _STATIC_TILE elements, 16 a lane, at most 2048 wide (2 x 2048 with 8
#   warps: 92.9% at 8192 x 8192, 93.3% at 2048 x 32768; 4 x 1024: 90.4% at 65536 x 1024,
#   against 86-87% for the activation kernels' 2048-element tiles).
# * groups: 32 elements a lane, _GROUP_TILE elements a program (group 128: 8 groups, one
#   warp, 88.1%; group 64: 16 groups, 87.6%; 4096-element programs: 80-86%).
_TILE = 4096
_MAX_ROW_IN_REGS = 32768
_LOOP_BLOCK = 16384
_MAX_SPLIT_FROM = 65536
_SPLIT_SEG = 8192
_PER_LANE = 32
_STATIC_TILE = 4096
_STATIC_MAX_BLOCK_N = 2048
# Static tiles take 8 elements a lane (8 warps for 2048 or 4096; 256 x 4096: 2.0 us a call
# against 2.2 at 16); inputs too small for two programs an SM at a row a program, 1024
# columns at 4 a lane (1 x 4096: 1.44 us against 1.68 for 2048 at 16 a lane, 16 x 4096:
# 1.54 against 1.78; kernel time in a CUDA graph, H200).
_STATIC_PER_LANE = 8
_STATIC_SMALL_BLOCK_N = 1024
_STATIC_SMALL_PER_LANE = 4
_GROUP_TILE = 1024
# The looped dynamic per-tensor amax: 4 x 1024 tiles, 4 warps, 8 programs an SM
# (4096 x 7168: 24.2 us against 32.5 for 2 x 2048 at 4 an SM).
_AMAX_BLOCK = (4, 1024, 4)
_AMAX_PROGRAMS_PER_SM = 8


def _lane_warps(tile: int, profile: DeviceProfile) -> int:
    """Warps for a tile held at _PER_LANE elements a lane (4 at least, a 1024-lane program at most)."""
    return profile.warps_for(tile, _PER_LANE)


@functools.lru_cache(maxsize=1024)
def per_token_launch_config(n_rows: int, n_cols: int, profile: DeviceProfile = INTERPRETER) -> QuantLaunchConfig:
    """Tile and warps of a per-token launch over (n_rows, n_cols): a row (several short
    ones) per program, halved until the grid has two programs per SM; rows wider than
    ``_MAX_ROW_IN_REGS`` looped, or (wider than ``_MAX_SPLIT_FROM``, a wave of rows or
    more, every segment of a row resident at once) split."""
    row = next_power_of_2(max(n_cols, 1))
    sms = grid_sms(profile, 1)
    if row > _MAX_SPLIT_FROM and n_rows >= sms and cdiv(n_cols, _SPLIT_SEG) <= sms:
        return QuantLaunchConfig(1, _SPLIT_SEG, _lane_warps(_SPLIT_SEG, profile), SPLIT=True)
    if row > _MAX_ROW_IN_REGS:
        return QuantLaunchConfig(1, _LOOP_BLOCK, profile.max_warps, LOOPED=True)
    block_m = min(max(_TILE // row, 1), next_power_of_2(max(n_rows, 1)))
    while block_m > 1 and cdiv(n_rows, block_m) < 2 * sms:
        block_m //= 2
    return QuantLaunchConfig(block_m, row, max(profile.row_warps(block_m * row), _lane_warps(block_m * row, profile)))


@functools.lru_cache(maxsize=1024)
def azp_launch_config(n_rows: int, n_cols: int, profile: DeviceProfile = INTERPRETER) -> QuantLaunchConfig:
    """The per-token tile for the int8 zero-point quant, on NVIDIA with fewer warps where its
    row is in registers and the grid fills the GPU twice over: 64 elements a lane. Its
    min, max, rounding and saturation load the integer pipe, and more elements a lane
    overlap more. On an H200 (bf16, eager, with the kernel's one-conversion rounding):
    16384 x 14336 182.1 us at 8 warps (90.5% of copy), 188.5 at 4, 208.6 at 16, 251.6 at 2;
    16384 x 8192 94.4 at 4 (99.8%), 100.3 at 8; 65536 x 4096 185.5 at 2 (101.6%), 191.2
    at 4; 4096 x 14336 50.5 at 8 (81.7%), 53.2 at 4, 56.9 at 16. Fewer rows keep the
    per-token warps (more lanes on a few rows), and so does AMD (64 elements a lane of a
    wavefront spill there)."""
    cfg = per_token_launch_config(n_rows, n_cols, profile)
    if (cfg.LOOPED or cfg.SPLIT or profile.warp_size != 32
            or cdiv(n_rows, cfg.BLOCK_M) < 2 * grid_sms(profile, 1)):
        return cfg
    return QuantLaunchConfig(cfg.BLOCK_M, cfg.BLOCK_N, profile.warps_for(cfg.BLOCK_M * cfg.BLOCK_N, 64, lo=1))


@functools.lru_cache(maxsize=1024)
def static_launch_config(n_rows: int, n_cols: int, profile: DeviceProfile = INTERPRETER) -> QuantLaunchConfig:
    """Tiles of a static per-tensor launch: columns in the widest power-of-2 block up to
    _STATIC_MAX_BLOCK_N that divides the width (no masked half-tiles at 7168), rows
    filling _STATIC_TILE; on a GPU shrunk toward two programs per SM for small inputs,
    and where a row a program still leaves fewer, columns narrowed to _STATIC_SMALL_BLOCK_N
    at _STATIC_SMALL_PER_LANE elements a lane (more programs, less to wait for in each)."""
    block_n = min(next_power_of_2(max(n_cols, 1)), _STATIC_MAX_BLOCK_N)
    while block_n > 256 and n_cols % block_n:
        block_n //= 2
    if n_cols % block_n:
        block_n = min(next_power_of_2(max(n_cols, 1)), _STATIC_MAX_BLOCK_N)
    block_m = min(max(_STATIC_TILE // block_n, 1), next_power_of_2(max(n_rows, 1)))
    want = 2 * grid_sms(profile, 1)
    tiles = lambda: cdiv(n_rows, block_m) * cdiv(n_cols, block_n)  # noqa: E731
    while block_m > 1 and tiles() < want:
        block_m //= 2
    per_lane = _STATIC_PER_LANE
    if tiles() < want:
        block_n, per_lane = min(block_n, _STATIC_SMALL_BLOCK_N), _STATIC_SMALL_PER_LANE
    return QuantLaunchConfig(block_m, block_n, profile.warps_for(block_m * block_n, per_lane, hi=8))


# ---------------------------------------------------------------------------
# checks


def _check_q(op: str, qx, x_in: torch.Tensor, names: tuple[str, str] = ("qx", "x_in"), shape=None) -> None:
    """The quantized output ``qx``: a quant dtype this device stores, x_in's shape (or
    ``shape``) and device, unit last stride; ``names`` are the caller's for both."""
    q_name, x_name = names
    if not isinstance(qx, torch.Tensor):
        raise TypeError(f"{op}: {q_name} must be a torch.Tensor, got {type(qx).__name__}")
    if qx.dtype not in QUANT_DTYPES:
        dtypes = ", ".join(str(d) for d in QUANT_DTYPES)
        raise TypeError(f"{op}: {q_name} must be one of {dtypes}, got {qx.dtype}")
    check_same_device(op, q_name, qx, x_name, x_in)
    check_quant_dtype_supported(op, q_name, qx.dtype, qx.device)
    want = tuple(x_in.shape) if shape is None else tuple(shape)
    if tuple(qx.shape) != want:
        raise ValueError(f"{op}: {q_name} must have shape {want} for {x_name} {tuple(x_in.shape)}, "
                         f"got {tuple(qx.shape)}")
    check_unit_last_stride(op, q_name, qx)


def _check_scale(op: str, name: str, scale, numel: int, x_in: torch.Tensor, x_name: str = "x_in") -> None:
    if not isinstance(scale, torch.Tensor):
        raise TypeError(f"{op}: {name} must be a torch.Tensor, got {type(scale).__name__}")
    if scale.dtype != torch.float32:
        raise TypeError(f"{op}: {name} must be float32, got {scale.dtype}")
    if scale.numel() != numel:
        what = "one element (a per-tensor scale)" if numel == 1 else f"{numel} elements"
        raise ValueError(f"{op}: {name} must have {what}, got shape {tuple(scale.shape)}")
    check_same_device(op, name, scale, x_name, x_in)


def _check_group(op: str, group_size, eps) -> tuple[int, float]:
    group_size = check_int(op, "group_size", group_size, 1, 8192)
    if group_size & (group_size - 1):
        raise ValueError(f"{op}: group_size must be a power of 2 from 1 to 8192, got {group_size}")
    return group_size, check_real(op, "eps", eps, positive=True)


def _check_input(op: str, x_in, name: str = "x_in") -> None:
    check_row_input(op, name, x_in)


def _check_per_tensor(op: str, qx, x_in, scale, names: tuple[str, str, str]) -> None:
    q_name, x_name, s_name = names
    _check_input(op, x_in, x_name)
    _check_q(op, qx, x_in, (q_name, x_name))
    _check_scale(op, s_name, scale, 1, x_in, x_name)
    if debug_on():
        log_call(op, **{q_name: qx, x_name: x_in, s_name: scale})


def _rows(op: str, qx: torch.Tensor, x_in: torch.Tensor, names: tuple[str, ...]) -> tuple[torch.Tensor, torch.Tensor]:
    return rows_view(op, names[1], x_in, writable=False), rows_view(op, names[0], qx, writable=True)


# ---------------------------------------------------------------------------
# launches (torch.ops.aiter_lite custom ops under torch.compile)


def _soft_round(dtype: torch.dtype, device: torch.device) -> int:
    """The quantize kernels' other rounding (``_quantize``'s SOFT_ROUND): fp8 rounded in fp32
    before the conversion under the interpreter only (its conversion mis-rounds; the GPUs'
    rounds to nearest even itself); int8 truncated toward zero where
    ``AITER_INT8_ROUNDING=truncate`` (aiter's bits), else on an NVIDIA ``device`` 2: rounded
    to nearest by one saturating conversion (the same values, fewer instructions)."""
    if dtype.is_floating_point:
        return TRITON_INTERPRET
    if envs.int8_truncates():
        return 1
    return 2 if device_profile(device).device_math == 2 else 0


@launcher(mutates=("q2",))
def _launch_static_quant(x2: torch.Tensor, q2: torch.Tensor, scale: torch.Tensor,
                         config: QuantLaunchConfig | None = None, group_m: int = 0, group_n: int = 0) -> None:
    """``q2 = x2 / scale`` (one element) over 2-D views; rows past grid axis 1's 65535
    blocks in further launches. ``group_m`` > 0: ``scale`` a 2-D grid, a scale per
    (group_m, group_n) block (vLLM's per-token, per-channel and block static scales)."""
    n_rows, n_cols = x2.shape
    grouped = group_m > 0
    s_strides = tuple(scale.stride()) if grouped else (0, 0)
    cfg = config or static_launch_config(n_rows, n_cols, device_profile(x2.device))
    row_blocks, col_blocks = cdiv(n_rows, cfg.BLOCK_M), cdiv(n_cols, cfg.BLOCK_N)
    q_min, q_max = quant_range(q2.dtype)
    for start in range(0, row_blocks, _MAX_GRID_Y):  # grid axis 1 stops at 65535
        if row_blocks <= _MAX_GRID_Y:  # one launch: no views to make
            xs, qs, n = x2, q2, n_rows
        else:
            rows = slice(start * cfg.BLOCK_M, min((start + _MAX_GRID_Y) * cfg.BLOCK_M, n_rows))
            xs, qs = x2[rows], q2[rows]
            n = xs.shape[0]
            if grouped and rows.start % group_m:
                raise ValueError(f"static quantization: {n_rows} rows in groups of {group_m} need one launch per "
                                 f"{_MAX_GRID_Y * cfg.BLOCK_M} rows, which a group would straddle")
        ss = scale[rows.start // group_m:] if grouped and row_blocks > _MAX_GRID_Y else scale
        launch(
            _static_quant_kernel, (col_blocks, cdiv(n, cfg.BLOCK_M)),
            xs, qs, ss, xs.stride(0), qs.stride(0), *s_strides, max(group_m, 1), max(group_n, 1), n, n_cols,
            q_min, q_max, GROUPED=grouped,
            EVEN=n % cfg.BLOCK_M == 0 and n_cols % cfg.BLOCK_N == 0,
            INT64=n * max(xs.stride(0), qs.stride(0)) + cfg.BLOCK_M * xs.stride(0) >= 2**31,
            SOFT_ROUND=_soft_round(q2.dtype, q2.device),
            BLOCK_M=cfg.BLOCK_M, BLOCK_N=cfg.BLOCK_N, num_warps=cfg.num_warps,
        )


@functools.lru_cache(maxsize=1024)
def dynamic_per_tensor_launch_config(n_rows: int, n_cols: int,
                                     profile: DeviceProfile = INTERPRETER) -> QuantLaunchConfig:
    """One launch (the tensor in registers, a tile a program, every program resident)
    where the tiles fit ``_ONE_LAUNCH_PER_SM`` programs an SM, tiles shrunk toward a
    program per SM; else LOOPED: an amax launch, then the static one (x read twice)."""
    block_n = min(next_power_of_2(max(n_cols, 1)), _ONE_LAUNCH_TILE)
    block_m = min(max(_ONE_LAUNCH_TILE // block_n, 1), next_power_of_2(max(n_rows, 1)))
    sms = grid_sms(profile, 1)
    tiles = lambda: cdiv(n_rows, block_m) * cdiv(n_cols, block_n)  # noqa: E731
    while block_m * block_n > _ONE_LAUNCH_MIN_TILE and tiles() < sms:
        if block_m > 1:
            block_m //= 2
        else:
            block_n //= 2
    if tiles() > _ONE_LAUNCH_PER_SM * sms:
        return QuantLaunchConfig(1, 0, 8, LOOPED=True)
    return QuantLaunchConfig(block_m, block_n, _lane_warps(block_m * block_n, profile))


@launcher(mutates=("q2", "scale"))
def _launch_dynamic_per_tensor(x2: torch.Tensor, q2: torch.Tensor, scale: torch.Tensor,
                               config: QuantLaunchConfig | None = None) -> None:
    """The tensor's scale into ``scale`` (one element), then q2; in one launch, or (LOOPED)
    an amax launch and the static one."""
    n_rows, n_cols = x2.shape
    cfg = config or dynamic_per_tensor_launch_config(n_rows, n_cols, device_profile(x2.device))
    q_min, q_max = quant_range(q2.dtype)
    # three int32 words the kernels leave zeroed when they finish
    work = stream_buffer("quant_per_tensor", 3, torch.int32, x2.device, zeroed=True)
    if not cfg.LOOPED:
        tiles = cdiv(n_rows, cfg.BLOCK_M) * cdiv(n_cols, cfg.BLOCK_N)
        stride = max(x2.stride(0), q2.stride(0))
        for phase in (1, 2) if TRITON_INTERPRET else (0,):  # the interpreter runs programs one at a time
            launch(
                _dynamic_per_tensor_kernel, (tiles,),
                x2, q2, work, scale, x2.stride(0), q2.stride(0), n_rows, n_cols, q_min, q_max, min_scale(q2.dtype),
                PHASE=phase, EVEN=n_rows % cfg.BLOCK_M == 0 and n_cols % cfg.BLOCK_N == 0,
                INT64=(n_rows + cfg.BLOCK_M) * stride >= 2**31, SOFT_ROUND=_soft_round(q2.dtype, q2.device),
                BLOCK_M=cfg.BLOCK_M, BLOCK_N=cfg.BLOCK_N, num_warps=cfg.num_warps,
            )
        return
    # A program per column block and row stripe, looping down the rows: a few hundred
    # programs, so a few hundred atomics on the one amax word.
    block_m, block_n, warps = _AMAX_BLOCK
    block_n = min(next_power_of_2(n_cols), block_n)
    block_m = min(max(block_m * _AMAX_BLOCK[1] // block_n, 1), next_power_of_2(n_rows))
    col_blocks = cdiv(n_cols, block_n)
    stripes = min(cdiv(n_rows, block_m), max(_AMAX_PROGRAMS_PER_SM * grid_sms(device_profile(x2.device), 1) // col_blocks, 1),
                  _MAX_GRID_Y)
    launch(
        _amax_scale_kernel, (col_blocks, stripes),
        x2, work, scale, x2.stride(0), n_rows, n_cols, q_max, min_scale(q2.dtype),
        EVEN=n_rows % block_m == 0 and n_cols % block_n == 0,
        INT64=(n_rows + block_m) * x2.stride(0) >= 2**31, BLOCK_M=block_m, BLOCK_N=block_n, num_warps=warps,
    )
    _launch_static_quant(x2, q2, scale)


@launcher(mutates=("q2", "scale"))
def _launch_per_token_quant(x2: torch.Tensor, q2: torch.Tensor, scale: torch.Tensor, scale_ub: torch.Tensor | None,
                            config: QuantLaunchConfig | None = None) -> None:
    """A scale per row of x2 into ``scale`` ((M,)), then q2; rows in registers, looped, or
    split over programs (SPLIT)."""
    n_rows, n_cols = x2.shape
    cfg = config or per_token_launch_config(n_rows, n_cols, device_profile(x2.device))
    if not (cfg.SPLIT or cfg.LOOPED) and cfg.BLOCK_N < n_cols:
        raise ValueError(f"dynamic_per_token_quant_fp8_i8: a launch that neither loops nor splits rows needs "
                         f"BLOCK_N >= the {n_cols} columns; got {cfg}")
    q_min, q_max = quant_range(q2.dtype)
    if cfg.SPLIT:
        n_segs, slots, phases = split_row_slots("dynamic_per_token_quant_fp8_i8", n_rows, n_cols, cfg.BLOCK_N,
                                                x2.device)
        for phase in phases:
            launch(
                _per_token_split_kernel, (n_rows * n_segs,),
                x2, q2, scale, scale if scale_ub is None else scale_ub, slots, x2.stride(0), q2.stride(0),
                scale.stride(0), n_rows, n_cols, n_segs, q_min, q_max, min_scale(q2.dtype),
                HAS_UB=scale_ub is not None, PHASE=phase, EVEN=n_cols % cfg.BLOCK_N == 0,
                SOFT_ROUND=_soft_round(q2.dtype, q2.device), BLOCK_N=cfg.BLOCK_N, BLOCK_S=next_power_of_2(n_segs),
                num_warps=cfg.num_warps,
            )
        return
    launch(
        _per_token_quant_kernel, (cdiv(n_rows, cfg.BLOCK_M),),
        x2, q2, scale, scale if scale_ub is None else scale_ub, x2.stride(0), q2.stride(0), scale.stride(0),
        n_rows, n_cols, q_min, q_max, min_scale(q2.dtype),
        HAS_UB=scale_ub is not None, LOOPED=cfg.LOOPED, SOFT_ROUND=_soft_round(q2.dtype, q2.device),
        EVEN=n_rows % cfg.BLOCK_M == 0 and n_cols % cfg.BLOCK_N == 0,
        BLOCK_M=cfg.BLOCK_M, BLOCK_N=cfg.BLOCK_N, num_warps=cfg.num_warps,
    )


@launcher(mutates=("q2", "scale", "azp"))
def _launch_int8_azp_quant(x2: torch.Tensor, q2: torch.Tensor, scale: torch.Tensor, azp: torch.Tensor,
                           dynamic: bool, config: QuantLaunchConfig | None = None) -> None:
    """Asymmetric int8 of x2 into q2: by the one-element ``scale`` / ``azp``, or (``dynamic``)
    a scale and zero point per row written to them ((M,) each). The per-token tiles; rows
    the per-token launch would split are looped (the min and max need a second exchange)."""
    n_rows, n_cols = x2.shape
    profile = device_profile(x2.device)
    cfg = config or (azp_launch_config if dynamic else per_token_launch_config)(n_rows, n_cols, profile)
    if cfg.SPLIT:
        cfg = QuantLaunchConfig(1, _LOOP_BLOCK, profile.max_warps, LOOPED=True)
    if not cfg.LOOPED and cfg.BLOCK_N < n_cols:
        raise ValueError(f"dynamic_per_token_int8_azp_quant: a launch that does not loop rows needs BLOCK_N >= the "
                         f"{n_cols} columns; got {cfg}")
    launch(
        _int8_azp_quant_kernel, (cdiv(n_rows, cfg.BLOCK_M),),
        x2, q2, scale, azp, x2.stride(0), q2.stride(0), scale.stride(0), azp.stride(0), n_rows, n_cols,
        DYNAMIC=dynamic, LOOPED=cfg.LOOPED, EVEN=n_rows % cfg.BLOCK_M == 0 and n_cols % cfg.BLOCK_N == 0,
        BLOCK_M=cfg.BLOCK_M, BLOCK_N=cfg.BLOCK_N, NATIVE=profile.device_math,
        num_warps=cfg.num_warps,
    )


@functools.lru_cache(maxsize=1024)
def group_launch_config(n_rows: int, n_cols: int, group_size: int,
                        profile: DeviceProfile = INTERPRETER) -> QuantLaunchConfig:
    """Groups per program (BLOCK_M; BLOCK_N is the group): ``_GROUP_TILE`` elements, 32 a lane."""
    block_g = min(max(_GROUP_TILE // group_size, 1), next_power_of_2(n_rows * cdiv(n_cols, group_size)))
    return QuantLaunchConfig(block_g, group_size, profile.warps_for(block_g * group_size, _PER_LANE, lo=1))


@launcher(mutates=("q2", "scale"))
def _launch_group_quant(x2: torch.Tensor, q2: torch.Tensor, scale: torch.Tensor, group_size: int, eps: float,
                        config: QuantLaunchConfig | None = None, ue8m0: bool = False) -> None:
    """A scale per ``group_size`` columns of a row into ``scale`` ((M, G), any strides), then q2.
    x2 (M, N), or (M, S, L): a row the S segments of L columns (unit stride within), N = S * L."""
    segmented = x2.dim() == 3
    seg_len = x2.shape[2] if segmented else 1
    stride_seg = x2.stride(1) if segmented else 0
    n_rows, n_cols = q2.shape
    n_groups = cdiv(n_cols, group_size)
    cfg = config or group_launch_config(n_rows, n_cols, group_size, device_profile(x2.device))
    block_g = cfg.BLOCK_M
    q_min, q_max = quant_range(q2.dtype)
    launch(
        _group_quant_kernel, (cdiv(n_rows * n_groups, block_g),),
        x2, q2, scale, x2.stride(0), q2.stride(0), scale.stride(0), scale.stride(1), stride_seg, seg_len,
        n_rows, n_cols, n_groups, eps, q_min, q_max,
        EVEN=n_cols % group_size == 0 and (n_rows * n_groups) % block_g == 0, SOFT_ROUND=_soft_round(q2.dtype, q2.device),
        SEG=0 if not segmented else 1 if seg_len % group_size == 0 else 2, UE8M0=ue8m0,
        BLOCK_G=block_g, GROUP=group_size, num_warps=cfg.num_warps,
    )


# ---------------------------------------------------------------------------
# aiter's names


# The checked bodies, each op's errors under its public name and its caller's argument names
# (q, x, scale).
_AITER = ("qx", "x_in", "scale_out")


def _static(op: str, qx, x_in, scale_in, names=("qx", "x_in", "scale_in")) -> torch.Tensor:
    _check_per_tensor(op, qx, x_in, scale_in, names)
    if x_in.numel():
        _launch_static_quant(*_rows(op, qx, x_in, names), scale_in if scale_in.dim() == 1 else scale_in.reshape(1))
    return qx


def _dynamic_per_tensor(op: str, qx, x_in, scale_out, config=None, names=_AITER) -> tuple[torch.Tensor, torch.Tensor]:
    _check_per_tensor(op, qx, x_in, scale_out, names)
    if x_in.numel():
        _launch_dynamic_per_tensor(*_rows(op, qx, x_in, names), _scale_vector(op, names[2], scale_out), config)
    else:  # no elements: the floor
        scale_out.fill_(min_scale(qx.dtype))
    return qx, scale_out


def _per_token(op: str, qx, x_in, scale_out, scale_ub, config=None, names=_AITER) -> tuple[torch.Tensor, torch.Tensor]:
    q_name, x_name, s_name = names
    _check_input(op, x_in, x_name)
    _check_q(op, qx, x_in, (q_name, x_name))
    _check_scale(op, s_name, scale_out, math.prod(x_in.shape[:-1]), x_in, x_name)
    if scale_ub is not None:
        _check_scale(op, "scale_ub", scale_ub, 1, x_in, x_name)
    if debug_on():
        log_call(op, **{q_name: qx, x_name: x_in, s_name: scale_out}, scale_ub=scale_ub)
    if x_in.numel():
        ub = None if scale_ub is None else scale_ub.reshape(1)
        _launch_per_token_quant(*_rows(op, qx, x_in, names), _scale_vector(op, s_name, scale_out), ub, config)
    elif scale_out.numel():  # rows of no columns: the floor
        scale_out.fill_(min_scale(qx.dtype))
    return qx, scale_out


def _group(op: str, qx, x_in, scale_out, group_size, eps, names=_AITER,
           ue8m0: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    q_name, x_name, s_name = names
    _check_input(op, x_in, x_name)
    _check_q(op, qx, x_in, (q_name, x_name))
    group_size, eps = _check_group(op, group_size, eps)
    n_groups = cdiv(x_in.shape[-1], group_size)
    want = (*x_in.shape[:-1], n_groups)
    if isinstance(scale_out, torch.Tensor) and tuple(scale_out.shape) != want:
        raise ValueError(f"{op}: {s_name} must have shape {want} for {x_name} {tuple(x_in.shape)} and group_size "
                         f"{group_size}, got {tuple(scale_out.shape)}")
    _check_scale(op, s_name, scale_out, math.prod(want), x_in, x_name)
    if debug_on():
        log_call(op, **{q_name: qx, x_name: x_in, s_name: scale_out}, group_size=group_size)
    if x_in.numel():
        n_rows = x_in.numel() // x_in.shape[-1]
        try:
            s2 = scale_out.view(n_rows, n_groups)
        except RuntimeError:
            raise ValueError(f"{op}: {s_name} with strides {tuple(scale_out.stride())} cannot be viewed as "
                             f"({n_rows}, {n_groups}); its leading dims must flatten") from None
        _launch_group_quant(*_rows(op, qx, x_in, names), s2, group_size, eps, None, ue8m0)
    return qx, scale_out


def _scale_vector(op: str, name: str, scale: torch.Tensor) -> torch.Tensor:
    """``scale`` as a 1-D view (written through)."""
    if scale.dim() == 1:
        return scale
    try:
        return scale.view(-1)
    except RuntimeError:
        raise ValueError(f"{op}: {name} with shape {tuple(scale.shape)} and strides {tuple(scale.stride())} "
                         "cannot be viewed as one vector; pass a contiguous tensor") from None


# ---------------------------------------------------------------------------
# aiter's names


@public_op(mutates=("qx",), no_grad=_NO_GRAD)
def static_per_tensor_quant_fp8_i8(qx: torch.Tensor, x_in: torch.Tensor, scale_in: torch.Tensor) -> torch.Tensor:
    """``qx = x_in / scale_in`` saturated to qx's dtype; ``scale_in`` one fp32 element. Returns ``qx``."""
    return _static("static_per_tensor_quant_fp8_i8", qx, x_in, scale_in)


@public_op(mutates=("qx", "scale_out"), no_grad=_NO_GRAD)
def dynamic_per_tensor_quant_fp8_i8(qx: torch.Tensor, x_in: torch.Tensor, scale_out: torch.Tensor, *,
                                    config: QuantLaunchConfig | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """The tensor's scale ``max(amax / q_max, 1 / (q_max * 512))`` written to ``scale_out``
    (one fp32 element, any prior content), then ``qx = x_in / scale``. Returns ``(qx, scale_out)``.
    A NaN anywhere makes the scale NaN and every value NaN (fp8) or 0 (int8).
    ``config`` pins a launch (tests, tuning; LOOPED: an amax launch then the static one)."""
    return _dynamic_per_tensor("dynamic_per_tensor_quant_fp8_i8", qx, x_in, scale_out, config)


@public_op(mutates=("qx", "scale_out"), no_grad=_NO_GRAD)
def dynamic_per_token_quant_fp8_i8(qx: torch.Tensor, x_in: torch.Tensor, scale_out: torch.Tensor,
                                   scale_ub: torch.Tensor | None = None, *,
                                   config: QuantLaunchConfig | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """A scale per row (every dim of x_in but the last) into ``scale_out`` (as many fp32
    elements as rows: (M,) or (M, 1)), ``max(min(amax, scale_ub) / q_max, 1 / (q_max * 512))``,
    then each row quantized with its own. Returns ``(qx, scale_out)``. A NaN in a row makes
    that row's scale NaN and its values NaN (fp8) or 0 (int8); other rows are unaffected.
    ``config`` pins a launch (tests, tuning)."""
    return _per_token("dynamic_per_token_quant_fp8_i8", qx, x_in, scale_out, scale_ub, config)


@public_op(mutates=("qx", "scale_out"), no_grad=_NO_GRAD)
def per_token_group_quant(qx: torch.Tensor, x_in: torch.Tensor, scale_out: torch.Tensor, group_size: int,
                          eps: float = GROUP_EPS) -> tuple[torch.Tensor, torch.Tensor]:
    """Each ``group_size`` columns of a row quantized with their own scale
    ``max(amax, eps) / q_max``; ``scale_out`` fp32 of shape (*x_in.shape[:-1], G) with
    G = ceil(width / group_size) (a last group may be partial), any strides (a
    column-major (M, G) view included). Returns ``(qx, scale_out)``. A NaN in a group makes
    that group's scale NaN and its values NaN (fp8) or 0 (int8), no other group's."""
    return _group("per_token_group_quant", qx, x_in, scale_out, group_size, eps)


def _check_azp(op: str, name: str, azp, numel: int, x_in: torch.Tensor, x_name: str) -> None:
    if not isinstance(azp, torch.Tensor):
        raise TypeError(f"{op}: {name} must be a torch.Tensor, got {type(azp).__name__}")
    if azp.dtype != torch.int32:
        raise TypeError(f"{op}: {name} must be int32, got {azp.dtype}")
    if azp.numel() != numel:
        what = "one element (a per-tensor zero point)" if numel == 1 else f"{numel} elements"
        raise ValueError(f"{op}: {name} must have {what}, got shape {tuple(azp.shape)}")
    check_same_device(op, name, azp, x_name, x_in)


def _int8_azp(op: str, qx, x_in, scale, azp, dynamic: bool, config=None,
              names=("qx", "x_in", "scale", "azp")) -> torch.Tensor:
    q_name, x_name, s_name, z_name = names
    _check_input(op, x_in, x_name)
    _check_q(op, qx, x_in, (q_name, x_name))
    if qx.dtype != torch.int8:
        raise TypeError(f"{op}: {q_name} must be int8 (a zero point is an int8 offset), got {qx.dtype}")
    n_rows = math.prod(x_in.shape[:-1]) if dynamic else 1
    _check_scale(op, s_name, scale, n_rows, x_in, x_name)
    _check_azp(op, z_name, azp, n_rows, x_in, x_name)
    if debug_on():
        log_call(op, **{q_name: qx, x_name: x_in, s_name: scale, z_name: azp})
    if x_in.numel():
        _launch_int8_azp_quant(*_rows(op, qx, x_in, names), _scale_vector(op, s_name, scale),
                               _scale_vector(op, z_name, azp), dynamic, config)
    elif dynamic and scale.numel():  # rows of no columns: vLLM's empty range
        scale.fill_(0.0)
        azp.fill_(-128)
    return qx


@public_op(mutates=("qx",), no_grad=_NO_GRAD)
def static_per_tensor_int8_azp_quant(qx: torch.Tensor, x_in: torch.Tensor, scale_in: torch.Tensor,
                                     azp_in: torch.Tensor) -> torch.Tensor:
    """Asymmetric int8 by one scale and zero point (vLLM's ``static_scaled_int8_quant`` with
    azp): ``qx = clamp(rint(x_in * (1 / scale_in)) + azp_in, -128, 127)``, rint ties to even,
    the product saturated to int32 first; a NaN gives ``azp_in``. ``scale_in`` one fp32
    element, ``azp_in`` one int32 element. Returns ``qx``."""
    return _int8_azp("static_per_tensor_int8_azp_quant", qx, x_in, scale_in, azp_in, False,
                     names=("qx", "x_in", "scale_in", "azp_in"))


@public_op(mutates=("qx", "scale_out", "azp_out"), no_grad=_NO_GRAD)
def dynamic_per_token_int8_azp_quant(qx: torch.Tensor, x_in: torch.Tensor, scale_out: torch.Tensor,
                                     azp_out: torch.Tensor, *, config: QuantLaunchConfig | None = None
                                     ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Asymmetric int8 per row (vLLM's ``dynamic_scaled_int8_quant`` with azp): a row's
    ``scale = (max - min) / 255`` (fp32, into ``scale_out``, one a row) and ``azp = rint(-128 -
    min / scale)`` (int32, into ``azp_out``), then ``qx`` as the static form. A constant row
    has scale 0 (vLLM's degenerate case: its values saturate). NaN is skipped by the min and
    max. Returns ``(qx, scale_out, azp_out)``; ``config`` pins a launch (tests, tuning)."""
    op = "dynamic_per_token_int8_azp_quant"
    _int8_azp(op, qx, x_in, scale_out, azp_out, True, config, names=("qx", "x_in", "scale_out", "azp_out"))
    return qx, scale_out, azp_out



# ---------------------------------------------------------------------------
# vLLM's allocating forms


def _quant_dtype(op: str, dtype: torch.dtype | None, name: str = "dtype", device=None) -> torch.dtype:
    """``dtype`` checked (``name``: the caller's argument), None: ``device``'s e4m3 (default
    the current GPU's)."""
    if dtype is None:
        return get_fp8_e4m3_dtype(device)
    if dtype not in QUANT_DTYPES:
        raise TypeError(f"{op}: {name} must be one of {', '.join(str(d) for d in QUANT_DTYPES)}, got {dtype}")
    return dtype


@public_op(buffers=("output",), no_grad=_NO_GRAD)
def scaled_fp8_quant(input: torch.Tensor, scale: torch.Tensor | None = None, scale_ub: torch.Tensor | None = None,
                     use_per_token_if_dynamic: bool = False, output: torch.Tensor | None = None,
                     dtype: torch.dtype | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """vLLM's ``scaled_fp8_quant``: static when ``scale`` is given, else dynamic per
    tensor, or per token (scales of shape (*input.shape[:-1], 1)) with
    ``use_per_token_if_dynamic``. ``dtype`` (default :func:`get_fp8_e4m3_dtype`) or
    ``output``'s dtype picks the format, int8 included. Returns ``(q, scale)``. A NaN makes
    its dynamic scale (the tensor's, or its row's) NaN and the values under it NaN (fp8) or
    0 (int8); under a static scale a NaN is NaN (fp8) or 0 (int8)."""
    op = "scaled_fp8_quant"
    _check_input(op, input, "input")
    use_per_token_if_dynamic = check_bool(op, "use_per_token_if_dynamic", use_per_token_if_dynamic)
    dtype = output.dtype if isinstance(output, torch.Tensor) and dtype is None else _quant_dtype(op, dtype)
    q = torch.empty(input.shape, dtype=dtype, device=input.device) if output is None else output
    names = ("output", "input", "scale")
    if scale is not None:
        if scale_ub is not None:
            raise ValueError(f"{op}: scale_ub bounds dynamic per-token scales; it cannot go with a static scale")
        return _static(op, q, input, scale, names), scale
    if use_per_token_if_dynamic:
        s = torch.empty((*input.shape[:-1], 1), dtype=torch.float32, device=input.device)
        return _per_token(op, q, input, s, scale_ub, names=names)
    if scale_ub is not None:
        raise ValueError(f"{op}: scale_ub bounds per-token scales; pass use_per_token_if_dynamic=True")
    return _dynamic_per_tensor(op, q, input, torch.empty(1, dtype=torch.float32, device=input.device), names=names)


@public_op(buffers=("out_q",), no_grad=_NO_GRAD)
def per_token_group_quant_fp8(x: torch.Tensor, group_size: int, eps: float = GROUP_EPS,
                              dtype: torch.dtype | None = None, column_major_scales: bool = False,
                              out_q: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """vLLM's ``per_token_group_quant_fp8``: ``(q, scales)``, scales (*x.shape[:-1], G)
    fp32, column-major (stride 1 along the rows) with ``column_major_scales`` for 2-D x. A NaN
    in a group makes that group's scale NaN and its values NaN (fp8) or 0 (int8)."""
    return _group_allocating("per_token_group_quant_fp8", x, group_size, eps, dtype, column_major_scales, out_q)


def _group_allocating(op: str, x, group_size, eps, dtype, column_major_scales=False, out_q=None):
    _check_input(op, x, "x")
    dtype = _quant_dtype(op, dtype)
    q = torch.empty(x.shape, dtype=dtype, device=x.device) if out_q is None else out_q
    group_size, eps = _check_group(op, group_size, eps)
    column_major_scales = check_bool(op, "column_major_scales", column_major_scales)
    n_groups = cdiv(x.shape[-1], group_size)
    if column_major_scales:
        if x.dim() != 2:
            raise ValueError(f"{op}: column_major_scales needs a 2-D x, got shape {tuple(x.shape)}")
        s = torch.empty((n_groups, x.shape[0]), dtype=torch.float32, device=x.device).t()
    else:
        s = torch.empty((*x.shape[:-1], n_groups), dtype=torch.float32, device=x.device)
    return _group(op, q, x, s, group_size, eps, ("out_q", "x", "scales"))


@public_op(no_grad=_NO_GRAD)
def per_token_group_quant_int8(x: torch.Tensor, group_size: int, eps: float = GROUP_EPS,
                               dtype: torch.dtype = torch.int8) -> tuple[torch.Tensor, torch.Tensor]:
    """vLLM's ``per_token_group_quant_int8``: ``(q, scales)`` with int8 values; a NaN in a
    group makes that group's scale NaN and its values 0 (int8 has no NaN)."""
    return _group_allocating("per_token_group_quant_int8", x, group_size, eps, dtype)


# aiter's MX / NV block formats at this path (aiter_lite defines them in quant.mx_quant)
from aiter_lite.ops.triton.quant.mx_quant import (  # noqa: E402,F401
    dynamic_mxfp4_quant,
    dynamic_mxfp8_quant,
    dynamic_nvfp4_quant,
)
