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
    SEGMENT: int = 0  # LOOPED forward: a row cut into SEGMENT-column segments (a multiple of BLOCK_N), a program each


# Measured on an H200 (bf16; copy 68 us at 2^26 elements): rows in registers up to 16384
# columns, the widest with 32 warps (16384: 73 us against 82 us with 8 warps). Wider rows
# that give every SM a program (_LOOP_FILL) are looped: one program a row, read in chunks
# twice, the first pass's reads kept in L2 (evict last) and the second's evicted first,
# so the rows in flight stay in L2 for their second read; rows past _LOOP_WHOLE columns
# are cut into _SEGMENT-column segments, a program each, that exchange their statistics
# between the passes (whole rows of 128K+ in flight overflow L2). Against the split in
# registers: 2048 x 32768 85.5 us (80% of copy; split 95.4), 16384 x 32768 614 (83%;
# 700, Liger 655), 1024 x 65536 88.4 (78%; 97.1; 32K segments 104), 256 x 262144 102.3
# (66%; 109.8), 4096 x 151936 869 (68%; 969), 1024 x 128256 191 (66%; 202); 16K chunks
# past 65536 columns 103-109, 64K segments 104-110; 32 x 262144 19.2 (split 21.2).
# Fewer rows split, which reads once and, keeping the exponentials, takes one exp per
# element (a row spread over 8 to 64 programs: 16 x 131072 10.0 us, looped 29):
# 4096-wide segments of 4 warps up to 131072 columns, 8192-wide beyond.
# Tried and slower (H200, bf16, 2^26 elements, copy 68 us): persistent split programs
# that step over segments (no ticket: 98-121 us; the same without waiting for the row's
# siblings 75-80 us, 85-91% of copy, so the wait for a row's slowest segment is the
# cost, not the ticket or the slots' release: generation-tagged slots that need no
# release took 96-156 us), and a persistent lagged two-pass (a segment's statistics
# published one step, its output written a step or two later from L2: 122-262 us, a
# poll a step).
_MAX_ROW_IN_REGS = 16384
_TILE = 2048
_SPLIT = SoftmaxLaunchConfig(1, 4096, 4, False, SPLIT=True)
_SPLIT_WIDE = SoftmaxLaunchConfig(1, 8192, 4, False, SPLIT=True)
_SPLIT_WIDE_FROM = 131072
_LOOP_FILL = 1  # looped from one program an SM (32768 wide: 128 rows 11.0 us looped, 11.5 split)
_LOOP_NARROW = 32768  # up to this many columns 8192-wide chunks, one row a program
_LOOP_WHOLE = 65536  # up to this many columns one row a program (16384-wide chunks past _LOOP_NARROW)
_SEGMENT = 32768  # wider rows: segments of at least this many columns, in 8192-wide chunks
_LOOP_WARPS = 16


def _register_split(n_cols: int, profile: DeviceProfile) -> SoftmaxLaunchConfig | None:
    """The split over programs holding their segment in registers, or None where a row's
    segments would pass half the SMs."""
    split = _SPLIT_WIDE if n_cols > _SPLIT_WIDE_FROM else _SPLIT
    if profile.arch == "sm_80" and split is _SPLIT:
        # ptxas for sm_80 gives a 4-warp log-softmax segment an 8 B stack frame; 8 warps
        # build in 32 registers without (scripts/check_targets.py)
        split = replace(split, num_warps=8)
    return split if cdiv(n_cols, split.BLOCK_N) <= grid_sms(profile) // 2 else None


def _looped(n_cols: int, profile: DeviceProfile) -> SoftmaxLaunchConfig:
    """The forward's looped launch (chunk, warps, segment) for rows of ``n_cols``: a row's
    segments no more than half the SMs."""
    warps = min(_LOOP_WARPS, profile.max_warps)
    if n_cols <= _LOOP_WHOLE:
        return SoftmaxLaunchConfig(1, 8192 if n_cols <= _LOOP_NARROW else 16384, warps, True)
    chunk = 8192
    segment = max(_SEGMENT, cdiv(cdiv(n_cols, max(grid_sms(profile) // 2, 1)), chunk) * chunk)
    return SoftmaxLaunchConfig(1, chunk, warps, True, SEGMENT=segment)


@functools.lru_cache(maxsize=1024)
def softmax_launch_config(n_rows: int, n_cols: int, profile: DeviceProfile = INTERPRETER) -> SoftmaxLaunchConfig:
    """Rows in registers (several per program when short, halved until the grid has two
    programs per SM) up to ``_MAX_ROW_IN_REGS`` columns; wider rows looped in chunks
    where they fill the GPU, else split over programs held in registers. The widest row
    in registers takes as many warps as a program may have (32 of 32 lanes, 16 of 64), an
    8192-wide row 16 elements a lane."""
    sms = grid_sms(profile)
    block_n = next_power_of_2(n_cols)
    if block_n > _MAX_ROW_IN_REGS:
        looped = _looped(n_cols, profile)
        split = _register_split(n_cols, profile)
        if split is not None and n_rows * cdiv(n_cols, looped.SEGMENT or n_cols) < _LOOP_FILL * sms:
            return split
        return looped
    block_m = min(max(_TILE // block_n, 1), next_power_of_2(n_rows))
    while block_m > 1 and cdiv(n_rows, block_m) < 2 * sms:
        block_m //= 2
    if block_n == _MAX_ROW_IN_REGS:
        warps = profile.max_warps
    elif block_m * block_n == 8192:  # 16 elements a lane (H200, 8192 x 8192: 69.1-69.6 us, 70.2-70.7 with 8 warps)
        warps = min(8192 // (16 * profile.warp_size), profile.max_warps)
    else:
        warps = profile.row_warps(block_m * block_n)
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
_BWD_WIDE = SoftmaxLaunchConfig(1, 8192, 8, True)  # rows too wide to split: one a program


def softmax_bwd_launch_config(n_rows: int, n_cols: int, profile: DeviceProfile = INTERPRETER) -> SoftmaxLaunchConfig:
    """The backward's launch: rows in registers as the forward's; wider rows split over
    programs holding y and dy (one read), or, too wide for that, looped one a program
    (``_BWD_WIDE``); rows of ``_BWD_LOOP_COLS`` columns looped in whole chunks of
    ``_BWD_LOOP`` where the rows fill the SMs. Its own name: what a test or a tuning run
    pins for the backward alone."""
    if n_cols == _BWD_LOOP_COLS and n_rows >= grid_sms(profile):
        return replace(_BWD_LOOP, num_warps=min(_BWD_LOOP.num_warps, profile.max_warps))
    if next_power_of_2(n_cols) > _MAX_ROW_IN_REGS:
        return _register_split(n_cols, profile) or _BWD_WIDE
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
        segment = cfg.SEGMENT if dy is None and 0 < cfg.SEGMENT < n_cols else 0
        even = n_cols % cfg.BLOCK_N == 0
        if segment:  # offsets from an int64 ticket
            n_segs, slots, phases = split_row_slots("softmax", n_rows, n_cols, segment, src.device, released=True)
        else:
            n_segs, slots, phases = 1, None, (0,)
        for phase in phases:
            launch(_softmax_looped_kernel, (n_rows * n_segs,), src, dy, dst, src.stride(0), stride_dy, dst.stride(0),
                   n_cols, slots, n_rows, n_segs, segment or n_cols, LOG=log, BACKWARD=dy is not None, INT64=int64,
                   SPLIT=segment > 0, PHASE=phase, BLOCK_N=cfg.BLOCK_N, BLOCK_S=next_power_of_2(n_segs),
                   EVEN=even and segment % cfg.BLOCK_N == 0, num_warps=cfg.num_warps)
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
