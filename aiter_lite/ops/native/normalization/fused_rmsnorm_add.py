"""aiter's ``fused_rmsnorm_add`` in plain PyTorch (fp32 math): RMSNorm of x, or of ``x + res1``
with that sum returned too."""

from __future__ import annotations

import torch

from aiter_lite.ops.native.normalization.rmsnorm import rms_norm


def fused_rmsnorm_add(x: torch.Tensor, weight: torch.Tensor, epsilon: float, res1: torch.Tensor | None = None):
    if res1 is None:
        return rms_norm(x, weight, epsilon)
    s = (x.float() + res1.float()).to(x.dtype)
    return rms_norm(s, weight, epsilon), s
