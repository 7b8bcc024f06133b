"""Loss modules: drop-ins for ``torch.nn.CrossEntropyLoss`` (class dim last) and for
Liger-Kernel's ``LigerFusedLinearCrossEntropyLoss``.

``CrossEntropyLoss(...)(input, target)``: ``cross_entropy`` of logits ``(..., V)``;
``FusedLinearCrossEntropyLoss(...)(lin_weight, _input, target, bias=None)`` (Liger's
argument order): ``fused_linear_cross_entropy``, the loss of a language model head's
``_input @ lin_weight.T + bias`` without its logits. ``forward_native`` and
``forward_triton`` take the same arguments; ``forward`` runs the one picked when the module
is built (``backend``, else AITER_CROSS_ENTROPY_BACKEND, else AITER_BACKEND). Both are
differentiable on either backend, with the same gradients. The modules have no parameters.
"""

from __future__ import annotations

import torch

from aiter_lite.layers.base import BackendLayer
from aiter_lite.ops.native import cross_entropy as native_ce
from aiter_lite.ops.triton import cross_entropy as triton_ce
from aiter_lite.utils.checks import check_int


class _Loss(BackendLayer):
    family = "cross_entropy"

    def __init__(self, ignore_index: int, reduction: str, label_smoothing: float, softcap: float | None,
                 backend: str | None):
        super().__init__(backend)
        # the ops' own checks, naming the module
        self.ignore_index, self.reduction, self.label_smoothing, cap = triton_ce.check_options(
            type(self).__name__, ignore_index, reduction, label_smoothing, softcap)
        self.softcap = None if softcap is None else cap

    def _options(self) -> dict:
        return dict(ignore_index=self.ignore_index, reduction=self.reduction, label_smoothing=self.label_smoothing,
                    softcap=self.softcap)

    def extra_repr(self) -> str:
        softcap = "" if self.softcap is None else f", softcap={self.softcap}"
        return (f"ignore_index={self.ignore_index}, reduction={self.reduction}, "
                f"label_smoothing={self.label_smoothing}{softcap}, backend={self.backend}")


class CrossEntropyLoss(_Loss):
    """``torch.nn.CrossEntropyLoss`` over logits ``(..., V)`` with targets ``(...)`` (the
    class dim last), and Gemma 2's ``softcap``."""

    def __init__(self, ignore_index: int = -100, reduction: str = "mean", label_smoothing: float = 0.0,
                 softcap: float | None = None, backend: str | None = None):
        super().__init__(ignore_index, reduction, label_smoothing, softcap, backend)

    def forward(self, input: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        if self._backend == "triton":
            return self.forward_triton(input, target)
        return self.forward_native(input, target)

    def forward_native(self, input: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        return native_ce.cross_entropy(input, target, **self._options())

    def forward_triton(self, input: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        return triton_ce.cross_entropy(input, target, **self._options())


class FusedLinearCrossEntropyLoss(_Loss):
    """The cross entropy of ``_input @ lin_weight.T + bias`` (a language model head) without
    its logits, as Liger's ``LigerFusedLinearCrossEntropyLoss`` (its argument order);
    ``chunk_size``: rows of logits at a time (default: the op's). The loss is fp32."""

    def __init__(self, ignore_index: int = -100, reduction: str = "mean", label_smoothing: float = 0.0,
                 softcap: float | None = None, chunk_size: int | None = None, backend: str | None = None):
        super().__init__(ignore_index, reduction, label_smoothing, softcap, backend)
        self.chunk_size = None if chunk_size is None else check_int(type(self).__name__, "chunk_size", chunk_size, 1)

    def forward(self, lin_weight: torch.Tensor, _input: torch.Tensor, target: torch.Tensor,
                bias: torch.Tensor | None = None) -> torch.Tensor:
        if self._backend == "triton":
            return self.forward_triton(lin_weight, _input, target, bias)
        return self.forward_native(lin_weight, _input, target, bias)

    def forward_native(self, lin_weight: torch.Tensor, _input: torch.Tensor, target: torch.Tensor,
                       bias: torch.Tensor | None = None) -> torch.Tensor:
        return native_ce.fused_linear_cross_entropy(_input, lin_weight, target, bias, chunk_size=self.chunk_size,
                                                    **self._options())

    def forward_triton(self, lin_weight: torch.Tensor, _input: torch.Tensor, target: torch.Tensor,
                       bias: torch.Tensor | None = None) -> torch.Tensor:
        return triton_ce.fused_linear_cross_entropy(_input, lin_weight, target, bias, chunk_size=self.chunk_size,
                                                    **self._options())

    def extra_repr(self) -> str:
        chunk = "" if self.chunk_size is None else f", chunk_size={self.chunk_size}"
        return super().extra_repr() + chunk
