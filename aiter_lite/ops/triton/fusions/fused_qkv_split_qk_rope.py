"""A fused QKV projection split into Q, K and V with Q and K rotated, in one launch
(aiter's name and argument order). Any even head dim and any even rotary width up to it
(aiter: powers of two, a rotary part of head_dim or head_dim / 2)."""

from __future__ import annotations

import torch

from aiter_lite import envs
from aiter_lite.ops.triton._triton_kernels.fusions.fused_qkv_split_qk_rope import _qkv_split_rope_kernel
from aiter_lite.ops.triton.fusions._common import check_positions, max_offset
from aiter_lite.ops.triton.rope.rope import RopeLaunchConfig, _table, rope_launch_config
from aiter_lite.spec.device import device_profile
from aiter_lite.utils.checks import check_bool, check_float_tensor, check_int, check_triton_device, check_unit_last_stride
from aiter_lite.utils.fast_launch import launch
from aiter_lite.utils.launch import cdiv, next_power_of_2
from aiter_lite.utils.launcher import launcher
from aiter_lite.utils.logger import debug_on, log_call
from aiter_lite.utils.registry import public_op

__all__ = ["fused_qkv_split_qk_rope"]


@launcher(mutates=("q", "k", "v"))
def _launch_qkv_split_rope(qkv: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cos: torch.Tensor,
                           sin: torch.Tensor, pos: torch.Tensor, off: torch.Tensor | None, geometry: list[int],
                           flags: list[bool], config: RopeLaunchConfig | None = None) -> None:
    """qkv's rows split into q, k, v, with q and k rotated."""
    n_rows, stride_r, stride_f, half = geometry
    is_neox, reuse, nope_first = flags
    n_tokens, qh, d = q.shape
    kvh = k.shape[1]
    if n_tokens == 0:
        return
    cfg = config or rope_launch_config(n_tokens, qh, kvh, d, device_profile(q.device))
    rest = d - 2 * half
    grid = (cdiv(n_tokens, cfg.BLOCK_T) * (cdiv(qh, cfg.BLOCK_H) + 2 * cdiv(kvh, cfg.BLOCK_H)),)
    launch(
        _qkv_split_rope_kernel, grid,
        qkv, q, k, v, cos, sin, pos, pos if off is None else off, qkv.stride(0), stride_r, stride_f,
        n_tokens, n_rows, qh, kvh, d,
        HAS_OFFSETS=off is not None, IS_NEOX=is_neox, REUSE=reuse, NOPE_FIRST=nope_first, COPY_REST=rest > 0,
        HALF=half, BLOCK_HALF=next_power_of_2(half), BLOCK_REST=next_power_of_2(max(rest, 1)),
        BLOCK_D=next_power_of_2(d), BLOCK_T=cfg.BLOCK_T, BLOCK_H=cfg.BLOCK_H,
        INT64=max_offset(qkv, q, k, v) >= 2**31, num_warps=cfg.num_warps,
    )


def head_counts(op: str, qh, kvh, head_dim) -> tuple[int, int, int]:
    """qh, kvh, head_dim as ints >= 1, qh a multiple of kvh (the QKV-split ops' checks)."""
    qh, kvh, head_dim = (check_int(op, name, v, 1) for name, v in (("qh", qh), ("kvh", kvh), ("head_dim", head_dim)))
    if qh % kvh:
        raise ValueError(f"{op}: qh ({qh}) must be a multiple of kvh ({kvh})")
    return qh, kvh, head_dim


def qkv_rope_tables(op: str, qkv: torch.Tensor, cos, sin, positions, offsets, reuse: bool, head_dim: int) -> tuple:
    """The QKV-split ops' cos / sin table, rotary width R (even, 2 .. head_dim) and positions
    (+ offsets) of qkv's tokens: (table, R, positions, offsets)."""
    tab = _table(op, ("cos", "sin"), cos, sin, qkv, "qkv")
    r = tab.width * (2 if reuse else 1)
    if r < 2 or r % 2 or r > head_dim:
        raise ValueError(f"{op}: cos / sin {tab.width} wide (reuse_freqs_front_part={reuse}) rotate {r} channels; "
                         f"expected an even count from 2 up to head_dim {head_dim}")
    pos, off = check_positions(op, "positions", positions, qkv.shape[0], qkv, tab.rows, offsets, ref_name="qkv")
    return tab, r, pos, off


@public_op(unless=envs.rope_check_positions, no_grad="no backward yet")
def fused_qkv_split_qk_rope(qkv: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, positions: torch.Tensor,
                            qh: int, kvh: int, head_dim: int, is_neox: bool = True,
                            offsets: torch.Tensor | None = None, reuse_freqs_front_part: bool = True,
                            nope_first: bool = False) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(q [T, qh, head_dim], k [T, kvh, head_dim], v [T, kvh, head_dim]) from ``qkv``
    [T, (qh + 2 kvh) * head_dim] (rows ``[q heads | k heads | v heads]``), q and k rotated
    at ``positions`` (+ ``offsets``): R = F * (2 if reuse_freqs_front_part else 1) channels,
    the first R or (nope_first) the last; the rest and v copied."""
    op = "fused_qkv_split_qk_rope"
    check_float_tensor(op, "qkv", qkv)
    qh, kvh, head_dim = head_counts(op, qh, kvh, head_dim)
    if head_dim % 2:
        raise ValueError(f"{op}: head_dim must be even, got {head_dim}")
    width = (qh + 2 * kvh) * head_dim
    if qkv.dim() != 2 or qkv.shape[1] != width:
        raise ValueError(f"{op}: qkv must be 2-D (tokens, (qh + 2 * kvh) * head_dim) = (T, {width}), "
                         f"got shape {tuple(qkv.shape)}")
    check_unit_last_stride(op, "qkv", qkv)
    check_triton_device(op, "qkv", qkv)
    is_neox = check_bool(op, "is_neox", is_neox)
    reuse = check_bool(op, "reuse_freqs_front_part", reuse_freqs_front_part)
    nope_first = check_bool(op, "nope_first", nope_first)
    tab, r, pos, off = qkv_rope_tables(op, qkv, cos, sin, positions, offsets, reuse, head_dim)
    n_tokens = qkv.shape[0]
    if debug_on():
        log_call(op, qkv=qkv, cos=tab.cos, sin=tab.sin, positions=pos, qh=qh, kvh=kvh, head_dim=head_dim,
                 is_neox=is_neox, offsets=off, reuse_freqs_front_part=reuse, nope_first=nope_first)
    q = torch.empty((n_tokens, qh, head_dim), dtype=qkv.dtype, device=qkv.device)
    k = torch.empty((n_tokens, kvh, head_dim), dtype=qkv.dtype, device=qkv.device)
    v = torch.empty((n_tokens, kvh, head_dim), dtype=qkv.dtype, device=qkv.device)
    _launch_qkv_split_rope(qkv, q, k, v, tab.cos, tab.sin, pos, off, [tab.rows, tab.stride_r, tab.stride_f, r // 2],
            [is_neox, reuse, nope_first])
    return q, k, v
