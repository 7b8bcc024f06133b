"""``vllm.model_executor.layers.layernorm`` on aiter_lite: ``RMSNorm`` and ``GemmaRMSNorm`` with
vLLM's constructors, ``forward_native`` (vLLM's reference: new tensors, the inputs left as
they are) and ``forward_cuda`` / ``forward_hip`` (this project's kernels: a new output, or with
a residual vLLM's in-place ``fused_add_rms_norm``, returning ``(x, residual)``)."""

from __future__ import annotations

import torch
import torch.nn as nn

from aiter_lite.ops.triton.normalization import rmsnorm as triton_rmsnorm
from aiter_lite.vllm import _core_ops as ops
from aiter_lite.vllm.model_executor.custom_op import CustomOp

__all__ = ["RMSNorm", "GemmaRMSNorm", "rms_norm", "fused_add_rms_norm"]


def rms_norm(x: torch.Tensor, weight: torch.Tensor | None, variance_epsilon: float) -> torch.Tensor:
    """vLLM's layernorm.rms_norm: a new output through ``ops.rms_norm``."""
    out = torch.empty_like(x)
    ops.rms_norm(out, x, weight, variance_epsilon)
    return out


def fused_add_rms_norm(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor | None,
                       variance_epsilon: float) -> tuple[torch.Tensor, torch.Tensor]:
    """vLLM's layernorm.fused_add_rms_norm: in place; returns (x, residual)."""
    ops.fused_add_rms_norm(x, residual, weight, variance_epsilon)
    return x, residual


@CustomOp.register("rms_norm")
class RMSNorm(CustomOp):
    """vLLM's ``RMSNorm(hidden_size, eps, var_hidden_size, has_weight, dtype)``."""

    def __init__(self, hidden_size: int, eps: float = 1e-6, var_hidden_size: int | None = None,
                 has_weight: bool = True, dtype: torch.dtype | None = None, **custom_op_kwargs) -> None:
        super().__init__(**custom_op_kwargs)
        self.hidden_size = hidden_size
        self.variance_epsilon = eps
        self.variance_size_override = None if var_hidden_size == hidden_size else var_hidden_size
        self.has_weight = has_weight
        weight = torch.ones(hidden_size, dtype=dtype) if dtype is not None else torch.ones(hidden_size)
        self.weight = nn.Parameter(weight) if has_weight else weight

    def forward_native(self, x: torch.Tensor, residual: torch.Tensor | None = None):
        """vLLM's reference, out of place."""
        orig_dtype = x.dtype
        x = x.to(torch.float32)
        if residual is not None:
            x = x + residual.to(torch.float32)
            residual = x.to(orig_dtype)
        hidden_size = x.shape[-1]
        if hidden_size != self.hidden_size:
            raise ValueError(f"RMSNorm: expected hidden_size {self.hidden_size}, got {hidden_size}")
        if self.variance_size_override is None:
            x_var = x
        else:
            if hidden_size < self.variance_size_override:
                raise ValueError(f"RMSNorm: expected hidden_size at least {self.variance_size_override}, got "
                                 f"{hidden_size}")
            x_var = x[..., :self.variance_size_override]
        variance = x_var.pow(2).mean(dim=-1, keepdim=True)
        x = (x * torch.rsqrt(variance + self.variance_epsilon)).to(orig_dtype)
        if self.has_weight:
            x = x * self.weight
        return x if residual is None else (x, residual)

    def forward_cuda(self, x: torch.Tensor, residual: torch.Tensor | None = None):
        if self.variance_size_override is not None:
            return self.forward_native(x, residual)
        weight = self.weight.data if self.has_weight else None
        if residual is not None:
            return fused_add_rms_norm(x, residual, weight, self.variance_epsilon)
        return rms_norm(x, weight, self.variance_epsilon)

    def extra_repr(self) -> str:
        return f"hidden_size={self.hidden_size}, eps={self.variance_epsilon}"


@CustomOp.register("gemma_rms_norm")
class GemmaRMSNorm(CustomOp):
    """vLLM's ``GemmaRMSNorm(hidden_size, eps)``: ``x * (1 + w)``, the product rounded once."""

    def __init__(self, hidden_size: int, eps: float = 1e-6, **custom_op_kwargs) -> None:
        super().__init__(**custom_op_kwargs)
        self.weight = nn.Parameter(torch.zeros(hidden_size))
        self.variance_epsilon = eps

    @staticmethod
    def forward_static(weight: torch.Tensor, variance_epsilon: float, x: torch.Tensor,
                       residual: torch.Tensor | None):
        """vLLM's reference."""
        orig_dtype = x.dtype
        if residual is not None:
            x = x.float() + residual.float() if orig_dtype == torch.float16 else x + residual
            residual = x
        x = x.float()
        variance = x.pow(2).mean(dim=-1, keepdim=True)
        x = x * torch.rsqrt(variance + variance_epsilon)
        x = (x * (1.0 + weight.float())).to(orig_dtype)
        return x if residual is None else (x, residual)

    def forward_native(self, x: torch.Tensor, residual: torch.Tensor | None = None):
        return self.forward_static(self.weight.data, self.variance_epsilon, x, residual)

    def forward_cuda(self, x: torch.Tensor, residual: torch.Tensor | None = None):
        """This project's kernels, Gemma's rounding (all in fp32, one rounding): a new output,
        and with a residual a new ``x + residual`` (in the dtype; fp32 then rounded for fp16,
        as vLLM's reference)."""
        weight = self.weight.data
        if residual is None:
            return triton_rmsnorm.rms_norm(x, weight, self.variance_epsilon, 1.0, casting_mode="gemma")
        out, res = torch.empty_like(x), torch.empty_like(x)
        triton_rmsnorm.rmsnorm2d_fwd_with_add(out, x, residual, res, weight, self.variance_epsilon, 1.0,
                                              casting_mode="gemma")
        return out, res

    def extra_repr(self) -> str:
        return f"hidden_size={self.weight.shape[0]}, eps={self.variance_epsilon}"
