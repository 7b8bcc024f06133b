"""aiter's ``fused_mul_add`` in plain PyTorch (fp32 math): ``out = x * a + b`` (into x without
out), elements in memory order. The reference of ``aiter_lite.ops.triton.fusions.fused_mul_add``."""

from __future__ import annotations

import torch

__all__ = ["fused_mul_add"]


def _flat(v, n: int):
    if isinstance(v, torch.Tensor):
        return v.float().reshape(-1) if v.numel() == n else v.float().reshape(())
    return float(v)


def fused_mul_add(x: torch.Tensor, a, b, out: torch.Tensor | None = None) -> torch.Tensor:
    n = x.numel()
    y = x.float().reshape(-1) * _flat(a, n) + _flat(b, n)
    dst = x if out is None else out
    dst.view(-1).copy_(y)
    return dst
