"""aiter's ``rope_fwd_3d`` (``aiter.ops.triton.rope.rope``): Wan 2.x's 3-D RoPE of video
tokens under sequence parallelism, its argument order and its fp32 output.

Semantics are Wan's ``rope_apply``: batch b's tokens form the (f, h, w) grid of
``grid_sizes[b]``; this rank holds global tokens ``sp_rank * S`` to ``(sp_rank + 1) * S``;
channel pair j (channels 2j, 2j + 1) is multiplied by the complex ``freqs[row, j]``, row the
token's frame for the first C / 2 - 2 (C / 6) pairs, its grid row for the next C / 6, its
column for the last C / 6. Where aiter is limited this does more, and checks it:

* tokens past f * h * w (the last rank's padding) pass through unchanged, as in Wan (aiter
  leaves them unwritten: its output is ``torch.empty``);
* any even C (aiter: C / 2 <= 64, the rest unwritten) and any number of heads;
* a row past ``freqs`` gives NaN in that token (aiter clamps to the last row);
* complex64 or complex128 ``freqs`` read in place (aiter copies their planes each call);
  fp32 math throughout.
"""

from __future__ import annotations

import torch

from aiter_lite.ops.triton._triton_kernels.rope.rope_3d import _rope_3d_kernel
from aiter_lite.ops.triton.rope.rope import RopeLaunchConfig, rope_launch_config
from aiter_lite.spec.device import device_profile
from aiter_lite.utils.checks import check_float_tensor, check_int, check_same_device, check_triton_device
from aiter_lite.utils.fast_launch import launch
from aiter_lite.utils.launch import cdiv, next_power_of_2
from aiter_lite.utils.launcher import launcher
from aiter_lite.utils.logger import debug_on, log_call
from aiter_lite.utils.registry import public_op

__all__ = ["rope_fwd_3d"]


@launcher(mutates=("out",))
def _launch_rope_3d(x: torch.Tensor, table: torch.Tensor, grid_sizes: torch.Tensor, out: torch.Tensor,
                    sp_rank: int, config: RopeLaunchConfig | None = None) -> None:
    """x's pairs turned by freqs, ``table`` its (rows, C / 2, 2) real view (the real and
    imaginary parts: one tensor, so a launch plan maps it to the caller's freqs), into out
    (fp32, contiguous)."""
    b, s, n, c = x.shape
    if b * s * n == 0:
        return
    half = c // 2
    cfg = config or rope_launch_config(b * s, n, 0, c, device_profile(x.device))
    grid = (cdiv(s, cfg.BLOCK_T) * cdiv(n, cfg.BLOCK_H), b)
    launch(_rope_3d_kernel, grid, x, table, grid_sizes, out, x.stride(0), x.stride(1), x.stride(2), *table.stride(),
           grid_sizes.stride(0), grid_sizes.stride(1), s, n, table.shape[0], sp_rank,
           C1=half - 2 * (half // 3), C2=half // 3, HALF=half, BLOCK_HALF=next_power_of_2(half),
           BLOCK_T=cfg.BLOCK_T, BLOCK_H=cfg.BLOCK_H, INT64=max(x.numel(), (sp_rank + 1) * s * n * c) >= 2**31,
           num_warps=cfg.num_warps)


@public_op(no_grad="no backward yet")
def rope_fwd_3d(x: torch.Tensor, grid_sizes: torch.Tensor, freqs: torch.Tensor, sp_size: int,
                sp_rank: int) -> torch.Tensor:
    """x (B, S, heads, C) turned by 3-D RoPE (the module doc), as fp32 of x's shape.
    grid_sizes: (B, 3) ints (f, h, w), on x's device or the CPU; freqs: (rows, C / 2) complex; sp_size
    ranks, this one ``sp_rank``."""
    op = "rope_fwd_3d"
    check_float_tensor(op, "x", x)
    check_triton_device(op, "x", x)
    if x.dim() != 4 or x.shape[3] % 2:
        raise ValueError(f"{op}: x must be 4-D (batch, seq, heads, C) with C even, got shape {tuple(x.shape)}")
    if x.stride(3) != 1:
        raise ValueError(f"{op}: x's channels must be contiguous (last stride 1), got strides {tuple(x.stride())}")
    b, s, n, c = x.shape
    if not isinstance(grid_sizes, torch.Tensor):
        raise TypeError(f"{op}: grid_sizes must be a torch.Tensor of (f, h, w) per batch entry, got "
                        f"{type(grid_sizes).__name__}")
    if grid_sizes.dtype.is_floating_point or grid_sizes.dtype.is_complex or grid_sizes.dtype == torch.bool:
        raise TypeError(f"{op}: grid_sizes must hold integers, got {grid_sizes.dtype}")
    if grid_sizes.device != x.device and grid_sizes.device.type != "cpu":
        raise ValueError(f"{op}: grid_sizes must be on x's device {x.device} or the CPU, got {grid_sizes.device}")
    if tuple(grid_sizes.shape) != (b, 3):
        raise ValueError(f"{op}: grid_sizes must be (batch, 3) = ({b}, 3), got shape {tuple(grid_sizes.shape)}")
    if not isinstance(freqs, torch.Tensor):
        raise TypeError(f"{op}: freqs must be a complex torch.Tensor, got {type(freqs).__name__}")
    if freqs.dtype not in (torch.complex64, torch.complex128):
        raise TypeError(f"{op}: freqs must be complex64 or complex128 (Wan's table), got {freqs.dtype}")
    if freqs.dim() != 2 or freqs.shape[1] != c // 2:
        raise ValueError(f"{op}: freqs must be (rows, C / 2) = (rows, {c // 2}), got shape {tuple(freqs.shape)}")
    check_same_device(op, "freqs", freqs, "x", x)
    sp_size = check_int(op, "sp_size", sp_size, 1)
    sp_rank = check_int(op, "sp_rank", sp_rank, 0, sp_size - 1)
    grid_sizes = grid_sizes.to(device=x.device)  # a copy only where it is elsewhere
    planes = torch.view_as_real(freqs)  # (rows, C / 2, 2), no copy
    out = torch.empty(x.shape, dtype=torch.float32, device=x.device)
    if debug_on():
        log_call(op, x=x, grid_sizes=grid_sizes, freqs=freqs, sp_size=sp_size, sp_rank=sp_rank)
    _launch_rope_3d(x, planes, grid_sizes, out, sp_rank)
    return out
