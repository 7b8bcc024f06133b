"""Rotary position embedding in plain PyTorch: fp32 math from the tables' own precision,
results cast to the input's dtype.

Same names and argument order as ``aiter_lite.ops.triton.rope`` (aiter's). Each op
rotates the ``R``-wide rotary part of the head dim of every token with the table row
its layout assigns to it, and passes the other ``d - R`` channels through:

* ``R = F * (2 if reuse_freqs_front_part else 1)`` for a table ``F`` wide: a
  half-width table serves both halves (NEOX) or both members of each pair (GPTJ).
* the rotary part is ``x[..., :R]``, or ``x[..., d - R:]`` with ``nope_first``.
* forward ``y = x * cos + rotate(x) * sin``; NEOX ``rotate(x) = [-x2, x1]`` over the
  halves, GPTJ ``[-x1, x0, -x3, x2, ...]`` over interleaved pairs.
* backward (the ``*_bwd`` ops, given the output's gradient ``g``): the exact transpose,
  ``g * cos - rotate(g * sin)``, which is rotation by the negative angle whenever the
  table's paired entries are equal.

Differentiable through autograd (including with respect to the tables), which makes
it the backward reference too.
"""

from __future__ import annotations

import torch

from aiter_lite.spec.rope import RotateStyle, check_rotate_style, rotary_width


def _wide(t: torch.Tensor) -> torch.Tensor:
    """fp32 math, or fp64 where the input is fp64 (gradcheck)."""
    return t if t.dtype == torch.float64 else t.float()


def _full_width(table: torch.Tensor, rotate_style: int, reuse: bool) -> torch.Tensor:
    if not reuse:
        return table
    if rotate_style == RotateStyle.NEOX:
        return torch.cat([table, table], dim=-1)
    return table.repeat_interleave(2, dim=-1)


def _rotate(x: torch.Tensor, rotate_style: int) -> torch.Tensor:
    if rotate_style == RotateStyle.NEOX:
        x1, x2 = x.chunk(2, dim=-1)
        return torch.cat([-x2, x1], dim=-1)
    return torch.stack([-x[..., 1::2], x[..., 0::2]], dim=-1).flatten(-2)


def _rotate_part(xr, cos, sin, rotate_style, reuse, backward):
    """The rotary part ``xr`` (fp32, ..., R) turned by tables broadcastable to (..., F)."""
    c = _full_width(_wide(cos), rotate_style, reuse)
    s = _full_width(_wide(sin), rotate_style, reuse)
    if backward:
        return xr * c - _rotate(xr * s, rotate_style)
    return xr * c + _rotate(xr, rotate_style) * s


def rotate(op: str, x: torch.Tensor, tables, rotate_style: int, reuse_freqs_front_part: bool, nope_first: bool,
           *, backward: bool = False) -> torch.Tensor:
    """``x`` (..., d) with consecutive rotary parts turned by ``tables``, a list of (cos, sin)
    pairs broadcastable to (..., F): one pair for 1-D RoPE, (height, width) for 2-D. A new
    tensor of x's dtype."""
    style = check_rotate_style(op, rotate_style)
    d = x.shape[-1]
    widths = [t.shape[-1] for pair in tables for t in pair]  # a list: symbolic sizes do not hash
    if any(w != widths[0] for w in widths):
        raise ValueError(f"{op}: every cos / sin table must be equally wide, got widths {widths}")
    r = rotary_width(op, d, widths[0], reuse_freqs_front_part)
    if r * len(tables) > d:
        raise ValueError(f"{op}: {len(tables)} rotary parts of {r} channels do not fit the head dim {d}")
    xf = _wide(x)
    lo = d - r * len(tables) if nope_first else 0
    parts = [xf[..., :lo]]
    for i, (cos, sin) in enumerate(tables):
        xr = xf[..., lo + i * r: lo + (i + 1) * r]
        parts.append(_rotate_part(xr, cos, sin, style, reuse_freqs_front_part, backward))
    parts.append(xf[..., lo + r * len(tables):])
    return torch.cat(parts, dim=-1).to(x.dtype)


def _write_back(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """In place: channels whose value did not change keep their bits (NaN payloads, -0.0)."""
    same = (y == x) | (y.isnan() & x.isnan())
    x.copy_(torch.where(same, x, y))
    return x


def _transposed(y: torch.Tensor, transpose_output: bool) -> torch.Tensor:
    """With ``transpose_output`` the (s, b, ...) result lies in (b, s, ...) memory, so that
    ``out.transpose(0, 1)`` is contiguous."""
    if not transpose_output:
        return y
    out = torch.empty((y.shape[1], y.shape[0], *y.shape[2:]), dtype=y.dtype, device=y.device).transpose(0, 1)
    return out.copy_(y)


def _rows(table: torch.Tensor) -> torch.Tensor:
    """A table laid out (rows, 1, 1, F), (1, rows, 1, F) (2-D) or (rows, F), as (rows, F)."""
    if sum(1 for n in table.shape[:-1] if n != 1) > 1:  # counted by guards: symbolic sizes do not sum as bools
        raise ValueError(f"rope: a table is (rows, F) with any unit dims between, got shape {tuple(table.shape)}")
    return table.flatten(0, -2) if table.dim() > 1 else table[None]


def _sbhd_tables(freqs: torch.Tensor, s: int):
    f = _wide(_rows(freqs)[:s])[:, None, None, :]
    return [(torch.cos(f), torch.sin(f))]


def _check_tables(op: str, **tables) -> None:
    """A TypeError naming the first of ``tables`` (the caller's names) that is not a tensor:
    a cached op takes both cos and sin (a None sin is no angle table)."""
    for name, t in tables.items():
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{op}: {name} must be a torch.Tensor, got {type(t).__name__}")


def _cached_tables(cos, sin, index):
    """Rows of cached cos/sin at ``index`` (any shape): (*index.shape, F)."""
    return _rows(cos)[index], _rows(sin)[index]


def _positions(positions: torch.Tensor, offsets: torch.Tensor | None) -> torch.Tensor:
    pos = positions.long()
    return pos if offsets is None else pos + offsets.long()


# SBHD, raw angles: x (s, b, h, d), freqs (>= s, 1, 1, F); token (i, b) uses row i.

def rope_fwd(x, freqs, rotate_style, reuse_freqs_front_part, nope_first, transpose_output=False):
    y = rotate("rope_fwd", x, _sbhd_tables(freqs, x.shape[0]), rotate_style, reuse_freqs_front_part, nope_first)
    return _transposed(y, transpose_output)


def rope_fwd_inplace(x, freqs, rotate_style, reuse_freqs_front_part, nope_first, transpose_output=False):
    y = rotate("rope_fwd_inplace", x, _sbhd_tables(freqs, x.shape[0]), rotate_style, reuse_freqs_front_part,
               nope_first)
    return _write_back(x, y)


def rope_bwd(x, freqs, rotate_style, reuse_freqs_front_part, nope_first, transpose_output=False):
    y = rotate("rope_bwd", x, _sbhd_tables(freqs, x.shape[0]), rotate_style, reuse_freqs_front_part, nope_first,
               backward=True)
    return _transposed(y, transpose_output)


# THD varlen, raw angles: x (t, h, d), cu_seqlens (B + 1,); a token uses the row of its
# position inside its sequence. Tokens past cu_seqlens[-1] pass through unrotated.

def _thd(op, x, cu_seqlens, freqs, rotate_style, reuse, nope_first, backward):
    t = x.shape[0]
    cu = cu_seqlens.long().to(x.device).contiguous()  # any strides (searchsorted wants one)
    tok = torch.arange(t, device=x.device)
    seq = torch.searchsorted(cu[1:], tok, right=True).clamp(max=max(cu.numel() - 2, 0))
    covered = tok < cu[-1] if cu.numel() > 1 else torch.zeros_like(tok, dtype=torch.bool)
    pos = torch.where(covered, tok - cu[seq], 0)
    f = _wide(_rows(freqs))[pos][:, None, :]
    y = rotate(op, x, [(torch.cos(f), torch.sin(f))], rotate_style, reuse, nope_first, backward=backward)
    return torch.where(covered[:, None, None], y, x)


def rope_thd_fwd(x, cu_seqlens, freqs, rotate_style, reuse_freqs_front_part, nope_first, transpose_output=False):
    return _thd("rope_thd_fwd", x, cu_seqlens, freqs, rotate_style, reuse_freqs_front_part, nope_first, False)


def rope_thd_fwd_inplace(x, cu_seqlens, freqs, rotate_style, reuse_freqs_front_part, nope_first,
                         transpose_output=False):
    return _write_back(x, _thd("rope_thd_fwd_inplace", x, cu_seqlens, freqs, rotate_style,
                               reuse_freqs_front_part, nope_first, False))


def rope_thd_bwd(x, cu_seqlens, freqs, rotate_style, reuse_freqs_front_part, nope_first, transpose_output=False):
    return _thd("rope_thd_bwd", x, cu_seqlens, freqs, rotate_style, reuse_freqs_front_part, nope_first, True)


# SBHD, cached cos / sin (rows, 1, 1, F): token (i, b) uses row i, or positions[i, b]
# (+ offsets[i, b]).

def _sbhd_cached(op, x, cos, sin, positions, offsets, rotate_style, reuse, nope_first, backward, transpose_output):
    _check_tables(op, cos=cos, sin=sin)
    s, b = x.shape[:2]
    index = torch.arange(s, device=x.device)[:, None] if positions is None else _positions(positions, offsets)
    c, sn = _cached_tables(cos, sin, index.expand(s, b) if positions is None else index)
    y = rotate(op, x, [(c[:, :, None, :], sn[:, :, None, :])], rotate_style, reuse, nope_first, backward=backward)
    return _transposed(y, transpose_output)


def rope_cached_fwd(x, cos, sin, rotate_style, reuse_freqs_front_part, nope_first, transpose_output=False):
    return _sbhd_cached("rope_cached_fwd", x, cos, sin, None, None, rotate_style, reuse_freqs_front_part,
                        nope_first, False, transpose_output)


def rope_cached_fwd_inplace(x, cos, sin, rotate_style, reuse_freqs_front_part, nope_first, transpose_output=False):
    return _write_back(x, _sbhd_cached("rope_cached_fwd_inplace", x, cos, sin, None, None, rotate_style,
                                       reuse_freqs_front_part, nope_first, False, False))


def rope_cached_bwd(x, cos, sin, rotate_style, reuse_freqs_front_part, nope_first, transpose_output=False):
    return _sbhd_cached("rope_cached_bwd", x, cos, sin, None, None, rotate_style, reuse_freqs_front_part,
                        nope_first, True, transpose_output)


def rope_cached_positions_fwd(x, cos, sin, positions, rotate_style, reuse_freqs_front_part, nope_first,
                              transpose_output=False):
    return _sbhd_cached("rope_cached_positions_fwd", x, cos, sin, positions, None, rotate_style,
                        reuse_freqs_front_part, nope_first, False, transpose_output)


def rope_cached_positions_fwd_inplace(x, cos, sin, positions, rotate_style, reuse_freqs_front_part, nope_first,
                                      transpose_output=False):
    return _write_back(x, _sbhd_cached("rope_cached_positions_fwd_inplace", x, cos, sin, positions, None,
                                       rotate_style, reuse_freqs_front_part, nope_first, False, False))


def rope_cached_positions_bwd(x, cos, sin, positions, rotate_style, reuse_freqs_front_part, nope_first,
                              transpose_output=False):
    return _sbhd_cached("rope_cached_positions_bwd", x, cos, sin, positions, None, rotate_style,
                        reuse_freqs_front_part, nope_first, True, transpose_output)


def rope_cached_positions_offsets_fwd(x, cos, sin, positions, offsets, rotate_style, reuse_freqs_front_part,
                                      nope_first, transpose_output=False):
    return _sbhd_cached("rope_cached_positions_offsets_fwd", x, cos, sin, positions, offsets, rotate_style,
                        reuse_freqs_front_part, nope_first, False, transpose_output)


def rope_cached_positions_offsets_fwd_inplace(x, cos, sin, positions, offsets, rotate_style,
                                              reuse_freqs_front_part, nope_first, transpose_output=False):
    return _write_back(x, _sbhd_cached("rope_cached_positions_offsets_fwd_inplace", x, cos, sin, positions,
                                       offsets, rotate_style, reuse_freqs_front_part, nope_first, False, False))


def rope_cached_positions_offsets_bwd(x, cos, sin, positions, offsets, rotate_style, reuse_freqs_front_part,
                                      nope_first, transpose_output=False):
    return _sbhd_cached("rope_cached_positions_offsets_bwd", x, cos, sin, positions, offsets, rotate_style,
                        reuse_freqs_front_part, nope_first, True, transpose_output)


# "2c": Q x (t, qh, d) and K y (t, kh, d) together, cached cos / sin (rows, F), token t at
# row positions[t] (+ offsets[t]).

def _two(op, x, y, cos, sin, positions, offsets, rotate_style, reuse, nope_first, backward):
    _check_tables(op, cos=cos, sin=sin)
    c, s = _cached_tables(cos, sin, _positions(positions, offsets))
    tables = [(c[:, None, :], s[:, None, :])]
    return (rotate(op, x, tables, rotate_style, reuse, nope_first, backward=backward),
            rotate(op, y, tables, rotate_style, reuse, nope_first, backward=backward))


def rope_cached_thd_positions_2c_fwd(x, y, cos, sin, positions, rotate_style, reuse_freqs_front_part, nope_first,
                                     transpose_output=False):
    return _two("rope_cached_thd_positions_2c_fwd", x, y, cos, sin, positions, None, rotate_style,
                reuse_freqs_front_part, nope_first, False)


def rope_cached_thd_positions_2c_fwd_inplace(x, y, cos, sin, positions, rotate_style, reuse_freqs_front_part,
                                             nope_first, transpose_output=False):
    ox, oy = _two("rope_cached_thd_positions_2c_fwd_inplace", x, y, cos, sin, positions, None, rotate_style,
                  reuse_freqs_front_part, nope_first, False)
    return _write_back(x, ox), _write_back(y, oy)


def rope_cached_thd_positions_2c_bwd(x, y, cos, sin, positions, rotate_style, reuse_freqs_front_part, nope_first,
                                     transpose_output=False):
    return _two("rope_cached_thd_positions_2c_bwd", x, y, cos, sin, positions, None, rotate_style,
                reuse_freqs_front_part, nope_first, True)


def rope_cached_thd_positions_offsets_2c_fwd(x, y, cos, sin, positions, offsets, rotate_style,
                                             reuse_freqs_front_part, nope_first, transpose_output=False):
    return _two("rope_cached_thd_positions_offsets_2c_fwd", x, y, cos, sin, positions, offsets, rotate_style,
                reuse_freqs_front_part, nope_first, False)


def rope_cached_thd_positions_offsets_2c_fwd_inplace(x, y, cos, sin, positions, offsets, rotate_style,
                                                     reuse_freqs_front_part, nope_first, transpose_output=False):
    ox, oy = _two("rope_cached_thd_positions_offsets_2c_fwd_inplace", x, y, cos, sin, positions, offsets,
                  rotate_style, reuse_freqs_front_part, nope_first, False)
    return _write_back(x, ox), _write_back(y, oy)


def rope_cached_thd_positions_offsets_2c_bwd(x, y, cos, sin, positions, offsets, rotate_style,
                                             reuse_freqs_front_part, nope_first, transpose_output=False):
    return _two("rope_cached_thd_positions_offsets_2c_bwd", x, y, cos, sin, positions, offsets, rotate_style,
                reuse_freqs_front_part, nope_first, True)


# 2-D image: x (b, img_height * img_width, h, d), tokens in row-major order; the first
# rotary part turns by the height table at the token's row, the next by the width table at
# its column (tables (1, rows, 1, F) or (rows, F)).

def _2d(op, x, cos_h, sin_h, cos_w, sin_w, img_height, img_width, rotate_style, reuse, nope_first, backward):
    _check_tables(op, cos_h=cos_h, sin_h=sin_h, cos_w=cos_w, sin_w=sin_w)
    img_height, img_width = int(img_height), int(img_width)
    if x.shape[1] != img_height * img_width:
        raise ValueError(f"{op}: x has {x.shape[1]} tokens per image, expected img_height * img_width = "
                         f"{img_height} * {img_width} = {img_height * img_width}")
    tok = torch.arange(x.shape[1], device=x.device)
    (ch, sh), (cw, sw) = _cached_tables(cos_h, sin_h, tok // img_width), _cached_tables(cos_w, sin_w, tok % img_width)
    tables = [(ch[None, :, None, :], sh[None, :, None, :]), (cw[None, :, None, :], sw[None, :, None, :])]
    return rotate(op, x, tables, rotate_style, reuse, nope_first, backward=backward)


def rope_fwd_2d(x, cos_h, sin_h, cos_w, sin_w, img_height, img_width, rotate_style, reuse_freqs_front_part,
                nope_first, transpose_output=False):
    y = _2d("rope_fwd_2d", x, cos_h, sin_h, cos_w, sin_w, img_height,
            img_width, rotate_style, reuse_freqs_front_part, nope_first, False)
    return _transposed(y, transpose_output)


def rope_fwd_2d_inplace(x, cos_h, sin_h, cos_w, sin_w, img_height, img_width, rotate_style,
                        reuse_freqs_front_part, nope_first, transpose_output=False):
    y = _2d("rope_fwd_2d_inplace", x, cos_h, sin_h, cos_w, sin_w,
            img_height, img_width, rotate_style, reuse_freqs_front_part, nope_first, False)
    return _write_back(x, y)


def rope_bwd_2d(x, cos_h, sin_h, cos_w, sin_w, img_height, img_width, rotate_style, reuse_freqs_front_part,
                nope_first, transpose_output=False):
    y = _2d("rope_bwd_2d", x, cos_h, sin_h, cos_w, sin_w, img_height,
            img_width, rotate_style, reuse_freqs_front_part, nope_first, True)
    return _transposed(y, transpose_output)


from aiter_lite.ops.native.rope.rope_3d import rope_fwd_3d  # noqa: E402  (aiter's module holds it)
