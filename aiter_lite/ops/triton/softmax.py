"""Softmax and log-softmax on the Triton backend (aiter's ``softmax``, and ``log_softmax``).

``softmax(x, dim=-1)`` and ``log_softmax(x, dim=-1)`` take any rank, rows of any
stride (unit stride along ``dim``; another ``dim`` is moved last through a copy),
fp32 / fp16 / bf16, and rows of any length: up to ``_MAX_ROW_IN_REGS`` columns a row
is read once and held in registers; wider rows are split over programs that exchange
their segments' statistics (still one read), or, too wide for that, read twice in chunks. Sums are
fp32; the result has x's dtype. Edge rows match torch.softmax: NaN or +inf anywhere in
a row makes the row NaN, and so does a row of -inf. Forward only (no autograd).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, replace

import torch

from aiter_lite.ops.triton._triton_kernels.softmax import (
    _softmax_kernel,
    _softmax_looped_kernel,
    _softmax_split_kernel,
)
from aiter_lite.spec.device import INTERPRETER, DeviceProfile, device_profile
from aiter_lite.utils.checks import check_float_tensor, check_int, check_triton_device, rows_view
from aiter_lite.utils.fast_launch import launch
from aiter_lite.utils.launch import cdiv, grid_sms, next_power_of_2, split_row_slots
from aiter_lite.utils.launcher import launcher
from aiter_lite.utils.logger import debug_on, log_call
from aiter_lite.utils.registry import public_op

__all__ = ["softmax", "log_softmax", "SoftmaxLaunchConfig", "softmax_launch_config"]


@dataclass(frozen=True)
class SoftmaxLaunchConfig:
    BLOCK_M: int  # rows per program (in registers)
    BLOCK_N: int  # columns: the whole row, or a chunk when LOOPED
    num_warps: int
    LOOPED: bool
    SPLIT: bool = False  # the row cut into BLOCK_N-wide segments, one program each, held in registers


# Measured on an H200 (bf16, M * N = 2^26; scratch sweeps of tiles, warps and split
# segments): rows in registers up to 16384 columns, the widest with 32 warps (16384:
# 73 us against 82 us with 8 warps); wider rows split, which reads once and, keeping
# the exponentials, takes one exp per element: 4096-wide segments of 4 warps up to
# 131072 columns (80% of copy at 32768 and 65536, against 66% / 55% for one row per
# program), 8192-wide beyond (61% at 262144, where 4096-wide segments are 64 a row);
# past half the SMs' worth of segments a row is looped in 8192-wide chunks (read twice).
_MAX_ROW_IN_REGS = 16384
_TILE = 2048
_LOOP = SoftmaxLaunchConfig(1, 8192, 8, True)
_SPLIT = SoftmaxLaunchConfig(1, 4096, 4, False, SPLIT=True)
_SPLIT_WIDE = SoftmaxLaunchConfig(1, 8192, 4, False, SPLIT=True)
_SPLIT_WIDE_FROM = 131072


@functools.lru_cache(maxsize=1024)
def softmax_launch_config(n_rows: int, n_cols: int, profile: DeviceProfile = INTERPRETER) -> SoftmaxLaunchConfig:
    """Rows in registers (several per program when short, halved until the grid has two
    programs per SM) up to ``_MAX_ROW_IN_REGS`` columns; wider rows split over programs
    or, past half the SMs' worth of segments, one row per program in chunks. The widest
    row in registers takes as many warps as a program may have (32 of 32 lanes, 16 of 64)."""
    sms = grid_sms(profile)
    block_n = next_power_of_2(n_cols)
    if block_n > _MAX_ROW_IN_REGS:
        split = _SPLIT_WIDE if n_cols > _SPLIT_WIDE_FROM else _SPLIT
        if profile.arch == "sm_80" and split is _SPLIT:
            # ptxas for sm_80 gives a 4-warp log-softmax segment an 8 B stack frame; 8 warps
            # build in 32 registers without (scripts/check_targets.py)
            split = replace(split, num_warps=8)
        return split if cdiv(n_cols, split.BLOCK_N) <= sms // 2 else _LOOP
    block_m = min(max(_TILE // block_n, 1), next_power_of_2(n_rows))
    while block_m > 1 and cdiv(n_rows, block_m) < 2 * sms:
        block_m //= 2
    warps = profile.max_warps if block_n == _MAX_ROW_IN_REGS else profile.row_warps(block_m * block_n)
    return SoftmaxLaunchConfig(block_m, block_n, warps, False)


@launcher(mutates=("y",))
def _launch_softmax(x: torch.Tensor, y: torch.Tensor, log: bool, config: SoftmaxLaunchConfig | None = None) -> None:
    """Rows of 2-D x into y by the config's regime: in registers, split over programs, or looped."""
    n_rows, n_cols = x.shape
    cfg = config or softmax_launch_config(n_rows, n_cols, device_profile(x.device))
    int64 = any(t.shape[0] * max(t.stride(0), t.shape[1]) + t.shape[1] >= 2**31 for t in (x, y))
    if cfg.SPLIT:
        n_segs, slots, phases = split_row_slots("softmax", n_rows, n_cols, cfg.BLOCK_N, x.device, released=True)
        for phase in phases:
            launch(_softmax_split_kernel, (n_rows * n_segs,),
                   x, y, slots, x.stride(0), y.stride(0), n_rows, n_cols, n_segs, LOG=log, PHASE=phase,
                   BLOCK_N=cfg.BLOCK_N, BLOCK_S=next_power_of_2(n_segs), EVEN=n_cols % cfg.BLOCK_N == 0,
                   num_warps=cfg.num_warps)
    elif cfg.LOOPED:
        launch(_softmax_looped_kernel, (n_rows,), x, y, x.stride(0), y.stride(0), n_cols, LOG=log, INT64=int64,
               BLOCK_N=cfg.BLOCK_N, num_warps=cfg.num_warps)
    else:
        launch(_softmax_kernel, (cdiv(n_rows, cfg.BLOCK_M),), x, y, x.stride(0), y.stride(0), n_rows, n_cols,
               LOG=log, INT64=int64, BLOCK_M=cfg.BLOCK_M, BLOCK_N=cfg.BLOCK_N, num_warps=cfg.num_warps)


def _new_out(x: torch.Tensor) -> torch.Tensor:
    return torch.empty(x.shape, dtype=x.dtype, device=x.device)


def _softmax(op: str, x, dim, log: bool) -> torch.Tensor:
    check_float_tensor(op, "x", x)
    check_triton_device(op, "x", x)
    rank = max(x.dim(), 1)
    dim = check_int(op, "dim", dim, -rank, rank - 1, f"for x of shape {tuple(x.shape)}") % rank
    if debug_on():
        log_call(op, x=x, dim=dim)
    if x.dim() == 0:  # a single element: softmax 1, log_softmax 0 (NaN / inf stay NaN)
        return _softmax(op, x.reshape(1), 0, log).reshape(())
    if dim != x.dim() - 1:  # the reduced dim last, contiguous; the result back in x's layout
        y = _softmax(op, x.movedim(dim, -1).contiguous(), -1, log)
        return torch.empty_like(x).copy_(y.movedim(-1, dim))
    if x.shape[-1] > 1 and x.stride(-1) != 1:
        x = x.contiguous()
    y = _new_out(x)
    if x.numel() == 0:
        return y
    _launch_softmax(rows_view(op, "x", x, writable=False), y.view(-1, x.shape[-1]), log)
    return y


@public_op(no_grad="no backward yet")
def softmax(x: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """``exp(x) / sum(exp(x))`` along ``dim``, as a new tensor of x's dtype."""
    return _softmax("softmax", x, dim, False)


@public_op(no_grad="no backward yet")
def log_softmax(x: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """``x - log(sum(exp(x)))`` along ``dim``, as a new tensor of x's dtype."""
    return _softmax("log_softmax", x, dim, True)
