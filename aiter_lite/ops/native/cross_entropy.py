"""Cross entropy in plain PyTorch: fp32 math. Same names and signatures as
``aiter_lite.ops.triton.cross_entropy``; the reference the tests compare against and the
"native" backend (which materializes the fp32 logits the Triton op never holds at once)."""

from __future__ import annotations

import torch


def _loss(z: torch.Tensor, target: torch.Tensor, ignore_index: int, reduction: str, label_smoothing: float,
          softcap: float | None) -> torch.Tensor:
    """torch's cross entropy of fp32 logits z (..., V), class dim last."""
    if softcap:
        z = softcap * torch.tanh(z / softcap)
    loss = torch.nn.functional.cross_entropy(z.reshape(-1, z.shape[-1]), target.reshape(-1).long(),
                                             ignore_index=ignore_index, reduction=reduction,
                                             label_smoothing=label_smoothing)
    return loss.view(target.shape) if reduction == "none" else loss


def cross_entropy(logits: torch.Tensor, target: torch.Tensor, ignore_index: int = -100, reduction: str = "mean",
                  label_smoothing: float = 0.0, softcap: float | None = None) -> torch.Tensor:
    return _loss(logits.float(), target, ignore_index, reduction, label_smoothing, softcap).to(logits.dtype)


def fused_linear_cross_entropy(input: torch.Tensor, weight: torch.Tensor, target: torch.Tensor,
                               bias: torch.Tensor | None = None, ignore_index: int = -100, reduction: str = "mean",
                               label_smoothing: float = 0.0, softcap: float | None = None,
                               chunk_size: int | None = None) -> torch.Tensor:
    z = torch.nn.functional.linear(input.float(), weight.float(), None if bias is None else bias.float())
    return _loss(z, target, ignore_index, reduction, label_smoothing, softcap)
