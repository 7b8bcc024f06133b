"""fused_add_rmsnorm_pad (aiter_lite.ops.triton.normalization.fused_add_rmsnorm_pad) and its two
registered forms against the fp32 native reference. Every tensor the ops allocate starts as
NaN, so an unwritten element, a pad column included, fails."""

import importlib

import pytest
import torch

import aiter_lite.ops.triton.normalization.fused_add_rmsnorm_pad as pad_mod
from aiter_lite.ops.native.normalization import fused_add_rmsnorm_pad as ref
from aiter_lite.ops.triton.normalization import rmsnorm as tri_rms
from aiter_lite.ops.triton.normalization.fused_add_rmsnorm_pad import (
    add_rmsnorm_pad,
    fused_add_rmsnorm_pad,
    rmsnorm_pad,
)
from op_tests.utils import DEVICE, DTYPES, assert_close, by_device, make_rows, tolerance
from op_tests.utils.inputs import poison_allocations
from op_tests.utils.norm import LOOPED_FWD, pin_config, weights

EPS = 1e-6
OP = "fused_add_rmsnorm_pad"


@pytest.fixture(autouse=True)
def _poisoned_empty(monkeypatch):
    poison_allocations(monkeypatch)


def _same_bits(a, b):
    """Bit for bit (NaN payloads and -0 included), whatever the strides."""
    bits = [t.detach().cpu().flatten().clone().view(torch.int16 if t.element_size() == 2 else torch.int32)
            for t in (a, b)]
    return torch.equal(*bits)


def _check(x, w, res, p, eps=EPS):
    """The op against the reference: out padded (zeros past N), res_out x + res; inputs untouched."""
    x0, r0 = x.clone(), None if res is None else res.clone()
    got = fused_add_rmsnorm_pad(x, w, eps, res, p)
    want = ref.fused_add_rmsnorm_pad(x, w, eps, res, p)
    out, res_out = (got, None) if res is None else got
    e_out, e_res = (want, None) if res is None else want
    n = x.shape[-1]
    n_out = n if p == 0 else -(-n // p) * p
    assert out.shape == (*x.shape[:-1], n_out) and out.dtype == x.dtype
    assert_close(out, e_out, atol=tolerance(x.dtype, n)[0], name=f"out {tuple(x.shape)} pad {p}")
    assert not out[..., n:].any() and not out[..., n:].isnan().any(), "a pad column is not 0"
    if res is not None:
        assert res_out.shape == res.shape and res_out.dtype == res.dtype
        assert_close(res_out, e_res, name="res_out")
        assert _same_bits(res, r0), "res was modified"
    assert _same_bits(x, x0), "x was modified"
    return got


# (M, N, pad multiple): no pad, a pad of one column and of most of a multiple, gpt-oss's 2880
# to 128 / 256, a multiple that divides N (no pad columns), M = 0 / 1, odd widths.
SHAPES = by_device(
    [(0, 64, 128), (1, 1, 7), (7, 127, 128), (3, 2880, 256), (5, 768, 768), (33, 769, 0), (2, 100, 1)],
    [(m, n, p) for m in (0, 1, 7, 1000, 32768) for n, p in ((2880, 128), (2880, 256), (1, 7), (769, 0), (4096, 256),
                                                           (5120, 1000), (16385, 128))]
    + [(4, 65537, 256), (2, 262145, 256), (300, 12289, 64)],
)


@pytest.mark.parametrize("res", [False, True])
@pytest.mark.parametrize("m,n,p", SHAPES, ids=str)
def test_against_reference(m, n, p, res):
    dtype = DTYPES[(m + n + res) % 3]
    x = make_rows(m, n, dtype, scale=3.0)
    _check(x, weights(n, dtype), make_rows(m, n, dtype) if res else None, p)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_dtypes_strided_and_ranks(dtype):
    """Strided rows, 3-D inputs (rows of one stride and not), a weight of another dtype."""
    x, r = make_rows(5, 300, dtype, strided=True), make_rows(5, 300, dtype, strided=True)
    _check(x, weights(300, torch.float32), r, 128)
    x3 = make_rows(3, 300, dtype, lead=(2,))
    _check(x3, weights(300, dtype), make_rows(3, 300, dtype, lead=(2,)), 256)
    _check(x3.transpose(0, 1), weights(300, dtype), None, 64)  # leading dims not of one stride: gathered


@pytest.mark.parametrize("regime", sorted(LOOPED_FWD))
def test_regimes(regime, monkeypatch):
    """The looped (runtime and compile-time widths) and split-row kernels pad too: rows of 300
    to 384 (two 64-wide chunks of zeros with the looped 64-wide config)."""
    pin_config(monkeypatch, fwd=LOOPED_FWD[regime])
    for res in (False, True):
        _check(make_rows(3, 300, torch.float32), weights(300, torch.float32),
               make_rows(3, 300, torch.float32) if res else None, 128)


def test_same_kernel_unpadded():
    """Without padding (p = 0, 1, or a multiple that divides N) it is the RMSNorm kernel: rms_norm's
    bits; padded, the first N columns are rms_norm's bits too."""
    x, r, w = make_rows(7, 256, torch.bfloat16), make_rows(7, 256, torch.bfloat16), weights(256, torch.bfloat16)
    want = tri_rms.rms_norm(x, w, EPS)
    s = torch.empty_like(x)
    want_add = tri_rms.rmsnorm2d_fwd_with_add(torch.empty_like(x), x, r, s, w, EPS)
    for p in (0, 1, 128, 256):
        assert torch.equal(fused_add_rmsnorm_pad(x, w, EPS, None, p), want)
        out, res_out = fused_add_rmsnorm_pad(x, w, EPS, r, p)
        assert torch.equal(out, want_add) and torch.equal(res_out, s)
    assert torch.equal(fused_add_rmsnorm_pad(x, w, EPS, None, 100)[:, :256], want)
    assert torch.equal(fused_add_rmsnorm_pad(x, w, EPS, r, 300)[0][:, :256], want_add)


def test_nan_row_keeps_zero_pad():
    """A NaN in a row makes that row's N columns NaN (as the reference); its pad columns stay 0
    and every other row is unaffected."""
    x, w = make_rows(4, 100, torch.float32), weights(100, torch.float32)
    x[2, 17] = float("nan")
    out = _check(x, w, None, 64)
    assert out[2, :100].isnan().all() and not out[2, 100:].any()
    assert not out[[0, 1, 3]].isnan().any()


def test_aiter_calls():
    """As vLLM / SGLang call it: positional, out alone without res, (out, res_out) with it; the
    registered forms give the same bits."""
    x, r, w = make_rows(5, 2880, torch.bfloat16), make_rows(5, 2880, torch.bfloat16), weights(2880, torch.bfloat16)
    out = fused_add_rmsnorm_pad(x, w, 1e-5)
    assert isinstance(out, torch.Tensor) and out.shape == (5, 2880)
    out, res_out = fused_add_rmsnorm_pad(x, w, 1e-5, r, x_pad_to_multiple=256)
    assert out.shape == (5, 3072) and res_out.shape == (5, 2880)
    got = torch.ops.aiter_lite.add_rmsnorm_pad(x, w, 1e-5, r, 256)
    assert torch.equal(got[0], out) and torch.equal(got[1], res_out)
    assert torch.equal(torch.ops.aiter_lite.rmsnorm_pad(x, w, 1e-5, 256), rmsnorm_pad(x, w, 1e-5, 256))
    assert torch.equal(add_rmsnorm_pad(x, w, 1e-5, r, 256)[0], out)
    # vLLM's import path (aiter's older flat module)
    assert importlib.import_module("aiter_lite.ops.triton.fused_add_rmsnorm_pad").fused_add_rmsnorm_pad \
        is fused_add_rmsnorm_pad


@pytest.mark.parametrize("res", [False, True])
def test_gradient(res):
    """aiter's has no gradient; this one's (through the RMSNorm autograd path, then the pad)
    matches autograd through the fp32 reference, in x, res and weight."""
    x = make_rows(6, 200, torch.float32).requires_grad_()
    w = weights(200, torch.float32).requires_grad_()
    r = make_rows(6, 200, torch.float32).requires_grad_() if res else None
    leaves = [t for t in (x, w, r) if t is not None]
    outs = fused_add_rmsnorm_pad(x, w, EPS, r, 128)
    refs = ref.fused_add_rmsnorm_pad(x, w, EPS, r, 128)
    outs, refs = (outs, refs) if res else ((outs,), (refs,))
    grads = [torch.randn_like(o) for o in outs]
    got = torch.autograd.grad(outs, leaves, grads)
    want = torch.autograd.grad(refs, leaves, grads)
    for name, g, e in zip(("dx", "dweight", "dres"), got, want):
        assert_close(g, e, atol=1e-4, rtol=1e-4, name=name)


def _bad_calls():
    t = lambda *s, dtype=torch.float32: torch.randn(*s, device=DEVICE, dtype=dtype)  # noqa: E731
    x, w = t(4, 64), t(64)
    return [
        (TypeError, "weight", dict(weight=None)),
        (ValueError, "weight", dict(weight=t(63))),
        (TypeError, "x", dict(x=x.to(torch.int32))),
        (ValueError, "x", dict(x=t(4, 128)[:, ::2])),                  # not unit stride in the last dim
        (ValueError, "res", dict(res=t(3, 64))),
        (TypeError, "res", dict(res=t(4, 64, dtype=torch.bfloat16))),
        (ValueError, "epsilon", dict(epsilon=-1.0)),
        (ValueError, "epsilon", dict(epsilon=float("nan"))),
        (ValueError, "x_pad_to_multiple", dict(x_pad_to_multiple=-1)),  # aiter: no padding
        (ValueError, "x_pad_to_multiple", dict(x_pad_to_multiple=pad_mod.MAX_PAD_MULTIPLE + 1)),
        (TypeError, "x_pad_to_multiple", dict(x_pad_to_multiple=True)),
        (TypeError, "x_pad_to_multiple", dict(x_pad_to_multiple=128.0)),
    ], dict(x=x, weight=w, epsilon=EPS, res=t(4, 64), x_pad_to_multiple=128)


@pytest.mark.parametrize("case", range(len(_bad_calls()[0])))
def test_bad_arguments(case):
    cases, base = _bad_calls()
    exc, name, change = cases[case]
    args = {**base, **change}
    with pytest.raises(exc, match=rf"{OP}: {name}\b"):
        fused_add_rmsnorm_pad(**args)
    form = rmsnorm_pad if name != "res" else add_rmsnorm_pad
    kwargs = {k: v for k, v in args.items() if form is add_rmsnorm_pad or k != "res"}
    with pytest.raises(exc, match=rf"{form.__name__}: {name}\b"):
        form(**kwargs)
