"""RoPE's rules both backends follow: the two rotate styles and the checks of a style and
of a table's width against the head dim.

A table ``F`` wide rotates ``R = F * (2 if reuse_freqs_front_part else 1)`` channels (a
half-width table serves both halves, NEOX, or both members of each pair, GPTJ). The
KV-cache and MLA ops take no ``reuse_freqs_front_part``: their table's width decides.
"""

from __future__ import annotations

from enum import IntEnum


class RotateStyle(IntEnum):
    NEOX = 0  # halves: (x[j], x[j + R/2]) pairs
    GPTJ = 1  # interleaved: (x[2i], x[2i + 1]) pairs


def check_rotate_style(op: str, rotate_style) -> int:
    """``rotate_style`` as an int, 0 (NEOX) or 1 (GPTJ); a bool is refused (it would pass as
    0 / 1 and hide a swapped argument)."""
    if isinstance(rotate_style, bool) or rotate_style not in (RotateStyle.NEOX, RotateStyle.GPTJ):
        raise ValueError(f"{op}: rotate_style must be RotateStyle.NEOX (0) or RotateStyle.GPTJ (1), "
                         f"got {rotate_style!r}")
    return int(rotate_style)


def rotary_width(op: str, head_dim: int, table_width: int, reuse_freqs_front_part: bool, *,
                 table: str | None = None, x: str | None = None) -> int:
    """The rotated width R for a ``table_width``-wide table; a ValueError where it cannot fit.
    ``table`` and ``x``, where given, are the caller's names of the table and of the tensor
    whose head dim it must fit: the message names both."""
    r = table_width * (2 if reuse_freqs_front_part else 1)
    if r < 2 or r % 2 or r > head_dim:
        what = "a table" if table is None else table
        whose = "the head dim" if x is None else f"{x}'s head dim"
        raise ValueError(
            f"{op}: {what} {table_width} wide (reuse_freqs_front_part={reuse_freqs_front_part}) rotates {r} "
            f"channels; expected an even count from 2 up to {whose} {head_dim}")
    return r


def cache_rotary_reuse(op: str, head_dim: int, table_width: int, x: str | None = None) -> bool:
    """Whether a KV-cache / MLA op's table is reused for both members of a pair: a table
    ``head_dim`` wide is a full one; a narrower one (``head_dim / 2``, or less for a partial
    rotary part) serves both members of each pair. ``x``, where given, is the caller's name
    of the tensor whose head dim the table must fit."""
    if table_width < 1 or table_width > head_dim or (table_width != head_dim and 2 * table_width > head_dim):
        whose = "a head dim" if x is None else f"{x}'s head dim"
        raise ValueError(f"{op}: cos / sin must be {head_dim} wide (full) or at most {head_dim // 2} "
                         f"(reused for both members of a pair) for {whose} of {head_dim}, got {table_width}")
    return table_width != head_dim
