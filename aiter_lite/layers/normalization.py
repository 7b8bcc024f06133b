"""Normalization modules, drop-ins for vLLM / SGLang's RMSNorm, GemmaRMSNorm and a LayerNorm.

``forward(x)`` returns the normalized tensor; ``forward(x, residual)`` adds the
residual first and returns ``(out, residual_out)``, as vLLM's layers do. RMSNorm
does that in place (``x`` becomes the output, ``residual`` the sum: no allocation) while
autograd does not record; LayerNorm, and RMSNorm while autograd records (training: an
in-place write would overwrite tensors autograd saved), return new tensors, with the same
gradients on both backends. ``forward_native`` and ``forward_triton`` take the same
arguments; ``forward`` runs the one picked when the module is built (``backend``, else
AITER_NORMALIZATION_BACKEND, else AITER_BACKEND).

Parameters carry Hugging Face's names (``weight``, and LayerNorm's ``bias``), so the state
dict of a ``LlamaRMSNorm``, ``GemmaRMSNorm`` or ``torch.nn.LayerNorm`` loads unchanged;
RMSNorm also answers to HF's ``variance_epsilon``. ``RMSNorm(casting_mode="llama")``
rounds as ``LlamaRMSNorm`` does (the normalized value to the input's dtype before the
weight: its bits in bf16 / fp16 but where the fp32 row statistic differs in its last bit);
the default "gemma" computes in fp32 and rounds once, as ``GemmaRMSNorm`` (Liger-Kernel's
``casting_mode``).
"""

from __future__ import annotations

import torch
from torch import nn

from aiter_lite.layers.base import BackendLayer
from aiter_lite.ops.native.normalization import layernorm as native_ln
from aiter_lite.ops.native.normalization import rmsnorm as native_rms
from aiter_lite.ops.triton.normalization import layernorm as triton_ln
from aiter_lite.ops.triton.normalization import rmsnorm as triton_rms
from aiter_lite.ops.triton.normalization.norm import norm_add
from aiter_lite.spec.normalization import LAYER_NORM_EPS, RMS_NORM_EPS, check_casting_mode
from aiter_lite.utils.checks import check_int


class _Norm(BackendLayer):
    """hidden_size, eps and the backend, checked and chosen once."""

    family = "normalization"

    def __init__(self, hidden_size: int, eps: float, backend: str | None):
        name = type(self).__name__
        check_int(name, "hidden_size", hidden_size, 1)
        super().__init__(backend)
        self.hidden_size = hidden_size
        self.eps = eps

    def forward(self, x: torch.Tensor, residual: torch.Tensor | None = None):
        if self._backend == "triton":
            return self.forward_triton(x, residual)
        return self.forward_native(x, residual)

    def extra_repr(self) -> str:
        return f"hidden_size={self.hidden_size}, eps={self.eps}, backend={self.backend}"


class RMSNorm(_Norm):
    """``x * rsqrt(mean(x^2) + eps) * (weight + weight_offset)`` over the last dim (vLLM's RMSNorm).

    ``casting_mode``: "gemma" (fp32 throughout, the output rounded once) or "llama" (Hugging
    Face's ``LlamaRMSNorm``: ``weight * (x * rsqrt(...)).to(x.dtype)``; with a residual, the
    sum is normalized as ``residual_out`` holds it)."""

    weight_offset = 0.0

    def __init__(self, hidden_size: int, eps: float = RMS_NORM_EPS, has_weight: bool = True,
                 dtype: torch.dtype | None = None, backend: str | None = None, *, casting_mode: str = "gemma"):
        casting_mode = check_casting_mode(type(self).__name__, casting_mode)
        super().__init__(hidden_size, eps, backend)
        self.casting_mode = casting_mode
        init = torch.zeros if self.weight_offset else torch.ones
        self.weight = nn.Parameter(init(hidden_size, dtype=dtype)) if has_weight else None

    @property
    def variance_epsilon(self) -> float:
        """Hugging Face's (and vLLM's) name for ``eps``."""
        return self.eps

    @variance_epsilon.setter
    def variance_epsilon(self, value: float) -> None:
        self.eps = value

    def forward(self, x: torch.Tensor, residual: torch.Tensor | None = None):
        """The picked backend; with a residual, in place (vLLM's kernel path) on both."""
        return self._rms_norm(triton_rms if self._backend == "triton" else native_rms, x, residual)

    def forward_native(self, x: torch.Tensor, residual: torch.Tensor | None = None):
        """vLLM's reference: new tensors, ``x`` and ``residual`` left as they are (so comparing
        it with the in-place kernel path compares two results, not a tensor with itself)."""
        return self._rms_norm(native_rms, x, residual, in_place=False)

    def forward_triton(self, x: torch.Tensor, residual: torch.Tensor | None = None):
        return self._rms_norm(triton_rms, x, residual)

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, casting_mode={self.casting_mode}"

    def _rms_norm(self, ops, x: torch.Tensor, residual: torch.Tensor | None, in_place: bool = True):
        cast = self.casting_mode
        if residual is None:
            return ops.rms_norm(x, self.weight, self.eps, self.weight_offset, casting_mode=cast)
        if _recording(x, residual, self.weight) or not in_place:
            if ops is triton_rms:
                return norm_add(type(self).__name__, x, residual, self.weight, None, self.eps, is_rms=True,
                                weight_offset=self.weight_offset, names=("x", "residual"), casting_mode=cast)
            out, residual_out = torch.empty_like(x), torch.empty_like(residual)
            ops.rmsnorm2d_fwd_with_add(out, x, residual, residual_out, self.weight, self.eps, self.weight_offset,
                                       casting_mode=cast)
            return out, residual_out
        ops.fused_add_rms_norm(x, residual, self.weight, self.eps, self.weight_offset, casting_mode=cast)
        return x, residual


class GemmaRMSNorm(RMSNorm):
    """Gemma's RMSNorm: the weight starts at 0 and scales by ``1 + weight``."""

    weight_offset = 1.0

    def __init__(self, hidden_size: int, eps: float = RMS_NORM_EPS, dtype: torch.dtype | None = None,
                 backend: str | None = None):
        super().__init__(hidden_size, eps, True, dtype, backend)


class LayerNorm(_Norm):
    """LayerNorm over the last dim (``torch.nn.LayerNorm``'s arguments for one normalized dim)."""

    def __init__(self, hidden_size: int, eps: float = LAYER_NORM_EPS, elementwise_affine: bool = True,
                 bias: bool = True, dtype: torch.dtype | None = None, backend: str | None = None):
        super().__init__(hidden_size, eps, backend)
        self.elementwise_affine = elementwise_affine
        self.weight = nn.Parameter(torch.ones(hidden_size, dtype=dtype)) if elementwise_affine else None
        self.bias = nn.Parameter(torch.zeros(hidden_size, dtype=dtype)) if elementwise_affine and bias else None

    @property
    def normalized_shape(self) -> tuple[int]:
        """``torch.nn.LayerNorm``'s name for ``(hidden_size,)``."""
        return (self.hidden_size,)

    def forward_native(self, x: torch.Tensor, residual: torch.Tensor | None = None):
        return self._layer_norm(native_ln, x, residual)

    def forward_triton(self, x: torch.Tensor, residual: torch.Tensor | None = None):
        return self._layer_norm(triton_ln, x, residual)

    def _layer_norm(self, ops, x: torch.Tensor, residual: torch.Tensor | None):
        if residual is None:
            return ops.layer_norm(x, self.weight, self.bias, self.eps)
        if ops is triton_ln and _recording(x, residual, self.weight, self.bias):
            return norm_add("LayerNorm", x, residual, self.weight, self.bias, self.eps, is_rms=False,
                            names=("x", "residual"))
        out, residual_out = torch.empty_like(x), torch.empty_like(residual)
        ops.layernorm2d_fwd_with_add(out, x, residual, residual_out, self.weight, self.bias, self.eps)
        return out, residual_out


def _recording(*tensors: torch.Tensor | None) -> bool:
    """Whether autograd records an op on any of ``tensors``."""
    return torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in tensors)
