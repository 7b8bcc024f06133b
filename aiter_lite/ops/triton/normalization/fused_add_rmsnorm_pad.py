"""aiter's ``fused_add_rmsnorm_pad`` (``aiter.ops.triton.normalization.fused_add_rmsnorm_pad``):
RMSNorm of x, or of ``x + res`` with that sum returned too, written into an output padded to
a multiple of ``x_pad_to_multiple`` columns (vLLM's and SGLang's gpt-oss path: hidden 2880
padded to 128 / 256 for the next GEMM), in one launch.

``fused_add_rmsnorm_pad(x, weight, epsilon, res=None, x_pad_to_multiple=0)`` returns
``out``, or ``(out, res_out)`` with ``res``: ``res_out = x + res`` (summed in fp32, stored in
res's dtype) and ``out = rms_norm(x + res) * weight`` of the fp32 sum (aiter's: the sum is
normalized before its rounding), ``out`` of shape ``(..., ceil(N / p) * p)`` for ``p =
x_pad_to_multiple`` > 0 (``(..., N)`` for 0), its columns past N zero, even in a row that
is NaN. A dispatcher over two registered ops, as aiter's ``fused_rmsnorm_add`` is here (one
op cannot return a tensor or a tuple): ``rmsnorm_pad(x, weight, epsilon,
x_pad_to_multiple=0)`` and ``add_rmsnorm_pad(x, weight, epsilon, res,
x_pad_to_multiple=0)``. The kernel is RMSNorm's (``normalization/norm.py``), its output
width rounded up in-kernel (``PAD_TO``): the same launch configs, and the same code where
nothing is padded.

Where aiter's is limited, this does more: any rank (aiter: 2-D), any row stride; a
gradient in x, res and weight where autograd records (the RMSNorm autograd path, then the
pad: aiter's has none); a ``TypeError`` / ``ValueError`` naming the op and argument where
aiter asserts or indexes past a tensor (a negative ``x_pad_to_multiple``, which aiter
takes as no padding, is refused; so is one above 65536, no GEMM's alignment). x and res
are never written.
"""

from __future__ import annotations

import torch

from aiter_lite.ops.triton.normalization.norm import _launch_norm_fwd, check_eps, check_vector, norm, norm_add
from aiter_lite.utils.checks import check_int, check_row_input, check_same_device, rows_view
from aiter_lite.utils.logger import debug_on, log_call
from aiter_lite.utils.registry import public_op

__all__ = ["fused_add_rmsnorm_pad", "rmsnorm_pad", "add_rmsnorm_pad"]

MAX_PAD_MULTIPLE = 65536  # a GEMM's column alignment; also bounds the compiled variants (one per multiple)


def _check(op: str, x, weight, epsilon, res, x_pad_to_multiple) -> tuple[float, int]:
    """The arguments checked as ``op``'s caller names them; (epsilon, padded width)."""
    check_row_input(op, "x", x, " (normalized over the last)")
    if weight is None:
        raise TypeError(f"{op}: weight must be a torch.Tensor, got None")
    n = x.shape[-1]
    check_vector(op, "weight", weight, n, x, "x")
    eps = check_eps(op, "epsilon", epsilon)
    if res is not None:
        check_row_input(op, "res", res)
        if tuple(res.shape) != tuple(x.shape):
            raise ValueError(f"{op}: res must have x's shape {tuple(x.shape)}, got {tuple(res.shape)}")
        if res.dtype != x.dtype:
            raise TypeError(f"{op}: res must have x's dtype {x.dtype}, got {res.dtype}")
        check_same_device(op, "res", res, "x", x)
    p = check_int(op, "x_pad_to_multiple", x_pad_to_multiple, 0, MAX_PAD_MULTIPLE, "(0: no padding)")
    return eps, n if p == 0 else -(-n // p) * p


def _pad_norm(op: str, x, weight, epsilon, res, x_pad_to_multiple):
    """``out`` and (with res) ``res_out``, new tensors: see the module doc."""
    eps, n_out = _check(op, x, weight, epsilon, res, x_pad_to_multiple)
    n = x.shape[-1]
    if debug_on():
        log_call(op, x=x, weight=weight, epsilon=eps, res=res, x_pad_to_multiple=x_pad_to_multiple)
    if torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in (x, weight, res)):
        # differentiable: RMSNorm's autograd path (one launch forward and one backward), then the pad
        if res is None:
            y, s = norm(op, x, weight, None, eps, is_rms=True), None
        else:
            y, s = norm_add(op, x, res, weight, None, eps, is_rms=True, names=("x", "res"))
        return (torch.nn.functional.pad(y, (0, n_out - n)) if n_out > n else y), s
    out = torch.empty((*x.shape[:-1], n_out), dtype=x.dtype, device=x.device)
    res_out = None if res is None else torch.empty(res.shape, dtype=res.dtype, device=res.device)
    if x.numel():
        x2 = rows_view(op, "x", x, writable=False)
        _launch_norm_fwd(x2, out.view(-1, n_out), weight, None, eps, True,
                         None if res is None else rows_view(op, "res", res, writable=False),
                         None if res is None else res_out.view(-1, n), pad_to=x_pad_to_multiple if n_out > n else 0)
    return out, res_out


@public_op
def rmsnorm_pad(x: torch.Tensor, weight: torch.Tensor, epsilon: float, x_pad_to_multiple: int = 0) -> torch.Tensor:
    """RMSNorm of x into an output padded to a multiple of ``x_pad_to_multiple`` columns (zeros);
    ``fused_add_rmsnorm_pad`` without ``res``."""
    return _pad_norm("rmsnorm_pad", x, weight, epsilon, None, x_pad_to_multiple)[0]


@public_op
def add_rmsnorm_pad(x: torch.Tensor, weight: torch.Tensor, epsilon: float, res: torch.Tensor,
                    x_pad_to_multiple: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """``(out, res_out)``: ``res_out = x + res``, ``out`` its RMSNorm padded to a multiple of
    ``x_pad_to_multiple`` columns (zeros); ``fused_add_rmsnorm_pad`` with ``res``."""
    if res is None:
        raise TypeError("add_rmsnorm_pad: res must be a torch.Tensor, got None")
    return _pad_norm("add_rmsnorm_pad", x, weight, epsilon, res, x_pad_to_multiple)


def fused_add_rmsnorm_pad(x: torch.Tensor, weight: torch.Tensor, epsilon: float, res: torch.Tensor | None = None,
                          x_pad_to_multiple: int = 0):
    """aiter's: ``out``, or ``(out, res_out)`` with ``res`` (module doc)."""
    _check("fused_add_rmsnorm_pad", x, weight, epsilon, res, x_pad_to_multiple)
    if res is None:
        return rmsnorm_pad(x, weight, epsilon, x_pad_to_multiple)
    return add_rmsnorm_pad(x, weight, epsilon, res, x_pad_to_multiple)
