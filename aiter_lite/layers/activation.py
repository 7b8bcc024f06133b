"""Gated-activation modules, drop-ins for vLLM / SGLang's SiluAndMul and GeluAndMul.

The backend (AITER_ACTIVATION_BACKEND, else AITER_BACKEND) is read once, when the
module is built, so ``forward`` pays nothing to choose it.
"""

from __future__ import annotations

import torch
from torch import nn

from aiter_lite import envs
from aiter_lite.ops.native import activation as native_activation
from aiter_lite.ops.triton import activation as triton_activation


class _ActAndMul(nn.Module):
    def __init__(self, activation: str, backend: str | None = None):
        super().__init__()
        self.backend = envs.layer_backend(type(self).__name__, "activation", backend)
        self.activation = activation
        impl = triton_activation if self.backend == "triton" else native_activation
        self._act_and_mul = impl.act_and_mul

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = torch.empty((*x.shape[:-1], x.shape[-1] // 2), dtype=x.dtype, device=x.device)
        return self._act_and_mul(out, x, self.activation)

    def extra_repr(self) -> str:
        return f"activation={self.activation}, backend={self.backend}"


class SiluAndMul(_ActAndMul):
    """``silu(x[..., :d]) * x[..., d:]`` with d = x.shape[-1] // 2."""

    def __init__(self, backend: str | None = None):
        super().__init__("silu", backend)


class GeluAndMul(_ActAndMul):
    """``gelu(x[..., :d]) * x[..., d:]``, exact or tanh-approximated GELU."""

    def __init__(self, approximate: str = "none", backend: str | None = None):
        if approximate not in ("none", "tanh"):
            raise ValueError(f"GeluAndMul: approximate must be 'none' or 'tanh', got {approximate!r}")
        super().__init__("gelu" if approximate == "none" else "gelu_tanh", backend)
        self.approximate = approximate
