"""aiter_lite.ops.triton.normalization.layernorm against the fp32 native reference."""

import pytest
import torch

from aiter_lite.ops.native.normalization import layernorm as ref
from aiter_lite.ops.triton.normalization import layernorm as tri
from op_tests.triton_tests.test_activation import assert_each_tensor_refused_on_meta
from op_tests.utils import DEVICE, DTYPES, assert_close, by_device, make_rows, poisoned, tolerance
from op_tests.utils.norm import (
    BWD_SHAPES,
    BWD_REGIMES,
    LOOPED_FWD,
    SHAPES,
    check_backward,
    pin_config,
    weights,
)

EPS = 1e-5


def _check_ln(x, w, b, eps=EPS, atol=None, **kw):
    y = tri.layer_norm(x, w, b, eps, **kw)
    assert y.dtype == x.dtype and y.shape == x.shape
    assert_close(y, ref.layer_norm(x, w, b, eps, **kw), atol=atol or tolerance(x.dtype, x.shape[-1])[0],
                 name=f"layer_norm{tuple(x.shape)}")


def _check_add(x, r, w, b, eps=EPS, **kw):
    x0, r0 = x.clone(), r.clone()
    out, r_out = poisoned(x.shape, x.dtype), poisoned(x.shape, r.dtype)
    assert tri.layernorm2d_fwd_with_add(out, x, r, r_out, w, b, eps, **kw) is out
    e_out, e_r = torch.empty_like(out), torch.empty_like(r_out)
    ref.layernorm2d_fwd_with_add(e_out, x, r, e_r, w, b, eps, **kw)
    assert_close(r_out, e_r, name="residual_out")
    assert_close(out, e_out, atol=tolerance(x.dtype, x.shape[-1])[0], name=f"out{tuple(x.shape)}")
    assert torch.equal(x, x0) and torch.equal(r, r0), "an input was modified"


@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_layer_norm(dtype, shape):
    m, n = shape
    _check_ln(make_rows(m, n, dtype, scale=3.0), *weights(n, dtype, bias=True))


@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_layernorm2d_fwd_with_add(dtype, shape):
    m, n = shape
    _check_add(make_rows(m, n, dtype), make_rows(m, n, dtype), *weights(n, dtype, bias=True))


@pytest.mark.parametrize("regime", [None, *LOOPED_FWD])
def test_large_mean_keeps_the_variance(regime, monkeypatch):
    # mean 1000, std 1: sum(x^2)/n - mean^2 would cancel to a variance error of
    # about 0.1 in fp32 (outputs off by 5%). What is left is the fp32 rounding of
    # values near 1000 (1.2e-4 relative to a std of 1).
    if regime:
        pin_config(monkeypatch, fwd=LOOPED_FWD[regime])
    x = make_rows(6, 777, torch.float32) + 1000.0
    _check_ln(x, *weights(777, torch.float32, bias=True), atol=1e-3)


@pytest.mark.parametrize("regime", list(LOOPED_FWD))
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_looped_rows_on_small_widths(dtype, regime, monkeypatch):
    pin_config(monkeypatch, fwd=LOOPED_FWD[regime])
    n = 1000
    _check_ln(make_rows(5, n, dtype, scale=2.0), *weights(n, dtype, bias=True))
    _check_ln(make_rows(5, n, dtype), None, None, x_bias=weights(n, dtype) - 1)
    _check_add(make_rows(5, n, dtype), make_rows(5, n, dtype), *weights(n, dtype, bias=True),
               x_bias=weights(n, dtype))


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_strided_rows_and_rank(dtype):
    m, n = by_device((37, 300), (1025, 4099))
    x = make_rows(m, n, dtype, strided=True)
    _check_ln(x, *weights(n, dtype, bias=True))
    _check_add(x, make_rows(m, n, dtype, strided=True), *weights(n, dtype, bias=True))
    _check_ln(make_rows(3, 96, dtype, lead=(2,)), *weights(96, dtype, bias=True))


def test_optional_parameters():
    n = 130
    x = make_rows(9, n, torch.bfloat16)
    w, b = weights(n, torch.float32, bias=True)
    _check_ln(x, None, None)  # bias-free and weight-free
    _check_ln(x, w, None)
    _check_ln(x, None, b)
    _check_ln(x, w - 1, b, weight_offset=1.0)
    _check_ln(x, w, b, x_bias=b)


def test_nan_stays_in_its_row():
    x = make_rows(5, 100, torch.float32)
    x[2, 50] = float("nan")
    w, b = weights(100, torch.float32, bias=True)
    y = tri.layer_norm(x, w, b, EPS)
    assert y[2].isnan().all()
    keep = [0, 1, 3, 4]
    assert_close(y[keep], ref.layer_norm(x[keep], w, b, EPS), name="rows without NaN")


@pytest.mark.parametrize("shape", BWD_SHAPES, ids=str)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_backward(dtype, shape):
    m, n = shape
    check_backward("layer", make_rows(m, n, dtype, scale=2.0), *weights(n, dtype, bias=True), EPS)


@pytest.mark.parametrize("regime", list(BWD_REGIMES))
def test_backward_regimes_on_small_widths(regime, monkeypatch):
    cfg, n = BWD_REGIMES[regime]
    pin_config(monkeypatch, bwd=cfg)
    check_backward("layer", make_rows(29, n, torch.float32), *weights(n, torch.float32, bias=True), EPS)


def test_backward_optional_parameters_and_x_bias():
    n = 257
    x = make_rows(21, n, torch.float32, strided=True)
    w, b = weights(n, torch.float32, bias=True)
    check_backward("layer", x, None, None, EPS)
    check_backward("layer", x, w - 1, b, EPS, weight_offset=1.0)
    # x_bias: its gradient is dx summed over rows.
    xb = (torch.randn(n, device=DEVICE) * 0.1).requires_grad_()
    xt = x.detach().requires_grad_()
    dy = torch.randn(x.shape, device=DEVICE)
    gx, gxb = torch.autograd.grad(tri.layer_norm(xt, w, b, EPS, x_bias=xb), (xt, xb), dy)
    xr, xbr = x.detach().clone().requires_grad_(), xb.detach().clone().requires_grad_()
    ex, exb = torch.autograd.grad(ref.layer_norm(xr, w, b, EPS, x_bias=xbr), (xr, xbr), dy)
    assert_close(gx, ex, atol=1e-4, name="dx")
    assert_close(gxb, exb, atol=1e-3, name="dx_bias")


@pytest.mark.parametrize("regime", ["looped_prefetch", "split"])
def test_backward_after_a_pinned_forward(regime, monkeypatch):
    # The statistics saved for backward come from the forward regime (the split
    # rows' first segment stores them).
    pin_config(monkeypatch, fwd=LOOPED_FWD[regime])
    check_backward("layer", make_rows(5, 1000, torch.float32), *weights(1000, torch.float32, bias=True), EPS)


def test_backward_is_deterministic():
    m, n = by_device((300, 256), (20000, 4096))
    x, (w, b) = make_rows(m, n, torch.bfloat16), weights(n, torch.bfloat16, bias=True)
    dy = torch.randn(m, n, device=DEVICE).to(torch.bfloat16)
    runs = [check_backward("layer", x, w, b, EPS, dy=dy) for _ in range(2)]
    assert all(torch.equal(a, b) for a, b in zip(*runs)), "gradients differ between identical runs"


def test_bad_input():
    x, (w, b) = make_rows(4, 64, torch.float32), weights(64, torch.float32, bias=True)
    with pytest.raises(ValueError, match=r"bias must have shape \(64,\)"):
        tri.layer_norm(x, w, b[:32])
    with pytest.raises(TypeError, match="x_bias must be float32"):
        tri.layer_norm(x, w, b, x_bias=torch.ones(64, dtype=torch.int32, device=DEVICE))
    with pytest.raises(TypeError, match="weight_offset must be a real number"):
        tri.layer_norm(x, w, b, weight_offset=None)
    with pytest.raises(ValueError, match="residual_out must have input's shape"):
        tri.layernorm2d_fwd_with_add(torch.empty_like(x), x, x, torch.empty(4, 32, device=DEVICE), w, b, EPS)


@pytest.mark.parametrize("regime", [None, *LOOPED_FWD])
@pytest.mark.parametrize("bad", [float("nan"), float("inf")], ids=["nan", "inf"])
def test_nonfinite_row_as_reference(bad, regime, monkeypatch):
    """A NaN or an inf in a row makes it NaN (inf - inf), in every regime, as the reference; other rows untouched."""
    if regime:
        pin_config(monkeypatch, fwd=LOOPED_FWD[regime])
    n = 300
    x = make_rows(3, n, torch.float32)
    w, b = weights(n, torch.float32, bias=True)
    x[1, 7] = bad
    y = tri.layer_norm(x, w, b, EPS)
    assert y[1].isnan().all()
    assert_close(y[[0, 2]], ref.layer_norm(x[[0, 2]], w, b, EPS), name="rows without the NaN")


def test_eps_is_a_finite_real_at_least_zero():
    """layer_norm's ``eps``, layernorm2d_fwd_with_add's ``epsilon``: finite and >= 0 (0 allowed)."""
    x, r = make_rows(2, 16, torch.float32), make_rows(2, 16, torch.float32)
    w, b = weights(16, torch.float32, bias=True)

    def add(eps):
        return tri.layernorm2d_fwd_with_add(torch.empty_like(x), x, r, torch.empty_like(x), w, b, eps)

    for eps in (-1e-5, float("-inf"), float("inf"), float("nan")):
        with pytest.raises(ValueError, match=r"^layer_norm: eps must be"):
            tri.layer_norm(x, w, b, eps)
        with pytest.raises(ValueError, match=r"^layernorm2d_fwd_with_add: epsilon must be"):
            add(eps)
    with pytest.raises(TypeError, match=r"^layer_norm: eps must be a real number"):
        tri.layer_norm(x, w, b, "1e-5")
    _check_ln(x, w, b, eps=0.0)
    add(0.0)


def test_meta_tensors_refused():
    """Each tensor argument on a device Triton cannot launch on: a ValueError naming the op and the argument."""
    x, r = make_rows(2, 16, torch.float32), make_rows(2, 16, torch.float32)
    w, b = weights(16, torch.float32, bias=True)
    assert_each_tensor_refused_on_meta(tri.layer_norm, x, w, b, EPS, w)
    assert_each_tensor_refused_on_meta(tri.layernorm2d_fwd_with_add, torch.empty_like(x), x, r, torch.empty_like(r),
                                       w, b, EPS, w)
