"""What the native fusions share: RoPE as ``aiter_lite.ops.native.rope`` does it, on
cached cos / sin tables ``(rows, F)`` (unit dims between allowed), token ``t`` at row
``pos[t]`` (+ ``offsets[t]``), NEOX halves (``is_neox``) or GPTJ pairs, fp32 math, one
rounding to the output's dtype; and MLA's shared rope key."""

from __future__ import annotations

import torch

from aiter_lite.ops.native.rope.rope import _check_tables, rotate
from aiter_lite.spec.rope import RotateStyle, cache_rotary_reuse


def style(is_neox: bool) -> int:
    return RotateStyle.NEOX if is_neox else RotateStyle.GPTJ


def tables(cos, sin, pos, offsets=None):
    """cos / sin rows of the tokens, (T, 1, F): broadcast over heads."""
    p = pos.long() if offsets is None else pos.long() + offsets.long()
    return [(cos.reshape(-1, cos.shape[-1])[p][:, None, :], sin.reshape(-1, sin.shape[-1])[p][:, None, :])]


def rotate_qk(op: str, q, k, cos, sin, pos, offsets, is_neox: bool):
    """q and k (T, heads, d) rotated whole, the table's width deciding whether it is reused
    (the KV-cache and MLA ops take no ``reuse_freqs_front_part``)."""
    _check_tables(op, cos=cos, sin=sin)
    reuse = cache_rotary_reuse(op, q.shape[-1], cos.shape[-1])
    tabs, s = tables(cos, sin, pos, offsets), style(is_neox)
    return rotate(op, q, tabs, s, reuse, False), rotate(op, k, tabs, s, reuse, False)


def pe_heads(x: torch.Tensor, heads: int) -> torch.Tensor:
    """A (B, 1, D) part broadcast to ``heads`` heads (MLA's shared rope key)."""
    return x.expand(x.shape[0], heads, x.shape[2]) if x.shape[1] == 1 else x
