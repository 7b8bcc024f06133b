"""vLLM's activation ops (``vllm._custom_ops`` / ``torch.ops._C``) on this project's activation
kernel: vLLM's names, argument orders, defaults and out-parameters; each returns None.

* ``silu_and_mul``, ``mul_and_silu``, ``gelu_and_mul``, ``gelu_tanh_and_mul``: the activation,
  by torch's formula, rounded to input's dtype before the multiply, as vLLM's kernels and
  its layers' ``forward_native`` compute (``act_and_mul_rounded``; mul_and_silu reads the
  halves the other way round, as views).
* ``fatrelu_and_mul(out, input, threshold)``: ``where(g > threshold, g, 0) * up``.
* ``swigluoai_and_mul(out, input, alpha, limit)``: gpt-oss's clamped SwiGLU over
  interleaved gate / up columns, fp32 math, one rounding.
* ``gelu_new``, ``gelu_fast``: rounded to the dtype where vLLM's kernels round;
  ``gelu_quick``: ``x * sigmoid(1.702 x)`` in fp32, one rounding.

Inputs may have any rank and strided rows (unit stride in the last dim); ``out`` may be a
strided view. None records a gradient: an input that requires one raises (vLLM's
out-parameter forms cannot return it); the differentiable forms are
``aiter_lite.ops.triton.activation``'s silu_and_mul / act_and_mul / act_mul.
"""

from __future__ import annotations

import torch

from aiter_lite.ops.triton import activation as _act
from aiter_lite.utils.checks import check_real
from aiter_lite.utils.fast_launch import planned
from aiter_lite.utils.overlap import check_written

__all__ = [
    "silu_and_mul",
    "mul_and_silu",
    "gelu_and_mul",
    "gelu_tanh_and_mul",
    "fatrelu_and_mul",
    "swigluoai_and_mul",
    "gelu_new",
    "gelu_fast",
    "gelu_quick",
]

_OUT = frozenset(("out",))


def _checked(op: str, out, input) -> None:
    """Neither argument records a gradient; out overlaps no element of input (and of itself)."""
    if torch.is_grad_enabled() and not torch.compiler.is_compiling():
        for name, t in (("out", out), ("input", input)):
            if isinstance(t, torch.Tensor) and t.requires_grad:
                raise ValueError(f"{op}: {name} requires grad, but vLLM's out-parameter form records no gradient; "
                                 f"call it under torch.no_grad() / torch.inference_mode(), or use "
                                 f"aiter_lite.ops.triton.activation's differentiable ops")
    if isinstance(out, torch.Tensor) and isinstance(input, torch.Tensor) and not torch.compiler.is_compiling():
        check_written(op, [("out", out), ("input", input)], _OUT, {})


def _gated(op: str, out, input, activation: str, **kw) -> None:
    _checked(op, out, input)
    _act._gated_ex(op, out, input, activation, **kw)


@planned
def silu_and_mul(out: torch.Tensor, input: torch.Tensor) -> None:
    """``out = silu(input[..., :d]) * input[..., d:]``, d = input.shape[-1] // 2."""
    _gated("silu_and_mul", out, input, "silu", round_act=True)


@planned
def mul_and_silu(out: torch.Tensor, input: torch.Tensor) -> None:
    """``out = input[..., :d] * silu(input[..., d:])``."""
    _gated("mul_and_silu", out, input, "silu", round_act=True, act_first=False)


@planned
def gelu_and_mul(out: torch.Tensor, input: torch.Tensor) -> None:
    """``out = gelu(input[..., :d]) * input[..., d:]``, exact (erf) GELU."""
    _gated("gelu_and_mul", out, input, "gelu", round_act=True)


@planned
def gelu_tanh_and_mul(out: torch.Tensor, input: torch.Tensor) -> None:
    """``out = gelu_tanh(input[..., :d]) * input[..., d:]``."""
    _gated("gelu_tanh_and_mul", out, input, "gelu_tanh", round_act=True)


@planned
def fatrelu_and_mul(out: torch.Tensor, input: torch.Tensor, threshold: float = 0.0) -> None:
    """``out = where(g > threshold, g, 0) * input[..., d:]``, g = input[..., :d]."""
    op = "fatrelu_and_mul"
    _gated(op, out, input, "fatrelu", param=check_real(op, "threshold", threshold))


@planned
def swigluoai_and_mul(out: torch.Tensor, input: torch.Tensor, alpha: float = 1.702, limit: float = 7.0) -> None:
    """gpt-oss: gate ``input[..., 0::2]`` clamped to <= limit, up ``input[..., 1::2]`` to
    [-limit, limit]; ``out = (up + 1) * gate * sigmoid(alpha * gate)``."""
    op = "swigluoai_and_mul"
    alpha = check_real(op, "alpha", alpha)
    limit = check_real(op, "limit", limit)
    _gated(op, out, input, "swish", param=alpha, limit=limit, interleaved=True, clamp=True)


def _elementwise(op: str, out, input, activation: str, param: float = 0.0) -> None:
    _checked(op, out, input)
    if not isinstance(out, torch.Tensor):
        raise TypeError(f"{op}: out must be a torch.Tensor, got {type(out).__name__}")
    _act._elementwise_ex(op, out, input, activation, param, names=("out", "input"))


@planned
def gelu_new(out: torch.Tensor, input: torch.Tensor) -> None:
    """GPT-2's GELU: ``0.5 x (1 + tanh(0.79788456 (x + 0.044715 x^3)))``."""
    _elementwise("gelu_new", out, input, "gelu_new")


@planned
def gelu_fast(out: torch.Tensor, input: torch.Tensor) -> None:
    """``0.5 x (1 + tanh(0.79788456 x (1 + 0.044715 x^2)))``."""
    _elementwise("gelu_fast", out, input, "gelu_fast")


@planned
def gelu_quick(out: torch.Tensor, input: torch.Tensor) -> None:
    """``x * sigmoid(1.702 x)``."""
    _elementwise("gelu_quick", out, input, "gelu_quick", _act._QUICK_GELU_BETA)
