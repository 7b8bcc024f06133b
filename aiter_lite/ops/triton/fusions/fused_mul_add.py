"""aiter's ``fused_mul_add`` (``aiter.ops.triton.fusions.fused_mul_add``): ``out = x * a + b``
elementwise in one pass, ``a`` and ``b`` each a number, a one-element tensor or a tensor of
x's element count; without ``out`` x itself is overwritten (aiter's contract). Computed in
fp32, stored in out's dtype; any float dtypes, mixed. Tensors contiguous (aiter's rule: the
elements are taken in memory order, whatever the shapes)."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from aiter_lite.ops.triton._triton_kernels.fusions.fused_mul_add import _mul_add_kernel
from aiter_lite.utils.checks import check_float_tensor, check_same_device, check_triton_device
from aiter_lite.utils.fast_launch import launch
from aiter_lite.utils.launch import cdiv
from aiter_lite.utils.launcher import launcher
from aiter_lite.utils.logger import debug_on, log_call
from aiter_lite.utils.registry import public_op

__all__ = ["fused_mul_add", "MulAddLaunchConfig"]


@dataclass(frozen=True)
class MulAddLaunchConfig:
    BLOCK: int = 2048  # elements a program (a power of 2)
    num_warps: int = 4


# 16 elements a lane on 4 warps (two 16-byte loads of bf16 a lane); an unmeasured starting
# point, as a plain elementwise op's.
_DEFAULT = MulAddLaunchConfig()


def _operand(op: str, name: str, v, n: int, x: torch.Tensor):
    """(the tensor or None, the number) of a / b."""
    if isinstance(v, torch.Tensor):
        check_float_tensor(op, name, v)
        check_same_device(op, name, v, "x", x)
        if v.numel() not in (1, n):
            raise ValueError(f"{op}: {name} must hold 1 or x's {n} elements, got shape {tuple(v.shape)}")
        if not v.is_contiguous():
            raise ValueError(f"{op}: {name} must be contiguous, got strides {tuple(v.stride())}")
        return v, 0.0
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise TypeError(f"{op}: {name} must be a number or a torch.Tensor, got {type(v).__name__}")
    return None, float(v)


@launcher(mutates=("out",))
def _launch_mul_add(x: torch.Tensor, a: torch.Tensor | None, b: torch.Tensor | None, out: torch.Tensor,
                    a_scalar: float, b_scalar: float, config: MulAddLaunchConfig | None = None) -> None:
    """The kernel over x's elements; ``config`` pins a launch (tests, tuning)."""
    cfg = config or _DEFAULT
    n = x.numel()
    kinds = ["scalar" if t is None else "one" if t.numel() == 1 else "full" for t in (a, b)]
    launch(_mul_add_kernel, (cdiv(n, cfg.BLOCK),), x, a, b, out, n, a_scalar, b_scalar, A=kinds[0], B=kinds[1],
           INT64=cdiv(n, cfg.BLOCK) * cfg.BLOCK >= 2**31, BLOCK=cfg.BLOCK, num_warps=cfg.num_warps)


@public_op(mutates=("x", "out"), aliases={"out": ("x",)},
           no_grad="aiter's fused_mul_add writes its result over x or into out (no gradient path)")
def fused_mul_add(x: torch.Tensor, a: torch.Tensor | float, b: torch.Tensor | float,
                  out: torch.Tensor | None = None) -> torch.Tensor:
    """``x * a + b`` into ``out`` (x when None), returned. a, b: numbers, one-element tensors
    or tensors of x's element count (taken in memory order)."""
    op = "fused_mul_add"
    check_float_tensor(op, "x", x)
    check_triton_device(op, "x", x)
    if not x.is_contiguous():
        raise ValueError(f"{op}: x must be contiguous, got strides {tuple(x.stride())}")
    n = x.numel()
    a_t, a_s = _operand(op, "a", a, n, x)
    b_t, b_s = _operand(op, "b", b, n, x)
    if out is None:
        out = x
    else:
        check_float_tensor(op, "out", out)
        check_same_device(op, "out", out, "x", x)
        if out.numel() != n or not out.is_contiguous():
            raise ValueError(f"{op}: out must be contiguous with x's {n} elements, got shape {tuple(out.shape)} "
                             f"strides {tuple(out.stride())}")
    if debug_on():
        log_call(op, x=x, a=a, b=b, out=out)
    if n:
        _launch_mul_add(x, a_t, b_t, out, a_s, b_s)
    return out
