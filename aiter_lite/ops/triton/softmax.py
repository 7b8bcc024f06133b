"""Softmax and log-softmax on the Triton backend (aiter's ``softmax``, and ``log_softmax``).

``softmax(x, dim=-1)`` and ``log_softmax(x, dim=-1)`` take any rank, rows of any
stride (unit stride along ``dim``; another ``dim`` is moved last through a copy),
fp32 / fp16 / bf16, and rows of any length: up to ``_MAX_ROW_IN_REGS`` columns a row
is read once and held in registers; wider rows are split over programs that exchange
their segments' statistics (still one read), or, too wide for that, read twice in chunks. Sums are
fp32; the result has x's dtype. Edge rows match torch.softmax: NaN or +inf anywhere in
a row makes the row NaN, and so does a row of -inf.

Both are differentiable: where autograd records x, one autograd node saves the output y
(not x) and its backward kernel computes x's gradient from y and the output's gradient
dy, ``y * (dy - sum(dy * y))`` or ``dy - exp(y) * sum(dy)``, in fp32, in x's dtype (a NaN
row of y gives a NaN row of gradient), in the forward's regimes: rows in registers, split
over programs exchanging their segments' sums (y and dy read once), or looped in chunks
(read twice). Calls autograd does not record take the forward alone, as before.
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

__all__ = ["softmax", "log_softmax", "SoftmaxLaunchConfig", "softmax_launch_config", "softmax_bwd_launch_config"]


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


# The backward (H100, bf16, M * N = 2^26, y and dy read, dx written): the forward's regimes,
# but at 32768 columns. Split rows: 152 / 154 / 157 / 156 us at 32768 / 65536 / 131072 /
# 262144 columns (85-88% of copy; log-softmax 145-150, 89-92%) against 195-231 for looped
# chunks of 4-8 warps (the second read of y and dy misses L2: too many rows in flight).
# torch.compile's backward at 32768 takes 137.5 us: one row a program, 16384-wide chunks
# of 32 warps (two programs an SM), the first pass kept in L2 (evict_last), the second
# evicted first, no masks. The same looped here: 138 / 137.5 us (softmax / log-softmax;
# split 152 / 147), against 155-161 with masks, 150 with 8192-wide chunks, 145 with the
# running sum one scalar (not held by every lane), 141 for a whole row in registers of 16
# warps (which spills on NVIDIA). It holds where the rows fill the SMs and are whole
# chunks; other rows take the forward's regime.
_BWD_LOOP = SoftmaxLaunchConfig(1, 16384, 32, True)
_BWD_LOOP_COLS = 32768


def softmax_bwd_launch_config(n_rows: int, n_cols: int, profile: DeviceProfile = INTERPRETER) -> SoftmaxLaunchConfig:
    """The backward's launch: the forward's (the same tiles, warps and split segments,
    holding y and dy; looped where the forward loops), but rows of ``_BWD_LOOP_COLS``
    columns looped in whole chunks of ``_BWD_LOOP`` where the rows fill the SMs. Its own
    name: what a test or a tuning run pins for the backward alone."""
    if n_cols == _BWD_LOOP_COLS and n_rows >= grid_sms(profile):
        return replace(_BWD_LOOP, num_warps=min(_BWD_LOOP.num_warps, profile.max_warps))
    return softmax_launch_config(n_rows, n_cols, profile)


def _launch_rows(src: torch.Tensor, dy: torch.Tensor | None, dst: torch.Tensor, log: bool,
                 cfg: SoftmaxLaunchConfig) -> None:
    """Any regime over 2-D rows: dst = softmax(src) (dy None), or dst = x's gradient from
    the forward's output src and its gradient dy."""
    n_rows, n_cols = src.shape
    stride_dy = None if dy is None else dy.stride(0)
    if cfg.SPLIT:  # offsets from an int64 ticket
        n_segs, slots, phases = split_row_slots("softmax", n_rows, n_cols, cfg.BLOCK_N, src.device, released=True)
        for phase in phases:
            launch(_softmax_split_kernel, (n_rows * n_segs,),
                   src, dy, dst, slots, src.stride(0), stride_dy, dst.stride(0), n_rows, n_cols, n_segs, LOG=log,
                   BACKWARD=dy is not None, PHASE=phase, BLOCK_N=cfg.BLOCK_N, BLOCK_S=next_power_of_2(n_segs),
                   EVEN=n_cols % cfg.BLOCK_N == 0, num_warps=cfg.num_warps)
        return
    tensors = (src, dst) if dy is None else (src, dy, dst)
    int64 = any(t.shape[0] * max(t.stride(0), t.shape[1]) + t.shape[1] >= 2**31 for t in tensors)
    if cfg.LOOPED:
        launch(_softmax_looped_kernel, (n_rows,), src, dy, dst, src.stride(0), stride_dy, dst.stride(0), n_cols,
               LOG=log, BACKWARD=dy is not None, INT64=int64, BLOCK_N=cfg.BLOCK_N,
               EVEN=dy is not None and n_cols % cfg.BLOCK_N == 0, num_warps=cfg.num_warps)
    else:
        launch(_softmax_kernel, (cdiv(n_rows, cfg.BLOCK_M),), src, dy, dst, src.stride(0), stride_dy,
               dst.stride(0), n_rows, n_cols, LOG=log, BACKWARD=dy is not None, INT64=int64, BLOCK_M=cfg.BLOCK_M,
               BLOCK_N=cfg.BLOCK_N, num_warps=cfg.num_warps)


@launcher(mutates=("y",))
def _launch_softmax(x: torch.Tensor, y: torch.Tensor, log: bool, config: SoftmaxLaunchConfig | None = None) -> None:
    """Rows of 2-D x into y by the config's regime: in registers, split over programs, or looped."""
    _launch_rows(x, None, y, log, config or softmax_launch_config(*x.shape, device_profile(x.device)))


@launcher(mutates=("dx",))
def _launch_softmax_bwd(y: torch.Tensor, dy: torch.Tensor, dx: torch.Tensor, log: bool,
                        config: SoftmaxLaunchConfig | None = None) -> None:
    """x's gradient dx from the forward's output y and its gradient dy (2-D rows), by the
    config's regime: in registers, split over programs, or looped."""
    _launch_rows(y, dy, dx, log, config or softmax_bwd_launch_config(*y.shape, device_profile(y.device)))


def _new_out(x: torch.Tensor) -> torch.Tensor:
    return torch.empty(x.shape, dtype=x.dtype, device=x.device)


def _softmax_forward(op: str, x: torch.Tensor, dim: int, log: bool) -> torch.Tensor:
    """softmax / log_softmax of a checked x along ``dim`` (in [0, rank)), as a new tensor."""
    if x.dim() == 0:  # a single element: softmax 1, log_softmax 0 (NaN / inf stay NaN)
        return _softmax_forward(op, x.reshape(1), 0, log).reshape(())
    if dim != x.dim() - 1:  # the reduced dim last, contiguous; the result back in x's layout
        y = _softmax_forward(op, x.movedim(dim, -1).contiguous(), x.dim() - 1, log)
        if x.is_contiguous():  # out of place: an in-place copy into a new tensor inside the autograd
            return y.movedim(-1, dim).contiguous()  # node lost its gradient under inductor (H100)
        return torch.empty_like(x).copy_(y.movedim(-1, dim))
    if x.shape[-1] > 1 and x.stride(-1) != 1:
        x = x.contiguous()
    y = _new_out(x)
    if x.numel() == 0:
        return y
    _launch_softmax(rows_view(op, "x", x, writable=False), y.view(-1, x.shape[-1]), log)
    return y


def _softmax_backward(op: str, y: torch.Tensor, dy: torch.Tensor, dim: int, log: bool) -> torch.Tensor:
    """x's gradient (y's shape and dtype) from the forward's output y and its gradient dy
    (y's shape, any strides) along ``dim`` (in [0, rank); 0 for a 0-d y)."""
    if y.dim() == 0:
        return _softmax_backward(op, y.reshape(1), dy.reshape(1), 0, log).reshape(())
    if dim != y.dim() - 1:  # as the forward: the reduced dim last, then back, contiguous
        dx = _softmax_backward(op, y.movedim(dim, -1).contiguous(), dy.movedim(dim, -1), y.dim() - 1, log)
        return dx.movedim(-1, dim).contiguous()
    n = y.shape[-1]
    if n > 1 and dy.stride(-1) != 1:  # an expanded or transposed gradient
        dy = dy.contiguous()
    dx = _new_out(y)
    if dx.numel() == 0:
        return dx
    _launch_softmax_bwd(rows_view(op, "y", y, writable=False), rows_view(op, "dy", dy, writable=False),
                        dx.view(-1, n), log)
    return dx


class _SoftmaxFunction(torch.autograd.Function):
    """softmax / log_softmax along ``dim`` with x's gradient by the backward kernel, from
    the saved output (fp32 math, x's dtype)."""

    @staticmethod
    def forward(ctx, x, dim, log, op):
        y = _softmax_forward(op, x, dim, log)
        ctx.save_for_backward(y)
        ctx.dim, ctx.log, ctx.op = dim, log, op
        return y

    @staticmethod
    def backward(ctx, dy):
        (y,) = ctx.saved_tensors
        return _softmax_backward(ctx.op, y, dy, ctx.dim, ctx.log), None, None, None


def _softmax(op: str, x, dim, log: bool) -> torch.Tensor:
    check_float_tensor(op, "x", x)
    check_triton_device(op, "x", x)
    rank = max(x.dim(), 1)
    dim = check_int(op, "dim", dim, -rank, rank - 1, f"for x of shape {tuple(x.shape)}") % rank
    if debug_on():
        log_call(op, x=x, dim=dim)
    if x.requires_grad and torch.is_grad_enabled():
        return _SoftmaxFunction.apply(x, dim, log, op)
    return _softmax_forward(op, x, dim, log)


@public_op
def softmax(x: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """``exp(x) / sum(exp(x))`` along ``dim``, as a new tensor of x's dtype."""
    return _softmax("softmax", x, dim, False)


@public_op
def log_softmax(x: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """``x - log(sum(exp(x)))`` along ``dim``, as a new tensor of x's dtype."""
    return _softmax("log_softmax", x, dim, True)
