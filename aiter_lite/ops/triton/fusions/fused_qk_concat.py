"""Q / K concatenation for MLA (aiter's names and argument orders): ``fused_qk_cat`` and
``fused_qk_rope_cat``, one launch for both tensors. Any part widths (aiter: powers of
two); a second part of one head serves every head (MLA's shared rope key)."""

from __future__ import annotations

import functools

import torch

from aiter_lite import envs
from aiter_lite.ops.triton._triton_kernels.fusions.fused_qk_concat import NO_EXTRAS, _cat_kernel
from aiter_lite.ops.triton.rope.rope import RopeLaunchConfig
from aiter_lite.ops.triton.fusions._common import (
    check_heads,
    check_positions,
    max_offset,
    rope_tables,
)
from aiter_lite.utils.checks import check_bool
from aiter_lite.utils.fast_launch import launch
from aiter_lite.utils.launch import cdiv, next_power_of_2
from aiter_lite.utils.launcher import launcher
from aiter_lite.utils.logger import debug_on, log_call
from aiter_lite.utils.registry import public_op

__all__ = ["fused_qk_cat", "fused_qk_rope_cat"]


def _check_parts(op: str, names: tuple[str, str, str, str], q1, q2, k1, k2) -> None:
    check_heads(op, names[0], q1)
    for name, t in zip(names[1:], (q2, k1, k2)):
        check_heads(op, name, t, names[0], q1)
    n, qh, d1 = q1.shape
    kh, d2 = k1.shape[1], q2.shape[2]
    if tuple(q2.shape[:2]) != (n, qh):
        raise ValueError(f"{op}: {names[1]} must have {names[0]}'s tokens and heads ({n}, {qh}), got {tuple(q2.shape)}")
    if k1.shape[0] != n or k1.shape[2] != d1:
        raise ValueError(f"{op}: {names[2]} must be ({n}, heads, {d1}) like {names[0]}, got {tuple(k1.shape)}")
    if tuple(k2.shape) not in ((n, kh, d2), (n, 1, d2)):
        raise ValueError(f"{op}: {names[3]} must be ({n}, {kh} or 1, {d2}) ({names[0]}'s tokens, {names[2]}'s heads "
                         f"or 1, {names[1]}'s width), got {tuple(k2.shape)}")
    if k1.dtype != q1.dtype:
        raise TypeError(f"{op}: {names[2]} must have {names[0]}'s dtype {q1.dtype}, got {k1.dtype}")
    if k2.dtype != q2.dtype:
        raise TypeError(f"{op}: {names[3]} must have {names[1]}'s dtype {q2.dtype}, got {k2.dtype}")


@functools.lru_cache(maxsize=1024)
def qk_cat_launch_config(n_tokens: int, n_heads: int, d: int) -> RopeLaunchConfig:
    """Tokens and heads per program for Q / K concatenation into ``d``-wide rows (``n_heads``
    the larger head count): 2048 elements a program, 2 warps below that."""
    block_h = min(next_power_of_2(n_heads), 16, max(1, 2048 // next_power_of_2(d)))
    block_t = max(1, min(next_power_of_2(n_tokens), 2048 // (block_h * next_power_of_2(d))))
    return RopeLaunchConfig(block_t, block_h, 4 if block_t * block_h * d >= 2048 else 2)


@launcher(mutates=("q_out", "k_out"))
def _launch_qk_cat(q1: torch.Tensor, q2: torch.Tensor, k1: torch.Tensor, k2: torch.Tensor, q_out: torch.Tensor,
                   k_out: torch.Tensor, pos: torch.Tensor | None, cos: torch.Tensor | None,
                   sin: torch.Tensor | None, geometry: list[int], flags: list[bool],
                   config: RopeLaunchConfig | None = None) -> None:
    """``_cat_kernel`` writing the concatenated (and, with ``pos``, rotated) Q and K."""
    n_rows, stride_r, stride_f, half = geometry
    is_neox, reuse = flags
    n_tokens, qh, d1 = q1.shape
    kh, d2 = k1.shape[1], q2.shape[2]
    if n_tokens == 0:
        return
    cfg = config or qk_cat_launch_config(n_tokens, max(qh, kh), d1 + d2)
    block_t, block_h = cfg.BLOCK_T, cfg.BLOCK_H
    s2 = k2.stride()
    s2 = (s2[0], 0 if k2.shape[1] == 1 else s2[1], s2[2])
    rope = pos is not None
    grid = (cdiv(n_tokens, block_t) * (cdiv(qh, block_h) + cdiv(kh, block_h)),)
    launch(
        _cat_kernel, grid,
        q1, q2, q_out, k1, k2, k_out, q1, pos if rope else q1, cos if rope else q1, sin if rope else q1, q1,
        *q1.stride(), *q2.stride(), *q_out.stride(), *k1.stride(), *s2,
        k_out.stride(0), 0, k_out.stride(1), k_out.stride(2), stride_r, stride_f,
        n_tokens, n_tokens, n_tokens, 1, n_rows, qh, kh, d1, d2, -1.0, 1.0, *NO_EXTRAS,
        ROPE=rope, IS_NEOX=is_neox, REUSE=reuse, DEST_SLOTS=False, HAS_SCALE=False, O1_FP8=False, O2_FP8=False,
        SOFT_ROUND=False, HALF=max(half, 1), BLOCK_HALF=next_power_of_2(max(half, 1)),
        BLOCK_D1=next_power_of_2(d1), BLOCK_D2=next_power_of_2(d2), BLOCK_T=block_t, BLOCK_H=block_h,
        INT64=max_offset(q1, q2, k1, k2, q_out, k_out) >= 2**31,
        num_warps=cfg.num_warps,
    )


def _cat(op: str, q1, q2, k1, k2, pos=None, tab=None, reuse=False, half=0, is_neox=True):
    n, qh, d1 = q1.shape
    d = d1 + q2.shape[2]
    q_out = torch.empty((n, qh, d), dtype=q1.dtype, device=q1.device)
    k_out = torch.empty((n, k1.shape[1], d), dtype=q1.dtype, device=q1.device)
    geometry = [1, 0, 0, half] if tab is None else [tab.rows, tab.stride_r, tab.stride_f, half]
    _launch_qk_cat(q1, q2, k1, k2, q_out, k_out, pos, None if tab is None else tab.cos,
                   None if tab is None else tab.sin, geometry, [is_neox, reuse])
    return q_out, k_out


@public_op(no_grad="no backward yet")
def fused_qk_cat(q1: torch.Tensor, q2: torch.Tensor, k1: torch.Tensor,
                 k2: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(cat(q1, q2, -1), cat(k1, k2, -1)), both in q1's dtype, in one launch: q1 [B, QH, D1],
    q2 [B, QH, D2], k1 [B, KH, D1], k2 [B, KH or 1, D2]."""
    op = "fused_qk_cat"
    _check_parts(op, ("q1", "q2", "k1", "k2"), q1, q2, k1, k2)
    if debug_on():
        log_call(op, q1=q1, q2=q2, k1=k1, k2=k2)
    return _cat(op, q1, q2, k1, k2)


@public_op(unless=envs.rope_check_positions, no_grad="no backward yet")
def fused_qk_rope_cat(q_nope: torch.Tensor, q_pe: torch.Tensor, k_nope: torch.Tensor, k_pe: torch.Tensor,
                      pos: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
                      is_neox: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """(cat(q_nope, rope(q_pe)), cat(k_nope, rope(k_pe))) in q_nope's dtype, in one launch;
    a table Dr wide rotates every channel of the pe parts, one F <= Dr / 2 wide (reused for
    both members of each pair) the first 2 F (the rest copied); rounded to q_pe's dtype
    first. pos [B]."""
    op = "fused_qk_rope_cat"
    _check_parts(op, ("q_nope", "q_pe", "k_nope", "k_pe"), q_nope, q_pe, k_nope, k_pe)
    is_neox = check_bool(op, "is_neox", is_neox)
    dr = q_pe.shape[2]
    tab, reuse, half = rope_tables(op, cos, sin, q_nope, dr, "q_nope", "q_pe")
    pos, _ = check_positions(op, "pos", pos, q_nope.shape[0], q_nope, tab.rows, ref_name="q_nope")
    if debug_on():
        log_call(op, q_nope=q_nope, q_pe=q_pe, k_nope=k_nope, k_pe=k_pe, pos=pos, cos=tab.cos, sin=tab.sin,
                 is_neox=is_neox)
    return _cat(op, q_nope, q_pe, k_nope, k_pe, pos, tab, reuse, half, is_neox)
