"""3-D RoPE of video tokens in plain PyTorch (fp32 math): the reference of
``aiter_lite.ops.triton.rope.rope_3d``, Wan 2.x's ``rope_apply`` written without host reads
(every batch entry's grid at once), a row past ``freqs`` NaN."""

from __future__ import annotations

import torch


def rope_fwd_3d(x, grid_sizes, freqs, sp_size, sp_rank):
    """x (B, S, heads, C) turned by 3-D RoPE, fp32."""
    b, s, n, c2 = x.shape
    c = c2 // 2
    c1, cc = c - 2 * (c // 3), c // 3
    dev = x.device
    gs = grid_sizes.to(device=dev, dtype=torch.long)
    f, h, w = gs[:, 0:1], gs[:, 1:2], gs[:, 2:3]  # (B, 1)
    g = sp_rank * s + torch.arange(s, device=dev)[None, :]  # (1, S) global token index
    turns = g < f * h * w  # (B, S)
    hw = (h * w).clamp(min=1)
    fi, hi, wi = g // hw, (g % hw) // w.clamp(min=1), g % w.clamp(min=1)
    j = torch.arange(c, device=dev)
    row = torch.where(j < c1, fi[..., None], torch.where(j < c1 + cc, hi[..., None], wi[..., None]))  # (B, S, c)
    rows = freqs.shape[0]
    inside = row < rows
    re, im = freqs.real.float(), freqs.imag.float()
    safe = row.clamp(max=rows - 1)
    cos = torch.where(inside, re[safe, j], float("nan"))
    sin = torch.where(inside, im[safe, j], float("nan"))
    xf = x.float().reshape(b, s, n, c, 2)
    x0, x1 = xf[..., 0], xf[..., 1]
    cos, sin = cos[:, :, None, :], sin[:, :, None, :]
    y = torch.stack([x0 * cos - x1 * sin, x0 * sin + x1 * cos], dim=-1).reshape(b, s, n, c2)
    return torch.where(turns[:, :, None, None], y, x.float())
