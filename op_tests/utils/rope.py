"""RoPE test helpers: an independent fp64 reference built from index arithmetic, and inputs."""

from __future__ import annotations

import torch

from op_tests.utils.device import DEVICE


def table_index(r: int, style: int, reuse: bool) -> torch.Tensor:
    """Which table column each of the R rotated channels reads."""
    j = torch.arange(r)
    if not reuse:
        return j
    return j % (r // 2) if style == 0 else j // 2


def partner(r: int, style: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Each channel's pair partner and the sign its partner enters the forward with."""
    j = torch.arange(r)
    if style == 0:
        return (j + r // 2) % r, torch.where(j < r // 2, -1.0, 1.0).double()
    return j ^ 1, torch.where(j % 2 == 0, -1.0, 1.0).double()


def ref_rotate64(x, tables, style, reuse, nope_first, *, backward=False):
    """fp64 y for x (..., d) and a list of (cos, sin) tables broadcastable to (..., F), one per
    consecutive rotary part: y[j] = x[j] c[t(j)] + sign(j) x[p(j)] s[t(j)] (forward), its
    transpose y[j] = x[j] c[t(j)] - sign(j) x[p(j)] s[t(p(j))] (backward)."""
    x = x.double()
    d, f = x.shape[-1], tables[0][0].shape[-1]
    r = f * (2 if reuse else 1)
    lo = d - r * len(tables) if nope_first else 0
    t, (p, sign) = table_index(r, style, reuse), partner(r, style)
    t, p, sign = t.to(x.device), p.to(x.device), sign.to(x.device)
    y = x.clone()
    for i, (cos, sin) in enumerate(tables):
        c, s = cos.double()[..., t], sin.double()[..., t]
        xr = x[..., lo + i * r: lo + (i + 1) * r]
        if backward:
            y[..., lo + i * r: lo + (i + 1) * r] = xr * c - sign * xr[..., p] * s[..., p]
        else:
            y[..., lo + i * r: lo + (i + 1) * r] = xr * c + sign * xr[..., p] * s
    return y


def angles(rows: int, width: int, *, device=DEVICE) -> torch.Tensor:
    """Random angles in [-pi, pi) x a few turns: fresh per call."""
    return (torch.rand(rows, width, device=device, dtype=torch.float64) * 2 - 1) * 8.0
