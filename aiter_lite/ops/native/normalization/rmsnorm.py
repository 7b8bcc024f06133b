"""RMSNorm in plain PyTorch: fp32 math, results cast to the output's dtype.

Same names and argument order as ``aiter_lite.ops.triton.normalization.rmsnorm``.
Differentiable through autograd, which makes it the backward reference too.
``casting_mode="llama"`` is Hugging Face's ``LlamaRMSNorm``: the normalized value is
rounded to the normalized tensor's dtype before the weight multiplies it (the fused-add
forms normalize the sum as stored in residual_out).
"""

from __future__ import annotations

import torch

from aiter_lite.spec.normalization import check_casting_mode
from aiter_lite.utils.aliases import lazy_aliases


def _rms(x: torch.Tensor, weight, epsilon: float, weight_offset: float, round_to=None) -> torch.Tensor:
    y = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + epsilon)
    if round_to is not None:  # Llama: hidden_states.to(input_dtype), its gradient passed straight through
        y = y + (y.to(round_to).float() - y).detach()
    return y if weight is None else y * (weight.float() + weight_offset)


def rms_norm(input: torch.Tensor, weight: torch.Tensor | None, epsilon: float,
             weight_offset: float = 0.0, *, casting_mode="gemma") -> torch.Tensor:
    llama = check_casting_mode("rms_norm", casting_mode) == "llama"
    return _rms(input.float(), weight, epsilon, weight_offset, input.dtype if llama else None).to(input.dtype)


def rmsnorm_forward_inference(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    return rms_norm(x, weight, eps)


def _add_rms(op, out, input, residual_in, residual_out, weight, epsilon, weight_offset, casting_mode):
    llama = check_casting_mode(op, casting_mode) == "llama"
    s = input.float() + residual_in.float()
    residual_out.copy_(s)
    if llama:  # the sum as stored, as Hugging Face adds the residual in the model's dtype
        s = residual_out.float()
    out.copy_(_rms(s, weight, epsilon, weight_offset, residual_out.dtype if llama else None))


def rmsnorm2d_fwd_with_add(out, input, residual_in, residual_out, weight, epsilon, weight_offset=0.0, *,
                           casting_mode="gemma"):
    _add_rms("rmsnorm2d_fwd_with_add", out, input, residual_in, residual_out, weight, epsilon, weight_offset,
             casting_mode)
    return out


def fused_add_rms_norm(input, residual, weight, epsilon, weight_offset=0.0, *, casting_mode="gemma") -> None:
    _add_rms("fused_add_rms_norm", input, input, residual, residual, weight, epsilon, weight_offset, casting_mode)


# aiter's names at this path (aiter_lite defines them with the other norm + quant ops)
__getattr__ = lazy_aliases(globals(), {
    "rmsnorm2d_fwd_with_smoothquant": "aiter_lite.ops.native.quant.norm_quant",
    "rmsnorm2d_fwd_with_dynamicquant": "aiter_lite.ops.native.quant.norm_quant",
    "rmsnorm2d_fwd_with_add_smoothquant": "aiter_lite.ops.native.quant.norm_quant",
    "rmsnorm2d_fwd_with_add_dynamicquant": "aiter_lite.ops.native.quant.norm_quant",
})
