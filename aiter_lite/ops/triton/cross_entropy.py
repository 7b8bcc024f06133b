"""Cross entropy of logits, and of a linear layer's output without its logits (a language
model's loss), on the Triton backend.

``cross_entropy(logits, target)`` is ``torch.nn.functional.cross_entropy`` over rows of
logits (the class dim last: ``(..., V)`` logits, ``(...)`` targets), with torch's
``ignore_index``, ``reduction`` and ``label_smoothing`` and Gemma 2's ``softcap``. One
kernel pass reads each row for its log-sum-exp (fp32) and loss; the backward kernel reads
the logits again with the saved log-sum-exp and writes their gradient (the logits are
never upcast to a copy, nor is a log-softmax stored). The loss has the logits' dtype, as
torch's.

``fused_linear_cross_entropy(input, weight, target, bias)`` is
``cross_entropy(input @ weight.T + bias, target)`` computed ``chunk_size`` rows at a time:
a language model's ``(tokens, vocab)`` logits (1 GB in bf16 for 4096 tokens of Llama 3's
128256, 2 GB more where the loss upcasts them) never exist at once. Where autograd records
the call, each chunk's logits are turned into their gradient in place by the kernel and
multiplied out at once into the gradients of ``input``, ``weight`` and ``bias``; the
backward only scales them by the loss's gradient (nothing at all for a gradient of 1) and
hands them over (the weight's becomes its ``.grad`` without a copy), so it runs once: a
second backward through the same graph (``retain_graph=True``) raises.
The weight's gradient is accumulated over the chunks in the weight's dtype (bf16 rounds it
once per chunk: chunks of 1024 rows or more keep that to a few roundings). With
``reduction="none"`` the per-row gradient weights are known only in the backward, which
recomputes each chunk's logits (one more matmul) instead. The loss is fp32 (the dtype
Hugging Face's loss has, which upcasts the logits).

Both follow torch where a row is odd: a target equal to ``ignore_index`` adds nothing (and
"mean" divides by the targets that are not ignored; none: NaN, as torch); a row holding
NaN or +inf has a NaN loss. A target outside ``[0, V)`` that is not ``ignore_index`` gives a
NaN loss (and NaN gradients) where torch raises: the kernel finds it, and the host never
waits for the GPU to check; targets on the CPU, and GPU targets under
``AITER_CROSS_ENTROPY_CHECK_TARGETS=1``, are checked on the host first (a ValueError).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from aiter_lite import envs
from aiter_lite.ops.triton._triton_kernels.cross_entropy import _cross_entropy_kernel, _scale_kernel
from aiter_lite.spec.device import device_profile
from aiter_lite.utils.checks import (
    check_choice,
    check_float_tensor,
    check_int,
    check_real,
    check_same_device,
    check_triton_device,
    check_unit_last_stride,
    host_check_wanted,
)
from aiter_lite.utils.fast_launch import launch
from aiter_lite.utils.launch import cdiv, grid_sms, next_power_of_2, stream_buffer
from aiter_lite.utils.launcher import launcher
from aiter_lite.utils.registry import public_op

__all__ = ["cross_entropy", "fused_linear_cross_entropy", "CrossEntropyLaunchConfig", "cross_entropy_launch_config"]

REDUCTIONS = ("mean", "sum", "none")


@dataclass(frozen=True)
class CrossEntropyLaunchConfig:
    BLOCK_N: int  # columns per chunk of a row (one program a row); the scaling kernel's block
    num_warps: int


# A row of logits in 8192-wide chunks of 16 warps (a row of 128256 bf16 logits is 16 chunks);
# narrower rows in one chunk, 512 columns a warp.
_BLOCK_N = 8192
_CE_WARPS = 16
_SCALE = CrossEntropyLaunchConfig(4096, 4)
_REDUCE_ROWS = 1024  # rows a step of the last program's sum over the rows' losses
# the logits one chunk of fused_linear_cross_entropy may hold: 2^27 elements (256 MiB in
# bf16, 1024 rows of 128256), rounded down to a multiple of 256 rows
_CHUNK_ELEMENTS = 1 << 27
_CHUNK_ALIGN = 256


def cross_entropy_launch_config(n_cols: int) -> CrossEntropyLaunchConfig:
    """The loss kernel's chunk and warps for rows of ``n_cols`` logits."""
    block = min(_BLOCK_N, next_power_of_2(n_cols))
    return CrossEntropyLaunchConfig(block, min(_CE_WARPS, max(block // 512, 1)))


def _run(x, target, loss, lse, grad, scale, ignore_index, label_smoothing, softcap, forward, write_grad,
         cfg: CrossEntropyLaunchConfig | None, out: torch.Tensor | None = None, reduce: int = 0,
         divide: bool = False) -> None:
    n_rows, n_cols = x.shape
    if n_rows == 0:
        return
    cfg = cfg or cross_entropy_launch_config(n_cols)
    ticket = stream_buffer("cross_entropy_ticket", 1, torch.int32, x.device, zeroed=True) if reduce else loss
    launch(_cross_entropy_kernel, (n_rows,), x, target, loss, lse, grad, scale, loss if out is None else out, ticket,
           x.stride(0), grad.stride(0), scale.stride(0) if scale.numel() > 1 else 0, n_rows, n_cols, ignore_index,
           label_smoothing, softcap, FORWARD=forward, GRAD=write_grad, SOFTCAP=softcap > 0,
           SMOOTHING=label_smoothing > 0, REDUCE=reduce, DIVIDE=divide, BLOCK_N=cfg.BLOCK_N, BLOCK_R=_REDUCE_ROWS,
           num_warps=cfg.num_warps)


@launcher(mutates=("loss", "lse"))
def _launch_cross_entropy(x: torch.Tensor, target: torch.Tensor, loss: torch.Tensor, lse: torch.Tensor,
                          ignore_index: int, label_smoothing: float, softcap: float,
                          config: CrossEntropyLaunchConfig | None = None) -> None:
    """Each row of 2-D logits x: its fp32 loss and log-sum-exp."""
    _run(x, target, loss, lse, lse.view(-1, 1), lse, ignore_index, label_smoothing, softcap, True, False, config)


@launcher(mutates=("loss", "lse", "out"))
def _launch_cross_entropy_reduced(x: torch.Tensor, target: torch.Tensor, loss: torch.Tensor, lse: torch.Tensor,
                                  out: torch.Tensor, ignore_index: int, label_smoothing: float, softcap: float,
                                  mean: bool, config: CrossEntropyLaunchConfig | None = None) -> None:
    """As ``_launch_cross_entropy`` (lse with one element more, the count of targets not
    ignored), and the rows' sum or mean into out (one element, any float dtype)."""
    _run(x, target, loss, lse, lse.view(-1, 1), lse, ignore_index, label_smoothing, softcap, True, False, config,
         out=out, reduce=2 if mean else 1)


@launcher(mutates=("grad",))
def _launch_cross_entropy_bwd(x: torch.Tensor, target: torch.Tensor, lse: torch.Tensor, scale: torch.Tensor,
                              grad: torch.Tensor, ignore_index: int, label_smoothing: float, softcap: float,
                              divide: bool = False, config: CrossEntropyLaunchConfig | None = None) -> None:
    """The gradient of 2-D logits x into grad from the rows' log-sum-exp, each row's weighted
    by scale (one value, or one a row; any float dtype), divided by ``lse[n_rows]`` where
    ``divide`` (mean's count, written by ``_launch_cross_entropy_reduced``)."""
    _run(x, target, lse, lse, grad, scale, ignore_index, label_smoothing, softcap, False, True, config,
         divide=divide)


@launcher(mutates=("logits", "loss", "lse"))
def _launch_cross_entropy_inplace(logits: torch.Tensor, target: torch.Tensor, loss: torch.Tensor, lse: torch.Tensor,
                                  scale: torch.Tensor, ignore_index: int, label_smoothing: float, softcap: float,
                                  forward: bool, config: CrossEntropyLaunchConfig | None = None) -> None:
    """2-D logits turned into their gradient (weighted by scale) in place: after computing
    the rows' loss and log-sum-exp (``forward``), or from a log-sum-exp already in lse."""
    _run(logits, target, loss, lse, logits, scale, ignore_index, label_smoothing, softcap, forward, True, config)


@launcher(mutates=("x",))
def _launch_scale(x: torch.Tensor, scale: torch.Tensor, config: CrossEntropyLaunchConfig | None = None) -> None:
    """x *= scale (one fp32 value on x's device; 1: no pass over x), 4 programs an SM."""
    n = x.numel()
    if n == 0:
        return
    cfg = config or _SCALE
    grid = min(cdiv(n, cfg.BLOCK_N), 4 * grid_sms(device_profile(x.device)))
    launch(_scale_kernel, (grid,), x, scale, n, BLOCK=cfg.BLOCK_N, num_warps=cfg.num_warps)


# ---------------------------------------------------------------------------
# checks shared by both ops


def check_options(op: str, ignore_index, reduction, label_smoothing, softcap) -> tuple[int, str, float, float]:
    """(ignore_index, reduction, label_smoothing, softcap as a float, 0 for None), checked;
    ``op`` names the caller (an op or a loss module)."""
    ignore_index = check_int(op, "ignore_index", ignore_index, -(2**31), 2**31 - 1)
    reduction = check_choice(op, "reduction", reduction, REDUCTIONS)
    label_smoothing = check_real(op, "label_smoothing", label_smoothing)
    if not 0.0 <= label_smoothing <= 1.0:
        raise ValueError(f"{op}: label_smoothing must be in [0, 1], got {label_smoothing}")
    cap = 0.0 if softcap is None else check_real(op, "softcap", softcap, positive=True)
    return ignore_index, reduction, label_smoothing, cap


def _check_target(op: str, target, rows_name: str, rows: torch.Tensor, n_classes: int, ignore_index: int) -> None:
    if not isinstance(target, torch.Tensor):
        raise TypeError(f"{op}: target must be a torch.Tensor, got {type(target).__name__}")
    if target.dtype not in (torch.int64, torch.int32):
        raise TypeError(f"{op}: target must be int64 or int32 (class indices), got {target.dtype}")
    if target.shape != rows.shape[:-1]:
        raise ValueError(f"{op}: target must have the shape of {rows_name} without its last dim, "
                         f"{tuple(rows.shape[:-1])}, got {tuple(target.shape)}")
    check_same_device(op, "target", target, rows_name, rows)
    if target.numel() and host_check_wanted(target, switch=envs.cross_entropy_check_targets):
        bad = (target != ignore_index) & ((target < 0) | (target >= n_classes))
        if bool(bad.any()):
            i = int(bad.reshape(-1).nonzero()[0])
            raise ValueError(f"{op}: target must hold class indices in [0, {n_classes}) or ignore_index "
                             f"{ignore_index}, got {int(target.reshape(-1)[i])} at flat index {i}")


def _rows(t: torch.Tensor) -> torch.Tensor:
    return t.reshape(-1, t.shape[-1]) if t.shape[-1] > 0 else t.reshape(-1, 0)


def _n_valid(t: torch.Tensor, ignore_index: int, reduction: str) -> torch.Tensor | None:
    """The count of targets not ignored, fp32 ("mean" divides by it), else None."""
    return (t != ignore_index).sum().float() if reduction == "mean" else None


def _reduce(loss_rows: torch.Tensor, reduction: str, n_valid: torch.Tensor | None) -> torch.Tensor:
    if reduction == "none":
        return loss_rows
    total = loss_rows.sum()
    return total / n_valid if reduction == "mean" else total


# ---------------------------------------------------------------------------
# cross_entropy


class _CrossEntropyFunction(torch.autograd.Function):
    """The loss; the logits' gradient by the backward kernel from the saved logits and
    log-sum-exp (for "mean", with the count of targets after it)."""

    @staticmethod
    def forward(ctx, logits, target, ignore_index, reduction, label_smoothing, softcap):
        loss, x, t, lse, mean_count = _cross_entropy_forward(logits, target, ignore_index, reduction,
                                                             label_smoothing, softcap)
        ctx.save_for_backward(x, t, lse, mean_count)  # the rows the forward read: no second gather
        ctx.options, ctx.shape = (ignore_index, reduction, label_smoothing, softcap), logits.shape
        return loss

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad_loss):
        x, t, lse, mean_count = ctx.saved_tensors
        ignore_index, reduction, label_smoothing, softcap = ctx.options
        grad = torch.empty(ctx.shape, dtype=x.dtype, device=x.device)
        if reduction == "none":
            scale = grad_loss.reshape(-1).contiguous()
        elif mean_count is not None:  # mean reduced on the host (no rows or no classes)
            scale = grad_loss.float() / mean_count
        else:
            scale = grad_loss
        divide = reduction == "mean" and mean_count is None
        _launch_cross_entropy_bwd(x, t, lse, scale, grad.view(-1, x.shape[1]), ignore_index, label_smoothing, softcap,
                                  divide)
        return grad, None, None, None, None, None


def _cross_entropy_forward(logits, target, ignore_index, reduction, label_smoothing, softcap):
    """(loss in logits' dtype, the 2-D rows and flat targets read, the rows' fp32
    log-sum-exp (and, reduced by the kernel, the count of targets not ignored after them),
    the count as a tensor where "mean" was reduced on the host, else None)."""
    x = _rows(logits)
    t = target.reshape(-1).contiguous()
    n_rows = t.shape[0]
    if reduction != "none" and n_rows and x.shape[1]:  # reduced in the launch: no host op after it
        loss_rows = torch.empty(n_rows, dtype=torch.float32, device=x.device)
        lse = torch.empty(n_rows + 1, dtype=torch.float32, device=x.device)
        loss = torch.empty((), dtype=logits.dtype, device=x.device)
        _launch_cross_entropy_reduced(x, t, loss_rows, lse, loss, ignore_index, label_smoothing, softcap,
                                      reduction == "mean")
        return loss, x, t, lse, None
    # allocated in target's shape: "none" returns this very tensor, not a view of it (an
    # autograd node whose output is a view or alias of a tensor it made gets a zero
    # gradient under inductor, torch 2.11)
    losses = torch.empty(target.shape, dtype=torch.float32, device=x.device)
    loss_rows = losses.view(-1)
    lse = torch.empty_like(loss_rows)
    n_valid = _n_valid(t, ignore_index, reduction)
    if x.shape[1] == 0:  # no classes: every row's log-sum-exp is -inf and no target is valid
        loss_rows.copy_(torch.where(t == ignore_index, 0.0, float("nan")))
        lse.fill_(float("-inf"))
    else:
        _launch_cross_entropy(x, t, loss_rows, lse, ignore_index, label_smoothing, softcap)
    loss = _reduce(losses, reduction, n_valid)
    if loss.dtype != logits.dtype:  # no .to() of the same dtype: it returns an alias
        loss = loss.to(logits.dtype)
    return loss, x, t, lse, n_valid


@public_op(unless=envs.cross_entropy_check_targets)
def cross_entropy(logits: torch.Tensor, target: torch.Tensor, ignore_index: int = -100, reduction: str = "mean",
                  label_smoothing: float = 0.0, softcap: float | None = None) -> torch.Tensor:
    """``torch.nn.functional.cross_entropy(logits, target, ...)`` with the class dim last
    (logits ``(..., V)``, target ``(...)`` int64 / int32; torch's class dim is 1 for more than
    2 dims); ``softcap``: the loss of ``softcap * tanh(logits / softcap)``. Differentiable in
    logits. Returns the loss in logits' dtype: a 0-d tensor, or target's shape for "none"."""
    op = "cross_entropy"
    check_float_tensor(op, "logits", logits)
    if logits.dim() == 0:
        raise ValueError(f"{op}: logits must have at least 1 dim (..., V), got a 0-d tensor")
    check_unit_last_stride(op, "logits", logits)
    check_triton_device(op, "logits", logits)
    ignore_index, reduction, label_smoothing, cap = check_options(op, ignore_index, reduction, label_smoothing,
                                                                   softcap)
    _check_target(op, target, "logits", logits, logits.shape[-1], ignore_index)
    if logits.requires_grad and torch.is_grad_enabled():
        return _CrossEntropyFunction.apply(logits, target, ignore_index, reduction, label_smoothing, cap)
    return _cross_entropy_forward(logits, target, ignore_index, reduction, label_smoothing, cap)[0]


# ---------------------------------------------------------------------------
# fused_linear_cross_entropy


def _chunk_rows(n_rows: int, vocab: int, chunk_size: int | None) -> int:
    if chunk_size is not None:
        return max(min(chunk_size, n_rows), 1)
    rows = max(_CHUNK_ELEMENTS // max(vocab, 1) // _CHUNK_ALIGN * _CHUNK_ALIGN, _CHUNK_ALIGN)
    return max(min(rows, n_rows), 1)


def _linear_chunks(x, weight, bias, target, lse, loss_rows, scale, options, chunk: int, forward: bool,
                   grads: tuple[bool, bool, bool]):
    """Over ``chunk`` rows at a time: logits = x @ weight.T + bias; the kernel's loss and lse
    (``forward``) and / or, where any of ``grads`` (x, weight, bias) is wanted, the logits'
    gradient in place and its products into those gradients. Returns them (None where not
    wanted)."""
    ignore_index, label_smoothing, softcap = options
    n_rows, vocab = x.shape[0], weight.shape[0]
    want_grad = any(grads)
    grad_x = torch.empty_like(x) if grads[0] else None
    grad_w = (torch.empty_like(weight) if n_rows else torch.zeros_like(weight)) if grads[1] else None
    grad_b = torch.zeros(vocab, dtype=torch.float32, device=x.device) if grads[2] else None
    buf = torch.empty(min(chunk, n_rows), vocab, dtype=x.dtype, device=x.device)
    w_t = weight.t()
    for i, start in enumerate(range(0, n_rows, chunk)):
        stop = min(start + chunk, n_rows)
        x_c, logits = x[start:stop], buf[:stop - start]
        if bias is None:
            torch.mm(x_c, w_t, out=logits)
        else:
            torch.addmm(bias, x_c, w_t, out=logits)
        rows = slice(start, stop)
        s = scale[rows] if scale.numel() > 1 else scale
        if want_grad:
            _launch_cross_entropy_inplace(logits, target[rows], loss_rows[rows], lse[rows], s, ignore_index,
                                          label_smoothing, softcap, forward)
        else:
            _launch_cross_entropy(logits, target[rows], loss_rows[rows], lse[rows], ignore_index, label_smoothing,
                                  softcap)
        if grads[0]:
            torch.mm(logits, weight, out=grad_x[rows])
        if grads[1]:
            if i == 0:
                torch.mm(logits.t(), x_c, out=grad_w)
            else:
                grad_w.addmm_(logits.t(), x_c)
        if grads[2]:
            grad_b += logits.sum(0, dtype=torch.float32)
    return grad_x, grad_w, None if grad_b is None else grad_b.to(weight.dtype)


def _linear_loss(x, weight, bias, target, options, chunk: int, shape) -> tuple[torch.Tensor, torch.Tensor]:
    """Each row's fp32 loss (in ``shape``, the targets') and log-sum-exp, the logits chunk
    by chunk, no gradient."""
    losses = torch.empty(shape, dtype=torch.float32, device=x.device)
    lse = torch.empty(x.shape[0], dtype=torch.float32, device=x.device)
    _linear_chunks(x, weight, bias, target, lse, losses.view(-1), lse, options, chunk, True, (False, False, False))
    return losses, lse


class _FusedLinearCrossEntropyFunction(torch.autograd.Function):
    """mean / sum: the gradients computed in the forward, scaled in the backward; none:
    the backward recomputes each chunk's logits with the rows' gradient weights."""

    @staticmethod
    def forward(ctx, x, weight, bias, target, ignore_index, reduction, label_smoothing, softcap, chunk):
        shape = target.shape
        x2, t = x.reshape(-1, x.shape[-1]), target.reshape(-1).contiguous()
        options = (ignore_index, label_smoothing, softcap)
        grads = (ctx.needs_input_grad[0], ctx.needs_input_grad[1], bias is not None and ctx.needs_input_grad[2])
        ctx.reduction, ctx.shape = reduction, x.shape
        if reduction == "none":
            losses, lse = _linear_loss(x2, weight, bias, t, options, chunk, shape)
            ctx.save_for_backward(x2, weight, bias, t, lse)
            ctx.options, ctx.chunk, ctx.grads = options, chunk, grads
            return losses  # not a view: see _cross_entropy_forward
        loss_rows = torch.empty(x2.shape[0], dtype=torch.float32, device=x.device)
        lse = torch.empty_like(loss_rows)
        n_valid = _n_valid(t, ignore_index, reduction)
        scale = (1.0 / n_valid if reduction == "mean" else torch.ones((), device=x.device)).reshape(1)
        # saved, not kept on ctx: autograd releases them once the backward returns, and the
        # weight's gradient becomes its .grad without a copy
        ctx.save_for_backward(*_linear_chunks(x2, weight, bias, t, lse, loss_rows, scale, options, chunk, True,
                                              grads))
        ctx.spent = False
        return _reduce(loss_rows, reduction, n_valid)

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad_loss):
        if ctx.reduction == "none":
            x2, weight, bias, t, lse = ctx.saved_tensors
            scale = grad_loss.reshape(-1).float().contiguous()
            grad_x, grad_w, grad_b = _linear_chunks(x2, weight, bias, t, lse, lse, scale, ctx.options, ctx.chunk,
                                                    False, ctx.grads)
        else:
            if ctx.spent:  # the gradients were scaled in place and handed over
                raise RuntimeError("fused_linear_cross_entropy: its backward (reduction 'mean' / 'sum') runs once: "
                                   "the gradients are computed in the forward; backward with retain_graph=True "
                                   "a second time is not supported (reduction='none' recomputes them)")
            ctx.spent = True
            grad_x, grad_w, grad_b = ctx.saved_tensors
            g = grad_loss.float().reshape(1)
            for grad in (grad_x, grad_w, grad_b):
                if grad is not None:
                    _launch_scale(grad, g)
        if grad_x is not None:
            grad_x = grad_x.view(ctx.shape)
        return grad_x, grad_w, grad_b, None, None, None, None, None, None


@public_op(unless=envs.cross_entropy_check_targets)
def fused_linear_cross_entropy(input: torch.Tensor, weight: torch.Tensor, target: torch.Tensor,
                               bias: torch.Tensor | None = None, ignore_index: int = -100, reduction: str = "mean",
                               label_smoothing: float = 0.0, softcap: float | None = None,
                               chunk_size: int | None = None) -> torch.Tensor:
    """``cross_entropy(input @ weight.T + bias, target, ...)`` without the logits (see the
    module doc): input ``(..., H)``, weight ``(V, H)`` (a language model head's), bias ``(V,)``
    or None, target ``input.shape[:-1]`` int64 / int32. ``chunk_size``: rows of logits at a
    time (default: 2^27 logits' worth, a multiple of 256 rows). Differentiable in input,
    weight and bias. Returns the fp32 loss: a 0-d tensor, or target's shape for "none"."""
    op = "fused_linear_cross_entropy"
    for name, t in (("input", input), ("weight", weight)):
        check_float_tensor(op, name, t)
        check_triton_device(op, name, t)
    if input.dim() == 0:
        raise ValueError(f"{op}: input must have at least 1 dim (..., H), got a 0-d tensor")
    if weight.dim() != 2 or weight.shape[1] != input.shape[-1]:
        raise ValueError(f"{op}: weight must be (V, {input.shape[-1]}) for input of shape {tuple(input.shape)}, "
                         f"got {tuple(weight.shape)}")
    if weight.dtype != input.dtype:
        raise TypeError(f"{op}: weight must have input's dtype {input.dtype}, got {weight.dtype}")
    check_same_device(op, "weight", weight, "input", input)
    if bias is not None:
        check_float_tensor(op, "bias", bias)
        if bias.shape != (weight.shape[0],) or bias.dtype != input.dtype:
            raise ValueError(f"{op}: bias must be ({weight.shape[0]},) of input's dtype {input.dtype}, got "
                             f"{tuple(bias.shape)} {bias.dtype}")
        check_same_device(op, "bias", bias, "input", input)
    ignore_index, reduction, label_smoothing, cap = check_options(op, ignore_index, reduction, label_smoothing,
                                                                   softcap)
    if weight.shape[0] == 0:
        raise ValueError(f"{op}: weight must have at least one row (class), got {tuple(weight.shape)}")
    _check_target(op, target, "input", input, weight.shape[0], ignore_index)
    if chunk_size is not None:
        chunk_size = check_int(op, "chunk_size", chunk_size, 1)
    chunk = _chunk_rows(target.numel(), weight.shape[0], chunk_size)
    if torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in (input, weight, bias)):
        return _FusedLinearCrossEntropyFunction.apply(input, weight, bias, target, ignore_index, reduction,
                                                      label_smoothing, cap, chunk)
    t = target.reshape(-1).contiguous()
    losses, _ = _linear_loss(input.reshape(-1, input.shape[-1]), weight, bias, t,
                             (ignore_index, label_smoothing, cap), chunk, target.shape)
    return _reduce(losses, reduction, _n_valid(t, ignore_index, reduction))
