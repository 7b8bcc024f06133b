"""Gradients of the fused add + norm forms (``rmsnorm2d_fwd_with_add``,
``layernorm2d_fwd_with_add``, ``fused_add_rms_norm``) against autograd through the fp32
native reference: to input, residual, weight, bias and x_bias, from out and residual_out
(either alone, or both); and the layers' residual forms, out of place while autograd
records, with the same gradients on both backends."""

import pytest
import torch

from aiter_lite.layers import GemmaRMSNorm, LayerNorm, RMSNorm
from aiter_lite.ops.native.normalization import layernorm as ref_ln
from aiter_lite.ops.native.normalization import rmsnorm as ref_rms
from aiter_lite.ops.triton.normalization import layernorm as ln
from aiter_lite.ops.triton.normalization import rmsnorm as rms
from op_tests.utils import DEVICE, DTYPES, assert_close, by_device, make_rows, tolerance
from op_tests.utils.inputs import poison_allocations

SHAPES = by_device(cpu=[(0, 32), (1, 7), (5, 127), (3, 1000)],
                   gpu=[(0, 32), (1, 7), (5, 127), (4096, 4096), (64, 65536), (2, 262144)])


@pytest.fixture(autouse=True)
def _poisoned_empty(monkeypatch):
    """The backward's allocations start NaN: an element it does not write fails."""
    poison_allocations(monkeypatch)


def _leaves(*tensors):
    return [None if t is None else t.detach().clone().requires_grad_() for t in tensors]


def _fp32_leaves(*tensors):
    return [None if t is None else t.detach().float().requires_grad_() for t in tensors]


def _check(got, want, dtype, n, names, m=1):
    """Input gradients reduce over a row (n); a parameter's (weight, bias, x_bias) sums m
    rows of them, stored in its own dtype: its budget grows with sqrt(m) as well."""
    for g, w, name in zip(got, want, names):
        atol, rtol = tolerance(dtype, n)
        if name in ("weight", "bias", "x_bias"):
            atol, rtol = (t * max(1.0, (m ** 0.5) / 8) for t in (atol, rtol))
        if g is None:
            continue
        if w.grad is None:  # no path to this input from the gradients given
            assert g.grad is None or not g.grad.any(), f"{name} got a gradient the reference has not"
            continue
        assert g.grad is not None, f"{name} got no gradient"
        assert_close(g.grad, w.grad, atol=atol, rtol=rtol, dtype=dtype, name=f"d{name}")


@pytest.mark.parametrize("grads_from", ["both", "out", "residual_out"])
@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_rmsnorm2d_fwd_with_add_backward(dtype, shape, grads_from):
    m, n = shape
    x, r = make_rows(m, n, dtype, scale=2.0), make_rows(m, n, dtype, strided=True)
    w = (torch.rand(n, device=DEVICE) + 0.5).to(dtype)
    dy, ds = make_rows(m, n, dtype), make_rows(m, n, dtype)
    pick = {"both": ([0, 1]), "out": [0], "residual_out": [1]}[grads_from]

    def run(mod, leaves, dt):
        xi, ri, wi = leaves
        out, rout = torch.empty(m, n, dtype=dt, device=DEVICE), torch.empty(m, n, dtype=dt, device=DEVICE)
        mod.rmsnorm2d_fwd_with_add(out, xi, ri, rout, wi, 1e-6, 0.5)
        outs, grads = (out, rout), (dy.to(dt), ds.to(dt))
        torch.autograd.backward([outs[i] for i in pick], [grads[i] for i in pick])

    got, want = _leaves(x, r, w), _fp32_leaves(x, r, w)
    run(rms, got, dtype)
    run(ref_rms, want, torch.float32)
    _check(got, want, dtype, n, ("input", "residual_in", "weight"), m)


@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_layernorm2d_fwd_with_add_backward(dtype, shape):
    m, n = shape
    x, r = make_rows(m, n, dtype, scale=2.0), make_rows(m, n, dtype)
    w, b, xb = ((torch.randn(n, device=DEVICE) * 0.2 + c).to(dtype) for c in (1.0, 0.0, 0.0))
    dy, ds = make_rows(m, n, dtype), make_rows(m, n, dtype)

    def run(mod, leaves, dt):
        xi, ri, wi, bi, xbi = leaves
        out, rout = torch.empty(m, n, dtype=dt, device=DEVICE), torch.empty(m, n, dtype=dt, device=DEVICE)
        mod.layernorm2d_fwd_with_add(out, xi, ri, rout, wi, bi, 1e-5, xbi)
        torch.autograd.backward([out, rout], [dy.to(dt), ds.to(dt)])

    got, want = _leaves(x, r, w, b, xb), _fp32_leaves(x, r, w, b, xb)
    run(ln, got, dtype)
    run(ref_ln, want, torch.float32)
    _check(got, want, dtype, n, ("input", "residual_in", "weight", "bias", "x_bias"), m)


def test_fused_add_rms_norm_in_place_is_differentiable():
    """vLLM's in-place form on activations autograd records: the writes are recorded."""
    x0, r0 = make_rows(6, 64, torch.float32).requires_grad_(), make_rows(6, 64, torch.float32).requires_grad_()
    w = (torch.rand(64, device=DEVICE) + 0.5).requires_grad_()
    dy, ds = make_rows(6, 64, torch.float32), make_rows(6, 64, torch.float32)
    grads = []
    for mod in (rms, ref_rms):
        xs, rs, ws = _leaves(x0, r0, w)
        x, r = xs * 1.0, rs * 1.0  # non-leaves, as a model's activations
        mod.fused_add_rms_norm(x, r, ws, 1e-6)
        torch.autograd.backward([x, r], [dy, ds])
        grads.append((xs.grad, rs.grad, ws.grad))
    for g, w_, name in zip(grads[0], grads[1], ("input", "residual", "weight")):
        assert_close(g, w_, name=f"d{name}")


LAYERS = {"rms": lambda b: RMSNorm(96, eps=1e-5, backend=b), "gemma": lambda b: GemmaRMSNorm(96, backend=b),
          "layer": lambda b: LayerNorm(96, backend=b)}


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("kind", LAYERS)
def test_layer_residual_form_trains_alike_on_both_backends(kind, dtype):
    x, r = make_rows(7, 96, dtype, lead=(2,), scale=2.0), make_rows(7, 96, dtype, lead=(2,))
    dy, ds = make_rows(7, 96, dtype, lead=(2,)), make_rows(7, 96, dtype, lead=(2,))
    results = []
    for backend in ("triton", "native"):
        layer = LAYERS[kind](backend).to(device=DEVICE, dtype=dtype)
        with torch.no_grad():
            for p in layer.parameters():
                p.copy_(torch.linspace(-0.3, 0.3, p.numel(), device=DEVICE).to(dtype) + (1.0 if p is layer.weight
                                                                                          else 0.0))
        xi, ri = _leaves(x, r)
        xa, ra = xi * 1.0, ri * 1.0
        out, res = layer(xa, ra)
        assert out is not xa and res is not ra, "the in-place path under autograd"
        torch.autograd.backward([out, res], [dy, ds])
        results.append((xi.grad, ri.grad, *[p.grad for p in layer.parameters()]))
    for i, (g, w) in enumerate(zip(*results)):
        # inputs: a row reduction each; parameters: summed over the 14 rows too
        atol, rtol = tolerance(dtype, 96 if i < 2 else 96 * 14)
        assert_close(g, w, atol=atol, rtol=rtol, name=f"{kind} gradient {i}, triton vs native")
