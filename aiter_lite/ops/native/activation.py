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


# aiter's name at this path (aiter_lite defines it with the other activation + quant ops)
__getattr__ = lazy_aliases(globals(), {
    "act_mul_and_fp8_group_quant": "aiter_lite.ops.native.quant.act_quant",
})
from aiter_lite.ops.native.quant.mx_quant import act_mul_and_mxfp4_quant  # noqa: E402,F401  (aiter's name here)
