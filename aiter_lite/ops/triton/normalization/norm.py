"""The one wrapper behind every RMSNorm / LayerNorm name: checks, launch configs, launches, autograd.

``rmsnorm.py`` and ``layernorm.py`` hold the public (aiter / vLLM) names; each is a
short call into :func:`norm_fwd` or :class:`_NormFunction` here.

``casting_mode`` (RMSNorm) picks where the result is rounded, as Liger-Kernel's option of
that name: "gemma" computes in fp32 and rounds the output once (Hugging Face's
``GemmaRMSNorm``, and what LayerNorm does); "llama" rounds as ``LlamaRMSNorm``:
``y = round(w * round_x(x * rstd))``, the normalized value rounded to the normalized
tensor's dtype before the weight (in the fused-add forms the sum is normalized as stored
in residual_out, as Hugging Face adds the residual in the model's dtype). The two agree
on fp32 inputs. Llama's gradients treat its roundings as the identity (straight
through): dx is the usual fp32 formula, dweight sums ``dy * round_x(x * rstd)``, the
values the forward multiplied the weight by.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, replace

import torch

from aiter_lite.ops.triton._triton_kernels.normalization.norm import (
    _norm_bwd_kernel,
    _norm_bwd_reduce_kernel,
    _norm_bwd_row_sums_kernel,
    _norm_fwd_kernel,
    _norm_fwd_split_kernel,
)
from aiter_lite.spec.device import INTERPRETER, DeviceProfile, device_profile
from aiter_lite.spec.normalization import check_casting_mode
from aiter_lite.utils.aliases import lazy_aliases
from aiter_lite.utils.checks import (
    check_float_tensor,
    check_real,
    check_row_input,
    check_same_device,
    check_unit_last_stride,
    rows_view,
)
from aiter_lite.utils.fast_launch import launch
from aiter_lite.utils.launch import cdiv, grid_sms, next_power_of_2, split_row_slots
from aiter_lite.utils.launcher import launcher
from aiter_lite.utils.logger import debug_on, log_call


@dataclass(frozen=True)
class NormLaunchConfig:
    BLOCK_M: int  # rows per program step
    BLOCK_N: int  # columns per program step (>= n_cols unless LOOPED)
    num_warps: int
    LOOPED: bool  # the row does not fit one tile: loop over BLOCK_N-wide chunks
    PREFETCH: bool = False  # load the next row step (backward) / chunk (looped forward) before using this one
    EVICT: str = ""  # forward, in-register tiles: cache hint for the row loads
    W_FIRST: bool = False  # forward, in-register tiles: weight and bias loaded with the row, not after the sums
    STATIC: bool = False  # forward, looped: the row width compiled in (the whole loop unrolled; one build per width)
    SPLIT: bool = False  # forward: the row cut into BLOCK_N-wide segments, one program each, held in registers


@dataclass(frozen=True)
class NormBwdLaunchConfig:
    tile: NormLaunchConfig  # LOOPED tiles are BLOCK_N-wide column blocks of a BLOCK_M-row strip
    programs: int  # programs along rows (each writes a partial row of the weight / bias sums)


# Measured on an H200 (bf16 RMSNorm, M * N = 2^26, scripts/tune_norm.py):
# * forward, N <= 1024: 2048-element tiles with 4 warps, 1-3% ahead of 4096 / 8 warps;
#   N = 4096..8192: every tile within 1% (68-71 us, 94% of copy).
# * forward, a row in registers beats looping up to N = 16384: 69.8 vs 83.1 us at
#   16384 (8 warps, 64 elements per lane, no spills); at 32768 (74.5 us with 16 warps)
#   the 32-warp configs below win.
# * LayerNorm (no residual) at N = 512 wants 1024-element tiles with 2 warps (68.8 us
#   against 71.4 for 4096 / 4 warps; torch.compile picks 2 rows / 1 warp).
# * a looped row with the width compiled in beats a row in registers from 16384 (from
#   8192 for large LayerNorms): _STATIC_LOOPS.
# * decode (fewer programs than SMs; CUDA-graph replays, M = 1 / 16): 16 elements per
#   lane, up to 32 warps: RMSNorm 1 x 8192 1.97-2.06 us against 2.32 with 8 warps,
#   1 x 16384 2.39 against 2.51; fused add 1 x 16384 2.88 against 3.21. A fused add on
#   _DECODE_ADD_ROWS rows or more with 8192-element tiles takes 32 warps and plain loads:
#   RMSNorm 16 x 7168 / 8192 2.19 / 2.28 us against 2.31 / 2.40 (Liger 2.18 / 2.30),
#   LayerNorm 2.78 / 2.91 against 2.85 / 2.98; M = 1 and narrower rows keep the rule.
# * "evict_last" on the row loads: 68.0 / 68.8 us against 70.1 / 70.7 at 4096 / 8192
#   (fused add: 129.4-131.6 against 133.8-136.4 at every N up to 32768), but 77.0 against
#   71.2 at 16384 and 90.1 against 75.5 at 32768 without a residual.
# * looped rows: 16384-wide chunks with 16 warps, the first pass double-buffered:
#   81.1 / 100.9 / 106.3 us at 65536 / 131072 / 262144 against 82.9 / 102.7 / 109.5 for
#   8 warps unbuffered, 143.2 against 154.1 with a residual at 65536; 4096-wide chunks
#   take 107-154 us (more rows in flight push the second pass's re-read out of L2).
#   A persistent split (each program looping over row steps, exchanging statistics at
#   every step) measured slower still: 98-120 us; see _split_config for the one-step split.
# * without a residual, rows from 32768 up want 32 warps (16 elements per lane, as
#   torch.compile's picks): RMSNorm 72.7 us looped in 8192 chunks at 32768 against 75.8
#   in registers, 101.4 at 262144 against 105.6 (16384 chunks, double-buffered);
#   LayerNorm 108.2 at 262144 against 111.0. A persistent grid of fewer programs than
#   rows (so the rows in flight fit in L2 for the re-read) loses: 87-105 us at 65536 ..
#   262144 for 33..264 programs, the bandwidth of fewer SMs dropping faster than the
#   re-read gains.
_MAX_ROW_IN_REGS = 32768
_LOOP = NormLaunchConfig(1, 16384, 16, True, PREFETCH=True)
_LOOP_WIDE = NormLaunchConfig(1, 16384, 32, True, PREFETCH=True)

# Looped rows with the width compiled in (STATIC: every chunk's loads issued together), by
# (is_rms, residual, power-of-2 width), from one wave of rows up. Measured (bf16, M * N =
# 2^26 unless given): LayerNorm 8192 x 8192 69.2 us against 71.5 in registers (32768 x
# 8192: 255.3 against 258.3; 1024 x 5120 / 7168 / 8192: 10.2 / 13.3 / 14.2 against 12.8 /
# 15.1 / 16.1, 4096 x 5120 27.8 against 33.4); 4096 x 16384 69.6 against 77.4 in registers with 16 warps
# (32768 x 16384: 501.5 against 538.3; torch.compile 72.1 / 516); 2048 x 32768 72.7
# against 81.8 for a runtime loop four chunks to a step; 1024 x 65536 87.1 against 90.0;
# with a residual 4096 x 16384 131.8 against 134.3. RMSNorm 4096 x 16384 68.8 against 71.5
# (32768 x 16384: 503.5 against 511.5), 2048 x 32768 69.5 against 73.2. A runtime loop
# stays where it measured as fast: RMSNorm at 65536 (81.4 against 82.3) and every width
# from 131072 (static 95.9 / 105.9 against 86.6 / 92.0 split, LayerNorm 102.4 / 107.7
# against 92.7 / 104.7 looped); also RMSNorm 8192 and the fused add's RMSNorm.
_STATIC_LOOPS = {
    (False, False, 8192): NormLaunchConfig(1, 4096, 8, True, STATIC=True),
    (False, False, 16384): NormLaunchConfig(1, 4096, 16, True, STATIC=True),
    (False, True, 16384): NormLaunchConfig(1, 8192, 32, True, STATIC=True),
    (True, False, 16384): NormLaunchConfig(1, 8192, 16, True, STATIC=True),
    (True, False, 32768): NormLaunchConfig(1, 8192, 32, True, STATIC=True),
    (False, False, 32768): NormLaunchConfig(1, 8192, 32, True, STATIC=True),
    (False, False, 65536): NormLaunchConfig(1, 8192, 16, True, STATIC=True),
}
_MIN_STATIC_CHUNK = 2048


def _static_chunks(cfg: NormLaunchConfig, n_cols: int, warp_size: int,
                   min_chunk: int = _MIN_STATIC_CHUNK) -> NormLaunchConfig:
    """A STATIC config's chunks narrowed (halved, down to ``min_chunk``) to the widest
    that divides the row, if one does, warps halved to keep at least 8 elements a lane: a
    partial last chunk costs more than narrower whole ones (LayerNorm + residual 4096 x
    12288: 153.8 us in 8192-wide chunks with 32 warps, 102.4 in 4096-wide with 16)."""
    if not cfg.STATIC:
        return cfg
    block, warps = cfg.BLOCK_N, cfg.num_warps
    while n_cols % block and block > min_chunk:
        block //= 2
    if n_cols % block:  # no chunk divides the row: the widest, with a partial last one
        return cfg
    while warps > 4 and block // (warps * warp_size) < 8:
        warps //= 2
    return replace(cfg, BLOCK_N=block, num_warps=warps)


# Rows from 32768 up without a residual, by power-of-2 width; wider than 131072 as 131072.
_WIDE_RMS = {32768: _STATIC_LOOPS[True, False, 32768], 65536: _LOOP, 131072: _LOOP_WIDE}
_WIDE_LN = {32768: _STATIC_LOOPS[False, False, 32768], 65536: _STATIC_LOOPS[False, False, 65536],
            131072: _LOOP_WIDE}
# Split rows (one program per one-tile segment, read once; from 65536 with a residual,
# from 131072 for RMSNorm without): fused add 138.5 / 142.2 / 147.5 us at 65536 / 131072 /
# 262144 against 143.4 / 158.9 / 170.7 looped (LayerNorm 143.7 / 151.5 / 158.0), RMSNorm
# 86.6 / 92.5 at 131072 / 262144 against 87.0 / 101.3. The exchange's wait is what keeps
# them from a short row's 92% of copy: without it the same kernel takes 73-76 us at
# 131072. LayerNorm without a residual stays looped (92.7 / 104.6 us against 96.1 / 104.3).
_SPLIT = NormLaunchConfig(1, 8192, 4, False, SPLIT=True)
_SPLIT_NARROW = NormLaunchConfig(1, 4096, 4, False, SPLIT=True)
_SPLIT_LN_WIDE = NormLaunchConfig(1, 8192, 8, False, SPLIT=True)


def _split_config(block_n: int, residual: bool, is_rms: bool) -> NormLaunchConfig | None:
    """The split-row config for this width, or None where rows are not split."""
    if residual and block_n >= 65536:
        return _SPLIT if is_rms else _SPLIT_NARROW if block_n <= 131072 else _SPLIT_LN_WIDE
    if not residual and is_rms and block_n >= 131072:
        return _SPLIT_NARROW if block_n == 131072 else _SPLIT
    return None


_EVICT_LAST_MAX_TILE = 8192  # without a residual; with one, always
# Plain norms (no residual) held in registers, by (is_rms, power-of-2 width, at least _BIG
# elements): (rows per program, warps, load hint, weight loaded with the row). Measured at
# M = 4096 / 8192 / 16384 rows (bf16, scripts/tune_norm.py --m): RMSNorm 4096 x 8192 36.6
# us against 39.3 for the general rule (8 warps, evict_last, weight after the sums), 4096 x
# 5120 26.7 against 28.8, 16384 x 8192 129.2 against 130.2; LayerNorm 4096-wide rows two
# per program (8192 x 4096: 36.6 against 40.1, 16384 x 4096 68.5 against 71.7).
_BIG = 1 << 26
_PLAIN_TILES = {
    **{(True, n, big): (1, 8, "evict_last" if big else "", True) for n in (4096, 8192) for big in (False, True)},
    **{(False, 512, big): (2, 2, "evict_last", False) for big in (False, True)},
    **{(False, 4096, big): (2, 8, "", False) for big in (False, True)},
}
_DECODE_ADD_ROWS = 8
_TILE = 2048  # short rows: several per program, about this many elements
# Backward (same sweep): every in-register tile double-buffers its row steps (the
# next step's x and dy load while this one computes): 262144 x 256 121.5 us against
# 125.8, 32768 x 2048 116.1 against 168.9, 8192 x 8192 115.7 against 139.4; at 16384
# the second buffer spills (1562 us), so that width goes without. Rows up to 512 take
# 8192-element tiles, 16 warps, one program per SM (RMSNorm 262144 x 256: 115.5 us,
# LayerNorm 127.7 against 144.7 for 2048-element tiles); N = 1024 2048-element tiles,
# 4 warps, 8 programs per SM (RMSNorm, 116.5) or 8192 / 8 warps / 1 per SM (LayerNorm,
# 128.5); N = 2048 4096-element tiles, 8 warps, 2 per SM; wider rows one row per step,
# 16 warps, one per SM (fewer dweight partial rows to write and reduce). N = 4096 (H100,
# CUDA-graph replays, scripts/tune_norm.py --cudagraph): two rows per step, 16 warps, one
# program per SM, against one row, 8 warps, two per SM: RMSNorm 4096 / 32768 rows 40.2 /
# 288.8 us against 42.6 / 291.3, LayerNorm 44.0 / 290.2 against 49.3 / 298.5, with a
# residual's gradient RMSNorm 51.3 / 370.5 against 53.6 / 371.1, LayerNorm 55.6 / 380.3
# against 75.9 / 450.1.
# RMSNorm keeps a row in registers up to 16384 (160.5 us vs 187.1 us looped); looped
# rows take 4 x 2048 column blocks (247.6 us at 262144 against 279.6 us for 1 x 2048).
# LayerNorm loops from 16384 (203.4 against 233.8 us in registers) in 1024-wide
# double-buffered column blocks, 4 x 1024 unbuffered past 65536 (276.4 against 327.3).
_BWD_MAX_ROW_IN_REGS = 16384
_BWD_LOOP = NormLaunchConfig(4, 2048, 8, True)  # a BLOCK_N-wide column block of BLOCK_M rows per step
_BWD_LOOP_LN = NormLaunchConfig(1, 1024, 4, True, PREFETCH=True)
_BWD_LOOP_LN_WIDE = NormLaunchConfig(4, 1024, 4, True)
_BWD_SUMS = (8192, 8)  # row-sum chunk and warps of the looped backward's first step
_BWD_REDUCE = (32, 64, 4)  # partial-sum rows per step, columns and warps of the weight / bias reduction


@functools.lru_cache(maxsize=1024)
def norm_launch_config(n_rows: int, n_cols: int, profile: DeviceProfile = INTERPRETER, residual: bool = False,
                       is_rms: bool = True) -> NormLaunchConfig:
    """Forward tile for an (n_rows, n_cols) RMSNorm (``is_rms``) or LayerNorm, ``residual``
    for the fused-add form.

    Rows up to ``_MAX_ROW_IN_REGS`` wide are held whole in registers, several per
    program when short; wider rows loop in chunks, one row per program, or are
    split over programs (``_split_config``) while no more segments than half the
    SMs make a row. On a GPU the rows per program shrink until there are two
    programs per SM. Warps never pass what a program of ``profile`` may have (16
    wavefronts of 64 on AMD).
    """
    cfg = profile.fit(_norm_config(n_rows, n_cols, profile, residual, is_rms))
    if cfg.num_warps == 16 and profile.arch in ("sm_80", "sm_100"):
        # ptxas for sm_80 / sm_100 holds a 512-lane program to 64 registers and spills: the
        # unrolled loop of a static one (LayerNorm 65536 on sm_100: 24 B; 32 warps build in
        # 48 registers without), a decode row in registers (RMSNorm 1 x 7168 on sm_80: 4 B;
        # 8 warps build without; a static chunk keeps 8 elements a lane). scripts/check_targets.py
        cfg = replace(cfg, num_warps=32 if cfg.STATIC and cfg.BLOCK_N >= 8192 else 8)
    return cfg


def _norm_config(n_rows: int, n_cols: int, profile: DeviceProfile, residual: bool, is_rms: bool) -> NormLaunchConfig:
    sms = grid_sms(profile)
    block_n = next_power_of_2(n_cols)
    split = _split_config(block_n, residual, is_rms)
    if split is not None and cdiv(n_cols, split.BLOCK_N) <= sms // 2:
        return split
    if block_n >= 32768 and not residual:
        return _static_chunks((_WIDE_RMS if is_rms else _WIDE_LN)[min(block_n, 131072)], n_cols, profile.warp_size)
    if block_n > _MAX_ROW_IN_REGS:
        return _LOOP
    static = _STATIC_LOOPS.get((is_rms, residual, block_n))
    if static is not None and n_rows >= sms:
        return _static_chunks(static, n_cols, profile.warp_size)
    plain = None if residual else _PLAIN_TILES.get((is_rms, block_n, n_rows * n_cols >= _BIG))
    block_m = min(plain[0] if plain else max(_TILE // block_n, 1), next_power_of_2(n_rows))
    want = 2 * sms
    while block_m > 1 and cdiv(n_rows, block_m) < want:
        block_m //= 2
    tile = block_m * block_n
    evict = "evict_last" if residual or tile <= _EVICT_LAST_MAX_TILE else ""
    if cdiv(n_rows, block_m) < sms:  # under one wave: latency-bound, 16 elements per lane
        warps = max(profile.row_warps(tile), profile.warps_for(tile, 16, lo=1))
        if residual and n_rows >= _DECODE_ADD_ROWS and tile >= 8192:
            return NormLaunchConfig(block_m, block_n, profile.max_warps, False)
        return NormLaunchConfig(block_m, block_n, warps, False, EVICT=evict, W_FIRST=block_n < 16384)
    if plain:
        return NormLaunchConfig(block_m, block_n, plain[1], False, EVICT=plain[2], W_FIRST=plain[3])
    return NormLaunchConfig(block_m, block_n, profile.row_warps(tile), False, EVICT=evict)


@functools.lru_cache(maxsize=1024)
def norm_bwd_launch_config(n_rows: int, n_cols: int, profile: DeviceProfile = INTERPRETER,
                           is_rms: bool = True, add_grad: bool = False) -> NormBwdLaunchConfig:
    """Backward tile and programs along rows; warps within what a program of ``profile``
    may have. ``add_grad``: the fused-add forms' backward, which adds residual_out's gradient."""
    bwd = _norm_bwd_config(n_rows, n_cols, profile, is_rms, add_grad)
    return replace(bwd, tile=profile.fit(bwd.tile))


def _norm_bwd_config(n_rows: int, n_cols: int, profile: DeviceProfile, is_rms: bool,
                     add_grad: bool) -> NormBwdLaunchConfig:
    block_n = next_power_of_2(n_cols)
    sms = grid_sms(profile)
    if not is_rms and block_n >= _BWD_MAX_ROW_IN_REGS:
        tile = _BWD_LOOP_LN if block_n <= 65536 else _BWD_LOOP_LN_WIDE
        if add_grad and profile.arch == "sm_80":  # ptxas (Triton 3.6) spilled 8 bytes double-buffering with it
            tile = replace(tile, PREFETCH=False)
        return NormBwdLaunchConfig(tile, min(n_rows, sms))
    if block_n > _BWD_MAX_ROW_IN_REGS:
        return NormBwdLaunchConfig(_BWD_LOOP, min(n_rows, sms))
    if block_n <= 512 or (block_n == 1024 and not is_rms):
        block_m = min(8192 // block_n, next_power_of_2(n_rows))
        cfg, programs = NormLaunchConfig(block_m, block_n, 16 if block_n <= 512 else 8, False, PREFETCH=True), sms
    elif block_n == 1024:
        block_m = min(2048 // block_n, next_power_of_2(n_rows))
        cfg, programs = NormLaunchConfig(block_m, block_n, 4, False, PREFETCH=True), 8 * sms
    elif block_n <= 4096:  # two rows per step; 4096: 16 warps, one program per SM (4-25% ahead of 8 and two)
        warps, programs = (8, 2 * sms) if block_n == 2048 else (16, sms)
        # ptxas for sm_120 spills 8 bytes double-buffering LayerNorm's fused-add backward at
        # 4096 (scripts/check_targets.py): that one builds without the prefetch
        prefetch = not (block_n == 4096 and add_grad and not is_rms and profile.arch == "sm_120")
        cfg = NormLaunchConfig(min(2, next_power_of_2(n_rows)), block_n, warps, False, PREFETCH=prefetch)
    else:  # double-buffering a 16384-wide row spills (10x slower)
        cfg, programs = NormLaunchConfig(1, block_n, 16, False, PREFETCH=block_n <= 8192), sms
    return NormBwdLaunchConfig(cfg, min(cdiv(n_rows, cfg.BLOCK_M), programs))


# ---------------------------------------------------------------------------
# argument checks


def check_vector(op: str, name: str, v, n: int, ref: torch.Tensor, ref_name: str = "input") -> None:
    """An optional (n,) parameter (weight, bias, x_bias) on ref's device, unit stride;
    ``ref_name``: the caller's name of ref."""
    if v is None:
        return
    check_float_tensor(op, name, v)
    if v.dim() != 1 or v.shape[0] != n:
        raise ValueError(f"{op}: {name} must have shape ({n},) for {ref_name} of shape {tuple(ref.shape)}, "
                         f"got {tuple(v.shape)}")
    if n > 1 and v.stride(0) != 1:
        raise ValueError(f"{op}: {name} must be contiguous, got stride {v.stride(0)}")
    check_same_device(op, name, v, ref_name, ref)


def check_like(op: str, name: str, t, ref: torch.Tensor) -> None:
    """A row tensor (out, residual) with input's shape and device, unit last stride."""
    check_float_tensor(op, name, t)
    if tuple(t.shape) != tuple(ref.shape):
        raise ValueError(f"{op}: {name} must have input's shape {tuple(ref.shape)}, got {tuple(t.shape)}")
    check_same_device(op, name, t, "input", ref)
    check_unit_last_stride(op, name, t)


def check_input(op: str, input) -> None:
    check_row_input(op, "input", input, " (normalized over the last)")


def check_eps(op: str, name: str, eps) -> float:
    """The norm's epsilon (``name``: the caller's): a finite real >= 0, as a float (a negative
    one can make ``var + eps`` negative or 0, and the row NaN or inf)."""
    eps = check_real(op, name, eps)
    if eps < 0:
        raise ValueError(f"{op}: {name} must be a finite real >= 0, got {eps}")
    return eps


# ---------------------------------------------------------------------------
# launches


def _int64(*tensors_and_rows) -> bool:
    """Whether any row offset of these 2-D views can pass 2^31."""
    return any(t is not None and t.shape[0] * max(t.stride(0), t.shape[1]) + t.shape[1] >= 2**31
               for t in tensors_and_rows)


@launcher(mutates=("y", "residual_out", "mean", "rstd"))
def _launch_norm_fwd(x: torch.Tensor, y: torch.Tensor, weight: torch.Tensor | None, bias: torch.Tensor | None,
                     eps: float, is_rms: bool, residual: torch.Tensor | None = None,
                     residual_out: torch.Tensor | None = None, x_bias: torch.Tensor | None = None,
                     weight_offset: float = 0.0, mean: torch.Tensor | None = None, rstd: torch.Tensor | None = None,
                     config: NormLaunchConfig | None = None, casting_mode: str = "gemma", pad_to: int = 0) -> None:
    """The forward over 2-D row views (x, y, residual, residual_out); the statistics into
    mean (LayerNorm) and rstd when given; ``casting_mode`` "llama": RMSNorm's roundings as
    Hugging Face Llama's (module doc). ``pad_to`` > 0: y is ``cdiv(n_cols, pad_to) * pad_to``
    wide, zeros past n_cols (``fused_add_rmsnorm_pad``)."""
    n_rows, n_cols = x.shape
    has_res = residual is not None
    cfg = config or norm_launch_config(n_rows, n_cols, device_profile(x.device), has_res, is_rms)
    strides = (x.stride(0), residual.stride(0) if has_res else 0, residual_out.stride(0) if has_res else 0, y.stride(0))
    flags = dict(IS_RMS=is_rms, HAS_RESIDUAL=has_res, HAS_X_BIAS=x_bias is not None, HAS_WEIGHT=weight is not None,
                 HAS_BIAS=bias is not None, STORE_STATS=rstd is not None, CASTING_LLAMA=casting_mode == "llama",
                 EVICT=cfg.EVICT, BLOCK_N=cfg.BLOCK_N, num_warps=cfg.num_warps)
    if pad_to:
        flags["PAD_TO"] = pad_to
    if cfg.SPLIT and cdiv(n_cols, cfg.BLOCK_N) > 1:
        n_segs, slots, phases = split_row_slots("norm", n_rows, n_cols, cfg.BLOCK_N, x.device)
        for phase in phases:
            launch(
                _norm_fwd_split_kernel, (n_rows * n_segs,),
                x, residual, residual_out, x_bias, weight, bias, y, mean, rstd, slots, *strides,
                n_rows, n_cols, n_segs, eps, weight_offset, PHASE=phase, BLOCK_S=next_power_of_2(n_segs), **flags)
        return
    launch(
        _norm_fwd_kernel, (n_rows if cfg.LOOPED else cdiv(n_rows, cfg.BLOCK_M),),
        x, residual, residual_out, x_bias, weight, bias, y, mean, rstd, *strides, n_rows, n_cols, eps, weight_offset,
        INT64=_int64(x, y, residual, residual_out), PREFETCH=cfg.PREFETCH, W_FIRST=cfg.W_FIRST,
        N_STATIC=n_cols if cfg.LOOPED and cfg.STATIC else 0, LOOPED=cfg.LOOPED, BLOCK_M=cfg.BLOCK_M, **flags)


@launcher(mutates=("dx", "dweight", "dbias"))
def _launch_norm_bwd(dy: torch.Tensor, x: torch.Tensor, weight: torch.Tensor | None, mean: torch.Tensor | None,
                     rstd: torch.Tensor, dx: torch.Tensor, dweight: torch.Tensor | None, dbias: torch.Tensor | None,
                     is_rms: bool, weight_offset: float, config: NormBwdLaunchConfig | None = None,
                     dres: torch.Tensor | None = None, casting_mode: str = "gemma") -> None:
    """dx (rows like x; plus ``dres`` where given, rows like x) and, where given, dweight /
    dbias ((n_cols,), any float dtype: summed in fp32). ``config`` pins a launch (tests, tuning);
    ``casting_mode`` the forward's (it changes dweight only)."""
    n_rows, n_cols = x.shape
    cfg = config or norm_bwd_launch_config(n_rows, n_cols, device_profile(x.device), is_rms, dres is not None)
    tile = cfg.tile
    col_blocks = cdiv(n_cols, tile.BLOCK_N)
    rows_per_program = cdiv(cdiv(n_rows, cfg.programs), tile.BLOCK_M) * tile.BLOCK_M
    programs = cdiv(n_rows, rows_per_program)
    # One program along rows writes the sums themselves, in their final dtype (no reduction
    # launch: host time is what bounds the backward at decode sizes); more write fp32 partials.
    def partials(out):
        if out is None or programs == 1:
            return None if out is None else out.view(1, n_cols)
        return torch.empty((programs, n_cols), dtype=torch.float32, device=x.device)

    dw_part, db_part = partials(dweight), partials(dbias)
    int64 = _int64(dy, x, dx, dres)
    c1 = c2 = None
    if tile.LOOPED:
        # Few wide rows: split each row's sums over column ranges until the grid holds
        # about two programs per SM.
        sums_n = _BWD_SUMS[0]
        splits = min(cdiv(n_cols, sums_n), max(1, cdiv(2 * grid_sms(device_profile(x.device)), n_rows)))
        cols_per_split = cdiv(cdiv(n_cols, splits), sums_n) * sums_n
        splits = cdiv(n_cols, cols_per_split)
        c1 = torch.empty((splits, n_rows), dtype=torch.float32, device=x.device)
        c2 = None if is_rms else torch.empty((splits, n_rows), dtype=torch.float32, device=x.device)
        launch(
            _norm_bwd_row_sums_kernel, (n_rows, splits),
            dy, x, weight, mean, rstd, c1, c2, dy.stride(0), x.stride(0), n_rows, n_cols, cols_per_split,
            weight_offset, IS_RMS=is_rms, HAS_WEIGHT=weight is not None, INT64=int64, BLOCK_N=sums_n,
            num_warps=_BWD_SUMS[1],
        )
        c1 = c1[0] if splits == 1 else c1.sum(0)
        c2 = None if c2 is None else c2[0] if splits == 1 else c2.sum(0)
    launch(
        _norm_bwd_kernel, (programs, col_blocks),
        dy, x, weight, mean, rstd, c1, c2, dx, dw_part, db_part, dres,
        dy.stride(0), x.stride(0), dx.stride(0), 0 if dres is None else dres.stride(0), n_rows, n_cols,
        rows_per_program, weight_offset,
        IS_RMS=is_rms, HAS_WEIGHT=weight is not None, NEED_DW=dweight is not None, NEED_DB=dbias is not None,
        ROW_SUMS=tile.LOOPED, HAS_DRES=dres is not None, CASTING_LLAMA=casting_mode == "llama" and dweight is not None,
        INT64=int64, PREFETCH=tile.PREFETCH, BLOCK_M=tile.BLOCK_M, BLOCK_N=tile.BLOCK_N, num_warps=tile.num_warps,
    )
    if programs > 1 and (dweight is not None or dbias is not None):
        # Partial sums reduced in a fixed order (the same bits on every run), dweight and dbias
        # in one launch that also casts them.
        launch(_norm_bwd_reduce_kernel, (cdiv(n_cols, _BWD_REDUCE[1]),), dw_part, db_part, dweight, dbias,
               programs, n_cols, NEED_DW=dweight is not None, NEED_DB=dbias is not None,
               BLOCK_P=_BWD_REDUCE[0], BLOCK_N=_BWD_REDUCE[1], num_warps=_BWD_REDUCE[2])


def _forward(x2, weight, bias, x_bias, eps, weight_offset, is_rms, casting_mode, *, stats):
    """y (new, x2's dtype) and, with ``stats``, the fp32 per-row mean (LayerNorm) and rstd."""
    n_rows = x2.shape[0]
    y = torch.empty(x2.shape, dtype=x2.dtype, device=x2.device)
    rstd = torch.empty(n_rows, dtype=torch.float32, device=x2.device) if stats else None
    mean = torch.empty(n_rows, dtype=torch.float32, device=x2.device) if stats and not is_rms else None
    if n_rows:
        _launch_norm_fwd(x2, y, weight, bias, eps, is_rms, None, None, x_bias, weight_offset, mean, rstd,
                         casting_mode=casting_mode)
    return y, mean, rstd


class _NormFunction(torch.autograd.Function):
    """y = norm(x) * (weight + offset) + bias over 2-D rows, with dx, dweight, dbias, dx_bias."""

    @staticmethod
    def forward(ctx, x2, weight, bias, x_bias, eps, weight_offset, is_rms, casting_mode):
        needs_grad = any(ctx.needs_input_grad[:4])
        y, mean, rstd = _forward(x2, weight, bias, x_bias, eps, weight_offset, is_rms, casting_mode, stats=needs_grad)
        if needs_grad:
            # With an input bias the statistics are of x + x_bias: keep that sum.
            xs = x2 if x_bias is None else (x2.float() + x_bias.float()).to(x2.dtype)
            ctx.save_for_backward(xs, weight, mean, rstd)
            ctx.is_rms, ctx.weight_offset, ctx.casting_mode = is_rms, weight_offset, casting_mode
            ctx.bias_dtype = None if bias is None else bias.dtype
            ctx.has_x_bias = x_bias is not None
            ctx.x_bias_dtype = None if x_bias is None else x_bias.dtype
        return y

    @staticmethod
    def backward(ctx, dy):
        xs, weight, mean, rstd = ctx.saved_tensors
        need_dw = weight is not None and ctx.needs_input_grad[1]
        need_db = ctx.bias_dtype is not None and ctx.needs_input_grad[2]
        need_dxb = ctx.has_x_bias and ctx.needs_input_grad[3]
        n_rows, n_cols = xs.shape
        if n_rows == 0:  # no rows: zero sums
            dx = torch.zeros_like(xs)
            dw = xs.new_zeros(n_cols, dtype=weight.dtype) if need_dw else None
            db = xs.new_zeros(n_cols, dtype=ctx.bias_dtype) if need_db else None
        else:
            if dy.stride(-1) != 1:  # e.g. an expanded gradient; a zero row stride is fine
                dy = dy.contiguous()
            dx = torch.empty((n_rows, n_cols), dtype=xs.dtype, device=xs.device)
            dw = torch.empty(n_cols, dtype=weight.dtype, device=xs.device) if need_dw else None
            db = torch.empty(n_cols, dtype=ctx.bias_dtype, device=xs.device) if need_db else None
            _launch_norm_bwd(dy, xs, weight, mean, rstd, dx, dw, db, ctx.is_rms, ctx.weight_offset,
                             casting_mode=ctx.casting_mode)
        return (dx,
                dw if need_dw else None,  # already in the parameters' dtypes
                db if need_db else None,
                dx.float().sum(0).to(ctx.x_bias_dtype) if need_dxb else None,
                None, None, None, None)


class _NormAddFunction(torch.autograd.Function):
    """``s = x + r (+ x_bias)``, ``y = norm(s) * (weight + offset) + bias`` over 2-D rows; returns
    (y, s). Backward: one kernel gives ``ds = norm'(dy) + ds_out`` (the gradient of s, which is
    x's and r's), with dweight / dbias; dx_bias is ds summed over rows."""

    @staticmethod
    def forward(ctx, x2, r2, weight, bias, x_bias, eps, weight_offset, is_rms, casting_mode):
        n_rows = x2.shape[0]
        y = torch.empty(x2.shape, dtype=x2.dtype, device=x2.device)
        s = torch.empty(r2.shape, dtype=r2.dtype, device=r2.device)
        rstd = torch.empty(n_rows, dtype=torch.float32, device=x2.device)
        mean = None if is_rms else torch.empty(n_rows, dtype=torch.float32, device=x2.device)
        if n_rows:
            _launch_norm_fwd(x2, y, weight, bias, eps, is_rms, r2, s, x_bias, weight_offset, mean, rstd,
                             casting_mode=casting_mode)
        ctx.save_for_backward(s, weight, mean, rstd)
        ctx.is_rms, ctx.weight_offset, ctx.casting_mode = is_rms, weight_offset, casting_mode
        ctx.bias_dtype = None if bias is None else bias.dtype
        ctx.x_bias_dtype = None if x_bias is None else x_bias.dtype
        return y, s

    @staticmethod
    def backward(ctx, dy, ds_out):
        s, weight, mean, rstd = ctx.saved_tensors
        n_rows, n_cols = s.shape
        need_dw = weight is not None and ctx.needs_input_grad[2]
        need_db = ctx.bias_dtype is not None and ctx.needs_input_grad[3]
        need_dxb = ctx.x_bias_dtype is not None and ctx.needs_input_grad[4]
        if dy is None:  # y unused: s's gradient is its own; weight and bias get none
            ds = torch.zeros_like(s) if ds_out is None else ds_out.contiguous()
            dw = db = None
        elif n_rows == 0:  # no rows: zero sums
            ds = torch.zeros_like(s)
            dw = s.new_zeros(n_cols, dtype=weight.dtype) if need_dw else None
            db = s.new_zeros(n_cols, dtype=ctx.bias_dtype) if need_db else None
        else:
            dy = dy if dy.stride(-1) == 1 else dy.contiguous()
            if ds_out is not None and ds_out.stride(-1) != 1:
                ds_out = ds_out.contiguous()
            ds = torch.empty((n_rows, n_cols), dtype=s.dtype, device=s.device)
            dw = torch.empty(n_cols, dtype=weight.dtype, device=s.device) if need_dw else None
            db = torch.empty(n_cols, dtype=ctx.bias_dtype, device=s.device) if need_db else None
            _launch_norm_bwd(dy, s, weight, mean, rstd, ds, dw, db, ctx.is_rms, ctx.weight_offset, dres=ds_out,
                             casting_mode=ctx.casting_mode)
        # x and residual share a dtype (check_like): ds is the gradient of both
        return (ds if ctx.needs_input_grad[0] else None, ds if ctx.needs_input_grad[1] else None, dw, db,
                ds.float().sum(0).to(ctx.x_bias_dtype) if need_dxb else None, None, None, None, None)


def norm_add(op: str, input, residual, weight, bias, eps, *, is_rms, x_bias=None, weight_offset=0.0,
             names=("input", "residual"), casting_mode: str = "gemma") -> tuple[torch.Tensor, torch.Tensor]:
    """Checked, differentiable ``residual_out = input + residual (+ x_bias)``, ``out =
    norm(residual_out)``: (out, residual_out), new tensors. The out-of-place form layers take
    while autograd records; ``names``: the caller's for input and residual."""
    in_name, r_name = names
    check_row_input(op, in_name, input, " (normalized over the last)")
    check_like(op, r_name, residual, input)
    eps, weight_offset = _check_params(op, input, weight, bias, x_bias, eps, weight_offset, "epsilon")
    casting_mode = check_casting_mode(op, casting_mode)
    y, s = _NormAddFunction.apply(rows_view(op, in_name, input, writable=False),
                                  rows_view(op, r_name, residual, writable=False), weight, bias, x_bias, eps,
                                  weight_offset, is_rms, casting_mode)
    return y.view(input.shape), s.view(residual.shape)


def _check_params(op, input, weight, bias, x_bias, eps, weight_offset, eps_name) -> tuple[float, float]:
    """The (N,) vectors and the two scalars, checked against input; eps (the caller's
    ``eps_name``) and weight_offset as floats."""
    n = input.shape[-1]
    check_vector(op, "weight", weight, n, input)
    check_vector(op, "bias", bias, n, input)
    check_vector(op, "x_bias", x_bias, n, input)
    return check_eps(op, eps_name, eps), check_real(op, "weight_offset", weight_offset)


def norm(op: str, input, weight, bias, eps, *, is_rms, x_bias=None, weight_offset=0.0,
         eps_name: str = "epsilon", casting_mode: str = "gemma") -> torch.Tensor:
    """Checked, differentiable normalization of ``input`` over its last dim; a new tensor.
    ``eps_name``: the caller's name of eps, for error messages."""
    check_input(op, input)
    eps, weight_offset = _check_params(op, input, weight, bias, x_bias, eps, weight_offset, eps_name)
    casting_mode = check_casting_mode(op, casting_mode)
    if debug_on():
        log_call(op, input=input, weight=weight, bias=bias, x_bias=x_bias, weight_offset=weight_offset,
                 casting_mode=casting_mode, **{eps_name: eps})
    x2 = rows_view(op, "input", input, writable=False)
    if torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in (input, weight, bias, x_bias)):
        y = _NormFunction.apply(x2, weight, bias, x_bias, eps, weight_offset, is_rms, casting_mode)
    else:  # inference: no autograd node, no saved statistics (its host cost shows at decode sizes)
        y = _forward(x2, weight, bias, x_bias, eps, weight_offset, is_rms, casting_mode, stats=False)[0]
    return y.view(input.shape)


def norm_with_add(op: str, out, input, residual_in, residual_out, weight, bias, eps, *, is_rms, x_bias=None,
                  weight_offset=0.0, names=("out", "residual_in", "residual_out"), casting_mode: str = "gemma") -> None:
    """Checked forward of residual_out = input + residual_in (+ x_bias); out = norm(residual_out).

    ``names`` are the caller's names for out, residual_in and residual_out, for error messages.
    """
    out_name, r_name, r_out_name = names
    check_input(op, input)
    check_like(op, r_name, residual_in, input)
    check_like(op, r_out_name, residual_out, input)
    check_like(op, out_name, out, input)
    eps, weight_offset = _check_params(op, input, weight, bias, x_bias, eps, weight_offset, "epsilon")
    casting_mode = check_casting_mode(op, casting_mode)
    if debug_on():
        log_call(op, out=out, input=input, residual_in=residual_in, residual_out=residual_out, weight=weight,
                 bias=bias, x_bias=x_bias, epsilon=eps, weight_offset=weight_offset, casting_mode=casting_mode)
    if torch.is_grad_enabled() and any(t is not None and t.requires_grad
                                       for t in (input, residual_in, weight, bias, x_bias)):
        # differentiable: new results by the autograd path, copied into the outputs (as the
        # native ops' in-place writes are recorded); out / residual_out may be the inputs
        y, s = _NormAddFunction.apply(rows_view(op, "input", input, writable=False),
                                      rows_view(op, r_name, residual_in, writable=False), weight, bias, x_bias, eps,
                                      weight_offset, is_rms, casting_mode)
        out.copy_(y.view(out.shape))
        residual_out.copy_(s.view(residual_out.shape))
        return
    if input.numel() == 0:
        return
    _launch_norm_fwd(rows_view(op, "input", input, writable=False), rows_view(op, out_name, out, writable=True),
                     weight, bias, eps, is_rms, rows_view(op, r_name, residual_in, writable=False),
                     rows_view(op, r_out_name, residual_out, writable=True), x_bias, weight_offset, None, None,
                     casting_mode=casting_mode)


# aiter's names at this path (aiter's normalization.norm is its LayerNorm module; aiter_lite's layernorm)
__getattr__ = lazy_aliases(globals(), {
    "layer_norm": "aiter_lite.ops.triton.normalization.layernorm",
    "layernorm2d_fwd_with_add": "aiter_lite.ops.triton.normalization.layernorm",
    "layernorm2d_fwd_with_dynamicquant": "aiter_lite.ops.triton.quant.norm_quant",
    "layernorm2d_fwd_with_smoothquant": "aiter_lite.ops.triton.quant.norm_quant",
    "layernorm2d_fwd_with_add_dynamicquant": "aiter_lite.ops.triton.quant.norm_quant",
    "layernorm2d_fwd_with_add_smoothquant": "aiter_lite.ops.triton.quant.norm_quant",
})
