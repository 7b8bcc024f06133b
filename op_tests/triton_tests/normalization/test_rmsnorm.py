"""aiter_lite.ops.triton.normalization.rmsnorm against the fp32 native reference."""

import pytest
import torch

from aiter_lite.ops.native.normalization import rmsnorm as ref
from aiter_lite.ops.triton.normalization import rmsnorm as tri
from op_tests.triton_tests.test_activation import assert_each_tensor_refused_on_meta
from op_tests.utils import DEVICE, DTYPES, ON_GPU, assert_close, by_device, make_rows, poisoned, tolerance
from op_tests.utils.norm import (
    BWD_SHAPES,
    BWD_REGIMES,
    LOOPED_FWD,
    SHAPES,
    check_backward,
    pin_config,
    weights,
)

EPS = 1e-6


def _check_rms(x, w, eps=EPS, **kw):
    y = tri.rms_norm(x, w, eps, **kw)
    assert y.dtype == x.dtype and y.shape == x.shape
    assert_close(y, ref.rms_norm(x, w, eps, **kw), atol=tolerance(x.dtype, x.shape[-1])[0],
                 name=f"rms_norm{tuple(x.shape)}")
    return y


def _check_add(x, r, w, eps=EPS, out_dtype=None, **kw):
    """rmsnorm2d_fwd_with_add into poisoned outputs; inputs left alone."""
    x0, r0 = x.clone(), r.clone()
    out, r_out = poisoned(x.shape, out_dtype or x.dtype), poisoned(x.shape, r.dtype)
    assert tri.rmsnorm2d_fwd_with_add(out, x, r, r_out, w, eps, **kw) is out
    e_out, e_r = torch.empty_like(out), torch.empty_like(r_out)
    ref.rmsnorm2d_fwd_with_add(e_out, x, r, e_r, w, eps, **kw)
    atol = tolerance(out.dtype, x.shape[-1])[0]
    assert_close(r_out, e_r, name="residual_out")
    # out is normalized from the fp32 sum; the reference from the same sum.
    assert_close(out, e_out, atol=atol, name=f"out{tuple(x.shape)}")
    assert torch.equal(x, x0) and torch.equal(r, r0), "an input was modified"


@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_rms_norm(dtype, shape):
    m, n = shape
    _check_rms(make_rows(m, n, dtype, scale=3.0), weights(n, dtype))


@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_rmsnorm2d_fwd_with_add(dtype, shape):
    m, n = shape
    _check_add(make_rows(m, n, dtype), make_rows(m, n, dtype), weights(n, dtype))


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_fused_add_rms_norm_in_place(dtype):
    m, n = by_device((9, 1000), (1000, 5120))
    x, r, w = make_rows(m, n, dtype), make_rows(m, n, dtype), weights(n, dtype)
    e_out, e_r = torch.empty_like(x), torch.empty_like(r)
    ref.rmsnorm2d_fwd_with_add(e_out, x, r, e_r, w, EPS)
    x_ptr, r_ptr = x.data_ptr(), r.data_ptr()
    assert tri.fused_add_rms_norm(x, r, w, EPS) is None
    assert x.data_ptr() == x_ptr and r.data_ptr() == r_ptr
    assert_close(r, e_r, name="residual (the sum)")
    assert_close(x, e_out, atol=tolerance(dtype, n)[0], name="input (the normalized output)")


@pytest.mark.parametrize("alias", ["out_is_input", "residual_out_is_residual_in", "residual_out_is_input",
                                   "looped_in_place"])
def test_rmsnorm2d_fwd_with_add_aliasing(alias, monkeypatch):
    m, n, dtype = 13, 300, torch.bfloat16
    x, r, w = make_rows(m, n, dtype), make_rows(m, n, dtype), weights(n, dtype)
    e_out, e_r = torch.empty_like(x), torch.empty_like(r)
    ref.rmsnorm2d_fwd_with_add(e_out, x, r, e_r, w, EPS)
    if alias == "out_is_input":
        out, r_out = x, torch.empty_like(r)
    elif alias == "residual_out_is_residual_in":
        out, r_out = torch.empty_like(x), r
    elif alias == "residual_out_is_input":
        out, r_out = torch.empty_like(x), x
    else:  # the vLLM in-place form through the two-pass looped path
        pin_config(monkeypatch, fwd=LOOPED_FWD["looped_prefetch"])
        out, r_out = x, r
    tri.rmsnorm2d_fwd_with_add(out, x, r, r_out, w, EPS)
    assert_close(r_out, e_r, name="residual_out")
    assert_close(out, e_out, atol=tolerance(dtype, n)[0], name="out")


def test_rmsnorm2d_fwd_with_add_undeclared_alias_refused():
    """out over residual_in is not an alias the op declares (out=input; residual_out=residual_in or input)."""
    x, r, w = make_rows(3, 40, torch.float32), make_rows(3, 40, torch.float32), weights(40, torch.float32)
    with pytest.raises(ValueError, match=r"^rmsnorm2d_fwd_with_add: out overlaps residual_in"):
        tri.rmsnorm2d_fwd_with_add(r, x, r, torch.empty_like(r), w, EPS)


@pytest.mark.parametrize("regime", list(LOOPED_FWD))
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_looped_rows_on_small_widths(dtype, regime, monkeypatch):
    # The two-pass regime, forced onto small rows so the interpreter covers it cheaply.
    pin_config(monkeypatch, fwd=LOOPED_FWD[regime])
    _check_rms(make_rows(5, 1000, dtype, scale=2.0), weights(1000, dtype))
    _check_add(make_rows(5, 129, dtype), make_rows(5, 129, dtype), weights(129, dtype))


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_strided_rows(dtype):
    m, n = by_device((37, 300), (1025, 4099))
    x, r = make_rows(m, n, dtype, strided=True), make_rows(m, n, dtype, strided=True)
    assert not x.is_contiguous()
    _check_rms(x, weights(n, dtype))
    _check_add(x, r, weights(n, dtype))


@pytest.mark.parametrize("lead", [(), (2,), (2, 3)], ids=str)
def test_any_rank(lead):
    x = make_rows(5, 96, torch.bfloat16, lead=lead)
    _check_rms(x, weights(96, torch.bfloat16))
    _check_rms(x[..., 0, :], weights(96, torch.bfloat16))  # rank 1 when lead == ()


def test_gemma_offset_fp32_weight_no_weight():
    n = 200
    x = make_rows(11, n, torch.bfloat16)
    _check_rms(x, weights(n, torch.float32) - 1, weight_offset=1.0)  # Gemma: x_hat * (1 + w)
    _check_rms(x, weights(n, torch.float32))  # fp32 weight on bf16 input
    _check_rms(x, None)
    _check_add(x, make_rows(11, n, torch.float32), weights(n, torch.bfloat16), out_dtype=torch.float32,
               weight_offset=1.0)


def test_epsilon_is_a_runtime_value():
    x, w = make_rows(4, 64, torch.float32, scale=1e-3), weights(64, torch.float32)
    for eps in (1e-6, 1e-2, 0, 1):  # ints too: no constexpr specialisation of eps
        _check_rms(x, w, eps)


def test_nan_and_inf_stay_in_their_row():
    x = make_rows(6, 257, torch.float32)
    x[1, 7] = float("nan")
    x[4, 0] = float("inf")
    w = weights(257, torch.float32)
    y = tri.rms_norm(x, w, EPS)
    assert y[1].isnan().all() and y[4].isnan().any()
    clean = [0, 2, 3, 5]
    assert_close(y[clean], ref.rms_norm(x[clean], w, EPS), name="rows without NaN/inf")


@pytest.mark.parametrize("shape", BWD_SHAPES, ids=str)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_backward(dtype, shape):
    m, n = shape
    check_backward("rms", make_rows(m, n, dtype, scale=2.0), weights(n, dtype), None, EPS)


@pytest.mark.parametrize("regime", list(BWD_REGIMES))
def test_backward_regimes_on_small_widths(regime, monkeypatch):
    cfg, n = BWD_REGIMES[regime]
    pin_config(monkeypatch, bwd=cfg)
    check_backward("rms", make_rows(29, n, torch.float32), weights(n, torch.float32), None, EPS)


def test_backward_strided_gemma_fp32_weight():
    x = make_rows(40, 333, torch.bfloat16, strided=True)
    check_backward("rms", x, weights(333, torch.float32) - 1, None, EPS, weight_offset=1.0)
    check_backward("rms", x, None, None, EPS)


def test_backward_expanded_grad_and_rank3():
    x = make_rows(6, 64, torch.float32, lead=(2,)).requires_grad_()
    w = weights(64, torch.float32).requires_grad_()
    tri.rms_norm(x, w, EPS).sum().backward()  # dy is an expanded (stride 0) tensor
    xr, wr = x.detach().clone().requires_grad_(), w.detach().clone().requires_grad_()
    ref.rms_norm(xr, wr, EPS).sum().backward()
    assert_close(x.grad, xr.grad, atol=1e-4, name="dx")
    assert_close(w.grad, wr.grad, atol=1e-4, name="dw")


def test_backward_is_deterministic():
    m, n = by_device((300, 256), (20000, 4096))
    x, w = make_rows(m, n, torch.bfloat16), weights(n, torch.bfloat16)
    dy = torch.randn(m, n, device=DEVICE).to(torch.bfloat16)
    runs = [check_backward("rms", x, w, None, EPS, dy=dy) for _ in range(2)]
    assert all(torch.equal(a, b) for a, b in zip(*runs)), "dx/dweight differ between identical runs"


def test_no_grad_inference_saves_nothing():
    x, w = make_rows(3, 64, torch.float32).requires_grad_(), weights(64, torch.float32)
    with torch.no_grad():
        y = tri.rms_norm(x, w, EPS)
    assert y.grad_fn is None


# --- bad input: clear TypeError / ValueError naming the argument ------------------------------


def _bad_calls():
    x, w = make_rows(4, 64, torch.float32), weights(64, torch.float32)
    r = make_rows(4, 64, torch.float32)
    x3 = make_rows(2, 64, torch.float32, lead=(2,))  # its transpose has no single row stride
    return [
        (TypeError, "input must be a torch.Tensor", lambda: tri.rms_norm(x.tolist(), w, EPS)),
        (TypeError, "input must be float32", lambda: tri.rms_norm(x.to(torch.int32), w, EPS)),
        (ValueError, "at least 1 dim", lambda: tri.rms_norm(x[0, 0], w, EPS)),
        (ValueError, r"weight must have shape \(64,\)", lambda: tri.rms_norm(x, weights(63, torch.float32), EPS)),
        (TypeError, "weight must be float32", lambda: tri.rms_norm(x, w.to(torch.int64), EPS)),
        (ValueError, "weight must be contiguous", lambda: tri.rms_norm(x, weights(128, torch.float32)[::2], EPS)),
        (TypeError, "epsilon must be a real number", lambda: tri.rms_norm(x, w, "1e-6")),
        (TypeError, "epsilon must be a real number", lambda: tri.rms_norm(x, w, torch.tensor(1e-6))),
        (ValueError, "epsilon must be finite", lambda: tri.rms_norm(x, w, float("nan"))),
        (ValueError, "unit stride in its last dim", lambda: tri.rms_norm(x.t(), weights(4, torch.float32), EPS)),
        (ValueError, "residual_in must have input's shape",
         lambda: tri.rmsnorm2d_fwd_with_add(torch.empty_like(x), x, r[:3], torch.empty_like(x), w, EPS)),
        (ValueError, "out must have input's shape",
         lambda: tri.rmsnorm2d_fwd_with_add(torch.empty(4, 65, device=DEVICE), x, r, torch.empty_like(x), w, EPS)),
        (TypeError, "residual must be float32", lambda: tri.fused_add_rms_norm(x, r.to(torch.int32), w, EPS)),
        (ValueError, "residual_out .* cannot be viewed as rows",
         lambda: tri.rmsnorm2d_fwd_with_add(torch.empty_like(x3), x3, x3, torch.empty_like(x3).transpose(0, 1), None,
                                            EPS)),
    ]


@pytest.mark.parametrize("case", range(14))
def test_bad_input(case):
    err, match, call = _bad_calls()[case]
    with pytest.raises(err, match=match):
        call()


@pytest.mark.skipif(not ON_GPU, reason="needs a GPU tensor next to a CPU one")
def test_bad_device():
    x, w = make_rows(4, 64, torch.float32), weights(64, torch.float32)
    with pytest.raises(ValueError, match="weight must be on input's device"):
        tri.rms_norm(x, w.cpu(), EPS)
    with pytest.raises(ValueError, match="the Triton backend needs a GPU tensor"):
        tri.rms_norm(x.cpu(), w.cpu(), EPS)


def test_epsilon_is_a_finite_real_at_least_zero():
    """Every RMSNorm name: ``epsilon`` finite and >= 0 (0 allowed), else a ValueError naming it."""
    x, r, w = make_rows(2, 16, torch.float32), make_rows(2, 16, torch.float32), weights(16, torch.float32)
    calls = {
        "rms_norm": lambda eps: tri.rms_norm(x, w, eps),
        "rmsnorm2d_fwd_with_add":
            lambda eps: tri.rmsnorm2d_fwd_with_add(torch.empty_like(x), x, r, torch.empty_like(r), w, eps),
        "fused_add_rms_norm": lambda eps: tri.fused_add_rms_norm(x.clone(), r.clone(), w, eps),
    }
    for name, call in calls.items():
        for eps in (-1e-6, float("-inf"), float("inf"), float("nan")):
            with pytest.raises(ValueError, match=rf"^{name}: epsilon must be"):
                call(eps)
        call(0.0)
    _check_rms(x, w, eps=0.0)


@pytest.mark.parametrize("bad", [float("nan"), float("inf")], ids=["nan", "inf"])
def test_nonfinite_row_as_reference(bad):
    """A NaN or inf in a row: that row as the reference's (NaN where x / rms is inf / inf), the others untouched."""
    x, w = make_rows(3, 40, torch.float32), weights(40, torch.float32)
    x[1, 3] = bad
    y = tri.rms_norm(x, w, EPS)
    y_ref = ref.rms_norm(x, w, EPS)
    assert torch.equal(y[1].isnan(), y_ref[1].isnan()) and y[1].isnan().any()
    assert_close(y[[0, 2]], y_ref[[0, 2]], name="rows without the NaN")


def test_meta_tensors_refused():
    """Each tensor argument on a device Triton cannot launch on: a ValueError naming the op and the argument."""
    x, r, w = make_rows(2, 16, torch.float32), make_rows(2, 16, torch.float32), weights(16, torch.float32)
    assert_each_tensor_refused_on_meta(tri.rms_norm, x, w, EPS)
    assert_each_tensor_refused_on_meta(tri.rmsnorm2d_fwd_with_add, torch.empty_like(x), x, r, torch.empty_like(r), w,
                                       EPS)
    assert_each_tensor_refused_on_meta(tri.fused_add_rms_norm, x, r, w, EPS)
