"""CrossEntropyLoss and FusedLinearCrossEntropyLoss give the same losses and the same
gradients on both backends (every dtype, each reduction, the options), take torch's /
Liger's argument order, and check their options when built."""

import pytest
import torch

from aiter_lite.layers import CrossEntropyLoss, FusedLinearCrossEntropyLoss
from op_tests.utils import DEVICE, DTYPES, assert_close


def _targets(rows: int, vocab: int) -> torch.Tensor:
    t = torch.randint(0, vocab, (rows,), device=DEVICE)
    t[1] = -100
    return t


def _run(layer, args, grad_of):
    """The loss (fp32) and the gradients of the args at the positions ``grad_of``."""
    leaves = [a.clone().requires_grad_(i in grad_of) if a.is_floating_point() else a for i, a in enumerate(args)]
    loss = layer(*leaves)
    weights = (torch.rand(loss.shape, generator=torch.Generator().manual_seed(0)) + 0.5).to(DEVICE)
    (loss.float() * weights).sum().backward()
    return loss.detach().float(), [leaves[i].grad.float() for i in grad_of]


def _tol(dtype):
    return dict(atol=1e-5, rtol=1e-4) if dtype == torch.float32 else dict(atol=3e-2, rtol=3e-2)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_cross_entropy_loss_backends_agree(reduction, dtype):
    args = ((torch.randn(2, 5, 300, device=DEVICE) * 3).to(dtype), _targets(10, 300).view(2, 5))
    layers = [CrossEntropyLoss(reduction=reduction, label_smoothing=0.05, softcap=10.0, backend=b)
              for b in ("native", "triton")]
    (loss_n, grads_n), (loss_t, grads_t) = (_run(layer, args, (0,)) for layer in layers)
    assert_close(loss_t, loss_n, **_tol(dtype))
    assert_close(grads_t[0], grads_n[0], atol=_tol(dtype)["atol"] * grads_n[0].abs().max().item(), rtol=0.0)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_fused_linear_cross_entropy_loss_backends_agree(reduction, dtype):
    w = (torch.randn(70, 32, device=DEVICE) * 0.3).to(dtype)
    x = torch.randn(2, 6, 32, device=DEVICE).to(dtype)
    b = torch.randn(70, device=DEVICE).to(dtype)
    args = (w, x, _targets(12, 70).view(2, 6), b)
    layers = [FusedLinearCrossEntropyLoss(reduction=reduction, chunk_size=5, backend=be) for be in ("native", "triton")]
    (loss_n, grads_n), (loss_t, grads_t) = (_run(layer, args, (0, 1, 3)) for layer in layers)
    assert loss_t.shape == ((2, 6) if reduction == "none" else ())
    assert_close(loss_t, loss_n, **_tol(dtype))
    for name, got, want in zip(("lin_weight", "_input", "bias"), grads_t, grads_n):
        assert_close(got, want, atol=2 * _tol(dtype)["atol"] * want.abs().max().item(), rtol=0.0,
                     name=f"{name}'s gradient")


@pytest.mark.parametrize("make, match", [
    (lambda: CrossEntropyLoss(reduction="batchmean"), "CrossEntropyLoss: reduction must be one of"),
    (lambda: CrossEntropyLoss(label_smoothing=-0.1), r"CrossEntropyLoss: label_smoothing must be in \[0, 1\]"),
    (lambda: FusedLinearCrossEntropyLoss(softcap=-1.0), "FusedLinearCrossEntropyLoss: softcap must be positive"),
    (lambda: FusedLinearCrossEntropyLoss(chunk_size=0), "FusedLinearCrossEntropyLoss: chunk_size must be >= 1"),
    (lambda: CrossEntropyLoss(backend="cuda"), "CrossEntropyLoss: backend must be one of"),
])
def test_options_checked_when_built(make, match):
    with pytest.raises(ValueError, match=match):
        make()


def test_repr():
    layer = FusedLinearCrossEntropyLoss(softcap=30.0, chunk_size=512, backend="native")
    assert repr(layer) == ("FusedLinearCrossEntropyLoss(ignore_index=-100, reduction=mean, label_smoothing=0.0, "
                           "softcap=30.0, backend=native, chunk_size=512)")
