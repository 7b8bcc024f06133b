"""``vllm.model_executor.layers.activation`` on aiter_lite: the activation layers with vLLM's
constructors, ``forward_native`` (vLLM's plain-torch reference, in the input's dtype) and
``forward_cuda`` / ``forward_hip`` (this project's kernels through ``aiter_lite.vllm.ops``:
a new output of input's dtype)."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from aiter_lite.utils.checks import check_choice, check_real
from aiter_lite.vllm import _activation_ops as ops
from aiter_lite.vllm.model_executor.custom_op import CustomOp

__all__ = ["FatreluAndMul", "SiluAndMul", "MulAndSilu", "GeluAndMul", "SwigluOAIAndMul", "NewGELU", "FastGELU",
           "QuickGELU"]


def _gated_out(name: str, x: torch.Tensor) -> torch.Tensor:
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{name}: x must be a torch.Tensor, got {type(x).__name__}")
    if x.dim() == 0 or x.shape[-1] % 2:
        raise ValueError(f"{name}: x last dim must be even, got shape {tuple(x.shape)}")
    return torch.empty((*x.shape[:-1], x.shape[-1] // 2), dtype=x.dtype, device=x.device)


def _like(name: str, x: torch.Tensor) -> torch.Tensor:
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{name}: x must be a torch.Tensor, got {type(x).__name__}")
    return torch.empty_like(x, memory_format=torch.contiguous_format)


@CustomOp.register("fatrelu_and_mul")
class FatreluAndMul(CustomOp):
    """vLLM's ``FatreluAndMul(threshold)``: ``F.threshold(x[..., :d], threshold, 0) * x[..., d:]``
    (MiniCPM-S)."""

    def __init__(self, threshold: float = 0.0, **custom_op_kwargs) -> None:
        super().__init__(**custom_op_kwargs)
        self.threshold = check_real("FatreluAndMul", "threshold", threshold)

    def forward_native(self, x: torch.Tensor) -> torch.Tensor:
        d = x.shape[-1] // 2
        x1 = x[..., :d]
        x2 = x[..., d:]
        x1 = F.threshold(x1, self.threshold, 0.0)
        return x1 * x2

    def forward_cuda(self, x: torch.Tensor) -> torch.Tensor:
        out = _gated_out("FatreluAndMul", x)
        ops.fatrelu_and_mul(out, x, self.threshold)
        return out

    def extra_repr(self) -> str:
        return f"threshold={self.threshold!r}"


@CustomOp.register("silu_and_mul")
class SiluAndMul(CustomOp):
    """vLLM's ``SiluAndMul()``: ``silu(x[..., :d]) * x[..., d:]`` (SwiGLU)."""

    @staticmethod
    def forward_native(x: torch.Tensor) -> torch.Tensor:
        d = x.shape[-1] // 2
        return F.silu(x[..., :d]) * x[..., d:]

    def forward_cuda(self, x: torch.Tensor) -> torch.Tensor:
        out = _gated_out("SiluAndMul", x)
        ops.silu_and_mul(out, x)
        return out


@CustomOp.register("mul_and_silu")
class MulAndSilu(CustomOp):
    """vLLM's ``MulAndSilu()``: ``x[..., :d] * silu(x[..., d:])``."""

    def forward_native(self, x: torch.Tensor) -> torch.Tensor:
        d = x.shape[-1] // 2
        return x[..., :d] * F.silu(x[..., d:])

    def forward_cuda(self, x: torch.Tensor) -> torch.Tensor:
        out = _gated_out("MulAndSilu", x)
        ops.mul_and_silu(out, x)
        return out


@CustomOp.register("gelu_and_mul")
class GeluAndMul(CustomOp):
    """vLLM's ``GeluAndMul(approximate="none" | "tanh")``: ``gelu(x[..., :d]) * x[..., d:]``
    (GeGLU). On ROCm vLLM's forward_native uses the erf GELU for "tanh" (its note: torch's
    tanh GELU is unstable under torch.compile there); the kernels keep "tanh"."""

    def __init__(self, approximate: str = "none", **custom_op_kwargs) -> None:
        super().__init__(**custom_op_kwargs)
        self.approximate = check_choice("GeluAndMul", "approximate", approximate, ("none", "tanh"))

    def forward_native(self, x: torch.Tensor) -> torch.Tensor:
        approximate = self.approximate
        if torch.version.hip and approximate == "tanh":
            approximate = "none"
        d = x.shape[-1] // 2
        return F.gelu(x[..., :d], approximate=approximate) * x[..., d:]

    def forward_cuda(self, x: torch.Tensor) -> torch.Tensor:
        out = _gated_out("GeluAndMul", x)
        if self.approximate == "none":
            ops.gelu_and_mul(out, x)
        else:
            ops.gelu_tanh_and_mul(out, x)
        return out

    def extra_repr(self) -> str:
        return f"approximate={self.approximate!r}"


@CustomOp.register("swigluoai_and_mul")
class SwigluOAIAndMul(CustomOp):
    """vLLM's ``SwigluOAIAndMul(alpha=1.702, limit=7.0)``: gpt-oss's clamped SwiGLU over
    interleaved gate (``x[..., ::2]``) and up (``x[..., 1::2]``) columns."""

    def __init__(self, alpha: float = 1.702, limit: float = 7.0, **custom_op_kwargs) -> None:
        super().__init__(**custom_op_kwargs)
        self.alpha = check_real("SwigluOAIAndMul", "alpha", alpha)
        self.limit = check_real("SwigluOAIAndMul", "limit", limit)

    def forward_native(self, x: torch.Tensor) -> torch.Tensor:
        gate, up = x[..., ::2], x[..., 1::2]
        gate = gate.clamp(min=None, max=self.limit)
        up = up.clamp(min=-self.limit, max=self.limit)
        glu = gate * torch.sigmoid(gate * self.alpha)
        gated_output = (up + 1) * glu
        return gated_output

    def forward_cuda(self, x: torch.Tensor) -> torch.Tensor:
        out = _gated_out("SwigluOAIAndMul", x)
        ops.swigluoai_and_mul(out, x, self.alpha, self.limit)
        return out

    def extra_repr(self) -> str:
        return f"alpha={self.alpha!r}, limit={self.limit!r}"


@CustomOp.register("gelu_new")
class NewGELU(CustomOp):
    """vLLM's ``NewGELU()`` (GPT-2's GELU)."""

    def forward_native(self, x: torch.Tensor) -> torch.Tensor:
        c = math.sqrt(2.0 / math.pi)
        return 0.5 * x * (1.0 + torch.tanh(c * (x + 0.044715 * torch.pow(x, 3.0))))

    def forward_cuda(self, x: torch.Tensor) -> torch.Tensor:
        out = _like("NewGELU", x)
        ops.gelu_new(out, x)
        return out


@CustomOp.register("gelu_fast")
class FastGELU(CustomOp):
    """vLLM's ``FastGELU()``."""

    def forward_native(self, x: torch.Tensor) -> torch.Tensor:
        return 0.5 * x * (1.0 + torch.tanh(x * 0.7978845608 * (1.0 + 0.044715 * x * x)))

    def forward_cuda(self, x: torch.Tensor) -> torch.Tensor:
        out = _like("FastGELU", x)
        ops.gelu_fast(out, x)
        return out


@CustomOp.register("quick_gelu")
class QuickGELU(CustomOp):
    """vLLM's ``QuickGELU()``: ``x * sigmoid(1.702 x)``."""

    def forward_native(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.sigmoid(1.702 * x)

    def forward_cuda(self, x: torch.Tensor) -> torch.Tensor:
        out = _like("QuickGELU", x)
        ops.gelu_quick(out, x)
        return out
