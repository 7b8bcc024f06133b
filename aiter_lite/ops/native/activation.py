"""Activations in plain PyTorch: fp32 math, cast back to the output's dtype.

Same names and signatures as ``aiter_lite.ops.triton.activation``; this is the
reference the tests compare against and the "native" backend.
"""

from __future__ import annotations

import functools

import torch
import torch.nn.functional as F

from aiter_lite.utils.aliases import lazy_aliases


ACTIVATIONS = {
    "silu": F.silu,
    "gelu": F.gelu,
    "gelu_tanh": functools.partial(F.gelu, approximate="tanh"),
    "relu": F.relu,
}


def gated(input: torch.Tensor, activation: str) -> torch.Tensor:
    """``act(input[..., :d]) * input[..., d:]`` in fp32, as a new tensor of input's dtype."""
    d = input.shape[-1] // 2
    x = input.float()
    return (ACTIVATIONS[activation](x[..., :d]) * x[..., d:]).to(input.dtype)


def act_and_mul(out: torch.Tensor, input: torch.Tensor, activation: str) -> torch.Tensor:
    d = input.shape[-1] // 2
    x = input.float()
    out.copy_(ACTIVATIONS[activation](x[..., :d]) * x[..., d:])
    return out


def silu_and_mul(out: torch.Tensor, input: torch.Tensor) -> torch.Tensor:
    return act_and_mul(out, input, "silu")


def gelu_and_mul(out: torch.Tensor, input: torch.Tensor) -> torch.Tensor:
    return act_and_mul(out, input, "gelu")


def gelu_tanh_and_mul(out: torch.Tensor, input: torch.Tensor) -> torch.Tensor:
    return act_and_mul(out, input, "gelu_tanh")


def fused_silu_mul(x: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
    if out is None:
        out = x.new_empty((*x.shape[:-1], x.shape[-1] // 2))
    return act_and_mul(out, x, "silu")


def act_mul(gate: torch.Tensor, up: torch.Tensor, activation: str = "silu") -> torch.Tensor:
    return (ACTIVATIONS[activation](gate.float()) * up.float()).to(gate.dtype)


def silu(x: torch.Tensor) -> torch.Tensor:
    return F.silu(x.float()).to(x.dtype)


def gelu(x: torch.Tensor, approximate: str = "none") -> torch.Tensor:
    return F.gelu(x.float(), approximate=approximate).to(x.dtype)


def relu(x: torch.Tensor) -> torch.Tensor:
    return F.relu(x.float()).to(x.dtype)


def act_and_mul_rounded(out: torch.Tensor, input: torch.Tensor, activation: str,
                        act_first: bool = True) -> torch.Tensor:
    d = input.shape[-1] // 2
    x = input.float()
    gate, up = (x[..., :d], x[..., d:]) if act_first else (x[..., d:], x[..., :d])
    out.copy_(ACTIVATIONS[activation](gate).to(input.dtype).float() * up)
    return out


def fatrelu_and_mul(out: torch.Tensor, input: torch.Tensor, threshold: float = 0.0) -> torch.Tensor:
    d = input.shape[-1] // 2
    x = input.float()
    out.copy_(F.threshold(x[..., :d], threshold, 0.0) * x[..., d:])
    return out


def swigluoai_and_mul(out: torch.Tensor, input: torch.Tensor, alpha: float = 1.702,
                      limit: float = 7.0) -> torch.Tensor:
    x = input.float()
    gate = x[..., 0::2].clamp(max=limit)
    up = x[..., 1::2].clamp(min=-limit, max=limit)
    out.copy_((up + 1) * gate * torch.sigmoid(alpha * gate))
    return out


def _in(x: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """fp32 values rounded to ``dtype`` (where vLLM's kernels compute in the input's dtype)."""
    return x.to(dtype).float()


def gelu_new(x: torch.Tensor) -> torch.Tensor:
    t, f = x.dtype, x.float()
    x3 = _in(_in(f * f, t) * f, t)
    inner = _in(0.79788456 * _in(f + _in(0.044715 * x3, t), t), t)
    return (_in(0.5 * f, t) * _in(1.0 + _in(torch.tanh(inner), t), t)).to(t)


def gelu_fast(x: torch.Tensor) -> torch.Tensor:
    t, f = x.dtype, x.float()
    a = _in(f * 0.79788456, t)
    b = _in(1.0 + _in(_in(0.044715 * f, t) * f, t), t)
    return (_in(0.5 * f, t) * _in(1.0 + _in(torch.tanh(_in(a * b, t)), t), t)).to(t)


def gelu_quick(x: torch.Tensor) -> torch.Tensor:
    f = x.float()
    return (f * torch.sigmoid(1.702 * f)).to(x.dtype)


# aiter's name at this path (aiter_lite defines it with the other activation + quant ops)
__getattr__ = lazy_aliases(globals(), {
    "act_mul_and_fp8_group_quant": "aiter_lite.ops.native.quant.act_quant",
})
from aiter_lite.ops.native.quant.mx_quant import act_mul_and_mxfp4_quant  # noqa: E402,F401  (aiter's name here)
