"""Normalization modules, drop-ins for vLLM / SGLang's RMSNorm, GemmaRMSNorm and a LayerNorm.

``forward(x)`` returns the normalized tensor; ``forward(x, residual)`` adds the
residual first and returns ``(out, residual_out)``, as vLLM's layers do. RMSNorm
does that in place (``x`` becomes the output, ``residual`` the sum: no allocation);
LayerNorm returns new tensors. The backend (AITER_NORMALIZATION_BACKEND, else
AITER_BACKEND) is read once, when the module is built.
"""

from __future__ import annotations

import torch
from torch import nn

from aiter_lite import envs
from aiter_lite.ops.native.normalization import layernorm as native_ln
from aiter_lite.ops.native.normalization import rmsnorm as native_rms
from aiter_lite.ops.triton.normalization import layernorm as triton_ln
from aiter_lite.ops.triton.normalization import rmsnorm as triton_rms


class _Norm(nn.Module):
    """hidden_size, eps and the backend's op module, checked and chosen once."""

    def __init__(self, hidden_size: int, eps: float, backend: str | None, triton_ops, native_ops):
        super().__init__()
        name = type(self).__name__
        if isinstance(hidden_size, bool) or not isinstance(hidden_size, int) or hidden_size < 1:
            raise ValueError(f"{name}: hidden_size must be a positive int, got {hidden_size!r}")
        self.backend = envs.layer_backend(name, "normalization", backend)
        self.hidden_size = hidden_size
        self.eps = eps
        self._ops = triton_ops if self.backend == "triton" else native_ops

    def extra_repr(self) -> str:
        return f"hidden_size={self.hidden_size}, eps={self.eps}, backend={self.backend}"


class RMSNorm(_Norm):
    """``x * rsqrt(mean(x^2) + eps) * (weight + weight_offset)`` over the last dim (vLLM's RMSNorm)."""

    weight_offset = 0.0

    def __init__(self, hidden_size: int, eps: float = 1e-6, has_weight: bool = True,
                 dtype: torch.dtype | None = None, backend: str | None = None):
        super().__init__(hidden_size, eps, backend, triton_rms, native_rms)
        init = torch.zeros if self.weight_offset else torch.ones
        self.weight = nn.Parameter(init(hidden_size, dtype=dtype)) if has_weight else None

    @property
    def variance_epsilon(self) -> float:  # vLLM's name
        return self.eps

    def forward(self, x: torch.Tensor, residual: torch.Tensor | None = None):
        if residual is None:
            return self._ops.rms_norm(x, self.weight, self.eps, self.weight_offset)
        self._ops.fused_add_rms_norm(x, residual, self.weight, self.eps, self.weight_offset)
        return x, residual


class GemmaRMSNorm(RMSNorm):
    """Gemma's RMSNorm: the weight starts at 0 and scales by ``1 + weight``."""

    weight_offset = 1.0

    def __init__(self, hidden_size: int, eps: float = 1e-6, dtype: torch.dtype | None = None,
                 backend: str | None = None):
        super().__init__(hidden_size, eps, True, dtype, backend)


class LayerNorm(_Norm):
    """LayerNorm over the last dim (``torch.nn.LayerNorm``'s arguments for one normalized dim)."""

    def __init__(self, hidden_size: int, eps: float = 1e-5, elementwise_affine: bool = True, bias: bool = True,
                 dtype: torch.dtype | None = None, backend: str | None = None):
        super().__init__(hidden_size, eps, backend, triton_ln, native_ln)
        self.weight = nn.Parameter(torch.ones(hidden_size, dtype=dtype)) if elementwise_affine else None
        self.bias = nn.Parameter(torch.zeros(hidden_size, dtype=dtype)) if elementwise_affine and bias else None

    def forward(self, x: torch.Tensor, residual: torch.Tensor | None = None):
        if residual is None:
            return self._ops.layer_norm(x, self.weight, self.bias, self.eps)
        out, residual_out = torch.empty_like(x), torch.empty_like(residual)
        self._ops.layernorm2d_fwd_with_add(out, x, residual, residual_out, self.weight, self.bias, self.eps)
        return out, residual_out
