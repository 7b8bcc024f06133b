"""Softmax and log-softmax in plain PyTorch: fp32 math, the result in the input's dtype.

Same names and signatures as ``aiter_lite.ops.triton.softmax``; the reference the
tests compare against and the "native" backend.
"""

from __future__ import annotations

import torch


def softmax(x: torch.Tensor, dim: int = -1) -> torch.Tensor:
    return torch.softmax(x.float(), dim).to(x.dtype)


def log_softmax(x: torch.Tensor, dim: int = -1) -> torch.Tensor:
    return torch.log_softmax(x.float(), dim).to(x.dtype)
