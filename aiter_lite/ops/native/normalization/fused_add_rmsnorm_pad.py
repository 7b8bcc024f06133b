"""aiter's ``fused_add_rmsnorm_pad`` in plain PyTorch (fp32 math): RMSNorm of x, or of ``x +
res`` with that sum returned too, its output padded with zero columns to a multiple of
``x_pad_to_multiple``."""

from __future__ import annotations

import torch


def _pad_norm(x: torch.Tensor, weight: torch.Tensor, epsilon: float, res: torch.Tensor | None,
              x_pad_to_multiple: int):
    s = x.float() if res is None else x.float() + res.float()
    y = s * torch.rsqrt(s.pow(2).mean(-1, keepdim=True) + epsilon) * weight.float()
    n, p = x.shape[-1], x_pad_to_multiple
    out = torch.nn.functional.pad(y, (0, -n % p if p > 0 else 0)).to(x.dtype)
    return out, None if res is None else s.to(res.dtype)


def rmsnorm_pad(x, weight, epsilon, x_pad_to_multiple=0):
    return _pad_norm(x, weight, epsilon, None, x_pad_to_multiple)[0]


def add_rmsnorm_pad(x, weight, epsilon, res, x_pad_to_multiple=0):
    return _pad_norm(x, weight, epsilon, res, x_pad_to_multiple)


def fused_add_rmsnorm_pad(x, weight, epsilon, res=None, x_pad_to_multiple=0):
    out, res_out = _pad_norm(x, weight, epsilon, res, x_pad_to_multiple)
    return out if res is None else (out, res_out)
