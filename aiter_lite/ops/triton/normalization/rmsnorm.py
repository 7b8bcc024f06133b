"""RMSNorm on the Triton backend, with aiter's and vLLM's names and argument orders.

``y = x / sqrt(mean(x^2) + epsilon) * (weight + weight_offset)`` over the last dim;
``weight_offset=1.0`` is Gemma's ``(1 + weight)`` scaling. Inputs of any rank, rows
may be strided (unit stride in the last dim); fp32/fp16/bf16 in, the output's
dtype out (the input's for new tensors); weight of any float dtype; math in fp32.
``epsilon`` is a finite real >= 0.

``casting_mode`` (keyword only) picks the roundings, as Liger-Kernel's option: "gemma"
(the default) rounds once, the output; "llama" rounds as Hugging Face's ``LlamaRMSNorm``,
``x / sqrt(mean(x^2) + epsilon)`` to the normalized tensor's dtype before the weight
multiplies it (the fused-add forms normalize the sum as stored in residual_out). See
``normalization/norm.py`` for both and their gradients.
"""

from __future__ import annotations

from typing import Literal

import torch

from aiter_lite.ops.triton.normalization.norm import check_vector, norm, norm_with_add
from aiter_lite.utils.aliases import lazy_aliases
from aiter_lite.utils.checks import check_row_input
from aiter_lite.utils.registry import public_op

__all__ = ["rms_norm", "rmsnorm_forward_inference", "rmsnorm2d_fwd_with_add", "fused_add_rms_norm"]

CastingMode = Literal["gemma", "llama"]


@public_op
def rms_norm(input: torch.Tensor, weight: torch.Tensor | None, epsilon: float,
             weight_offset: float = 0.0, *, casting_mode: CastingMode = "gemma") -> torch.Tensor:
    """RMSNorm of ``input`` as a new tensor; differentiable in input and weight."""
    return norm("rms_norm", input, weight, None, epsilon, is_rms=True, weight_offset=weight_offset,
                casting_mode=casting_mode)


@public_op
def rmsnorm_forward_inference(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """aiter's inference RMSNorm: ``rms_norm(x, weight, eps)`` (aiter's skips autograd; this one
    is differentiable where autograd records, as every op here is)."""
    op = "rmsnorm_forward_inference"
    check_row_input(op, "x", x, " (normalized over the last)")  # named as the caller names them
    check_vector(op, "weight", weight, x.shape[-1], x, "x")
    return norm(op, x, weight, None, eps, is_rms=True, eps_name="eps")


@public_op(mutates=("out", "residual_out"),
           aliases={"out": ("input",), "residual_out": ("residual_in", "input")})
def rmsnorm2d_fwd_with_add(out: torch.Tensor, input: torch.Tensor, residual_in: torch.Tensor,
                           residual_out: torch.Tensor, weight: torch.Tensor | None, epsilon: float,
                           weight_offset: float = 0.0, *, casting_mode: CastingMode = "gemma") -> torch.Tensor:
    """``residual_out = input + residual_in``; ``out = rms_norm(residual_out)``; returns ``out``.

    Any of out / residual_out may be the same tensor as input / residual_in.
    """
    norm_with_add("rmsnorm2d_fwd_with_add", out, input, residual_in, residual_out, weight, None, epsilon,
                  is_rms=True, weight_offset=weight_offset, casting_mode=casting_mode)
    return out


@public_op(mutates=("input", "residual"))
def fused_add_rms_norm(input: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor | None,
                       epsilon: float, weight_offset: float = 0.0, *, casting_mode: CastingMode = "gemma") -> None:
    """In place, as vLLM's: ``residual += input``; ``input = rms_norm(residual)``. Allocates nothing."""
    norm_with_add("fused_add_rms_norm", input, input, residual, residual, weight, None, epsilon,
                  is_rms=True, weight_offset=weight_offset, names=("input", "residual", "residual"),
                  casting_mode=casting_mode)


# aiter's names at this path (aiter_lite defines them with the other norm + quant ops)
__getattr__ = lazy_aliases(globals(), {
    "rmsnorm2d_fwd_with_smoothquant": "aiter_lite.ops.triton.quant.norm_quant",
    "rmsnorm2d_fwd_with_dynamicquant": "aiter_lite.ops.triton.quant.norm_quant",
    "rmsnorm2d_fwd_with_add_smoothquant": "aiter_lite.ops.triton.quant.norm_quant",
    "rmsnorm2d_fwd_with_add_dynamicquant": "aiter_lite.ops.triton.quant.norm_quant",
})
