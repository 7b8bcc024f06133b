"""Gated-activation modules, drop-ins for vLLM / SGLang's SiluAndMul and GeluAndMul.

``forward(x)`` returns ``act(x[..., :d]) * x[..., d:]`` with d = x.shape[-1] // 2 (gate,
then up: a Llama MLP's ``act_fn(gate_proj(x)) * up_proj(x)`` on the merged projection).
``forward_native`` and ``forward_triton`` take the same argument; ``forward`` runs the one
picked when the module is built (``backend``, else AITER_ACTIVATION_BACKEND, else AITER_BACKEND).
The modules have no parameters.
"""

from __future__ import annotations

import torch

from aiter_lite.layers.base import BackendLayer
from aiter_lite.ops.native import activation as native_activation
from aiter_lite.ops.triton import activation as triton_activation
from aiter_lite.utils.checks import check_choice


class _ActAndMul(BackendLayer):
    family = "activation"

    def __init__(self, activation: str, backend: str | None = None):
        super().__init__(backend)
        self.activation = activation

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self._backend == "triton":
            return self.forward_triton(x)
        return self.forward_native(x)

    def forward_native(self, x: torch.Tensor) -> torch.Tensor:
        return self._act_and_mul(native_activation, x)

    def forward_triton(self, x: torch.Tensor) -> torch.Tensor:
        return self._act_and_mul(triton_activation, x)

    def _act_and_mul(self, ops, x: torch.Tensor) -> torch.Tensor:
        if not isinstance(x, torch.Tensor):
            raise TypeError(f"{type(self).__name__}: x must be a torch.Tensor, got {type(x).__name__}")
        if x.dim() == 0 or x.shape[-1] % 2:
            raise ValueError(f"{type(self).__name__}: x last dim must be even (gate, then up), "
                             f"got shape {tuple(x.shape)}")
        out = torch.empty((*x.shape[:-1], x.shape[-1] // 2), dtype=x.dtype, device=x.device)
        return ops.act_and_mul(out, x, self.activation)

    def extra_repr(self) -> str:
        return f"activation={self.activation}, backend={self.backend}"


class SiluAndMul(_ActAndMul):
    """``silu(x[..., :d]) * x[..., d:]`` with d = x.shape[-1] // 2."""

    def __init__(self, backend: str | None = None):
        super().__init__("silu", backend)


class GeluAndMul(_ActAndMul):
    """``gelu(x[..., :d]) * x[..., d:]``, exact or tanh-approximated GELU."""

    def __init__(self, approximate: str = "none", backend: str | None = None):
        check_choice("GeluAndMul", "approximate", approximate, ("none", "tanh"))
        super().__init__("gelu" if approximate == "none" else "gelu_tanh", backend)
        self.approximate = approximate
