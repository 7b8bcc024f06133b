"""RoPE as a serving stack writes it in plain PyTorch, the torch.compile peer of bench_rope.py,
and the rotary tables the bench feeds every provider.

``rope`` follows vLLM's ``RotaryEmbedding.forward_static``: index the cos / sin rows by
position, rotate the rotary part in fp32 (``x1 * cos - x2 * sin``, ``x2 * cos + x1 * sin``
over NEOX halves or GPTJ pairs), cast back, and either build a new tensor (pass-through
channels concatenated) or ``copy_`` the rotary part back into the input. One function
covers every aiter op the bench times; which one is given by the tensors passed (None
where the op lacks them) and the Python flags, on which torch.compile specializes.
"""

from __future__ import annotations

import torch

NEOX, GPTJ = 0, 1  # aiter's RotateStyle values
ROPE_THETA = 10000.0


def angles(rows: int, rotary_dim: int, device) -> torch.Tensor:
    """(rows, rotary_dim / 2) fp32: position p, pair j turns by p * ROPE_THETA^(-2j / rotary_dim)."""
    inv_freq = ROPE_THETA ** (-torch.arange(0, rotary_dim, 2, device=device, dtype=torch.float32) / rotary_dim)
    return torch.arange(rows, device=device, dtype=torch.float32)[:, None] * inv_freq


def widen(half: torch.Tensor, rotate_style: int) -> torch.Tensor:
    """A half-width table as the full-width one (reuse_freqs_front_part=False): the NEOX
    halves or GPTJ pairs hold equal entries."""
    return torch.cat([half, half], dim=-1) if rotate_style == NEOX else half.repeat_interleave(2, dim=-1)


def _rows(table: torch.Tensor) -> torch.Tensor:
    """(rows, 1, 1, F) or (rows, F) as (rows, F)."""
    return table.reshape(-1, table.shape[-1])


def _halves(x: torch.Tensor, rotate_style: int):
    """The two members of every rotated pair: NEOX halves, GPTJ even / odd channels (views)."""
    if rotate_style == NEOX:
        return x.chunk(2, dim=-1)
    return x.unflatten(-1, (-1, 2)).unbind(-1)


def _join(a: torch.Tensor, b: torch.Tensor, rotate_style: int) -> torch.Tensor:
    return torch.cat((a, b), dim=-1) if rotate_style == NEOX else torch.stack((a, b), dim=-1).flatten(-2)


def _turn(x1, x2, cos, sin, rotate_style, reuse_freqs_front_part, backward):
    """The pairs (x1, x2), fp32, turned by tables broadcastable to (..., F)."""
    if not reuse_freqs_front_part:  # full-width tables: each channel has its own entry
        c1, c2 = _halves(cos, rotate_style)
        s1, s2 = _halves(sin, rotate_style)
        if backward:
            return x1 * c1 + x2 * s2, x2 * c2 - x1 * s1
        return x1 * c1 - x2 * s1, x2 * c2 + x1 * s2
    if backward:
        sin = -sin
    return x1 * cos - x2 * sin, x2 * cos + x1 * sin


def _apply(x, cos, sin, rotate_style, reuse_freqs_front_part, nope_first, inplace, backward):
    r = cos.shape[-1] * (2 if reuse_freqs_front_part else 1)
    lo = x.shape[-1] - r if nope_first else 0
    x1, x2 = _halves(x[..., lo:lo + r], rotate_style)
    o1, o2 = _turn(x1.float(), x2.float(), cos, sin, rotate_style, reuse_freqs_front_part, backward)
    if inplace:
        # Each output reads the other half of the row it overwrites, so Inductor stages results
        # before writing x back. Half by half is the cheapest form measured (H200, Q and K of
        # 32768 x 40 x 128 bf16): 409 us, against 567 us for one copy_ of the joined result
        # and 267 us out of place.
        x1.copy_(o1)
        x2.copy_(o2)
        return x
    return torch.cat((x[..., :lo], _join(o1, o2, rotate_style).to(x.dtype), x[..., lo + r:]), dim=-1)


def rope(x, y=None, cos=None, sin=None, freqs=None, positions=None, offsets=None, cu_seqlens=None, *,
         rotate_style: int, reuse_freqs_front_part: bool, nope_first: bool, inplace: bool = False,
         backward: bool = False):
    """``x`` (and ``y``: Q and K) rotated as the aiter op with these tensors does.

    Token rows: ``positions`` (+ ``offsets``) index ``cos`` / ``sin``; without positions,
    SBHD token (i, b) takes row i, and THD a token's place in its ``cu_seqlens`` sequence
    (the sequences cover every token). ``freqs`` holds angles in place of cos / sin.
    Returns the new tensor(s), or ``x`` (and ``y``) written in place.
    """
    tables = (cos, sin) if freqs is None else (freqs,)
    tables = [_rows(t) for t in tables]
    if positions is not None:
        index = positions if offsets is None else positions + offsets
        tables = [t[index] for t in tables]
    elif cu_seqlens is not None:
        tok = torch.arange(x.shape[0], device=x.device)
        bounds = cu_seqlens.long()
        seq = (torch.searchsorted(bounds, tok, right=True) - 1).clamp(0, bounds.numel() - 2)
        tables = [t[tok - bounds[seq]] for t in tables]
    else:
        tables = [t[: x.shape[0]].unsqueeze(1) for t in tables]
    tables = [t.float().unsqueeze(-2) for t in tables]  # broadcast over heads
    c, s = tables if freqs is None else (torch.cos(tables[0]), torch.sin(tables[0]))
    args = (c, s, rotate_style, reuse_freqs_front_part, nope_first, inplace, backward)
    if y is None:
        return _apply(x, *args)
    return _apply(x, *args), _apply(y, *args)


def wan_freqs(rows: int, pairs: int, device, dtype: torch.dtype = torch.complex128) -> torch.Tensor:
    """Wan 2.x's 3-D RoPE table: (rows, pairs) unit complex numbers, the frame, row and column
    bands side by side (pairs - 2 (pairs // 3), pairs // 3, pairs // 3), each Wan's rope_params."""
    parts = []
    for width in (pairs - 2 * (pairs // 3), pairs // 3, pairs // 3):
        inv = 1.0 / (ROPE_THETA ** (torch.arange(width, dtype=torch.float64) / (2 * max(width, 1))))
        parts.append(torch.polar(torch.ones(rows, width, dtype=torch.float64),
                                 torch.arange(rows, dtype=torch.float64)[:, None] * inv[None, :]))
    return torch.cat(parts, 1).to(dtype).to(device)


def wan_rope_apply(x: torch.Tensor, grid_sizes: torch.Tensor, freqs: torch.Tensor, sp_size: int,
                   sp_rank: int) -> torch.Tensor:
    """Wan 2.1's rope_apply in its sequence-parallel (xDiT / USP) form, as written there: a loop
    over the batch, fp64 complex multiplication, the freqs padded with ones past f * h * w."""
    s, n, c = x.size(1), x.size(2), x.size(3) // 2
    parts = freqs.split([c - 2 * (c // 3), c // 3, c // 3], dim=1)
    out = []
    for i, (f, h, w) in enumerate(grid_sizes.tolist()):
        seq_len = f * h * w
        xi = torch.view_as_complex(x[i, :s].to(torch.float64).reshape(s, n, -1, 2))
        fi = torch.cat([parts[0][:f].view(f, 1, 1, -1).expand(f, h, w, -1),
                        parts[1][:h].view(1, h, 1, -1).expand(f, h, w, -1),
                        parts[2][:w].view(1, 1, w, -1).expand(f, h, w, -1)], dim=-1).reshape(seq_len, 1, -1)
        fi = torch.cat([fi, fi.new_ones(max(s * sp_size - seq_len, 0), *fi.shape[1:])])
        xi = torch.view_as_real(xi * fi[sp_rank * s:(sp_rank + 1) * s]).flatten(2)
        out.append(torch.cat([xi, x[i, s:]]))
    return torch.stack(out).float()
