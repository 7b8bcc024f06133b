"""RMSNorm's casting modes: "llama" against Hugging Face's ``LlamaRMSNorm`` formula (written
out below), "gemma" (the default) unchanged; gradients against fp32 autograd of the same
formula with its roundings passed straight through; the layer on both backends; the
registered ops; bad values.

Bit for bit: the references take the row statistic (rstd) from the kernel's launcher, so
what is compared is what the modes change, the roundings, whose operations are the same on
both sides; against Hugging Face's own rstd (a sum in another order, another rsqrt) a
value may move by a rounding step, so that comparison allows 2 units in the last place.
Triton's interpreter converts fp32 to bf16 by truncation, not to nearest (fp16 it rounds
to nearest): on the CPU the bf16 reference converts the same way (``_to``); on a GPU every
conversion rounds to nearest, as torch's, and the reference is Hugging Face's as written.
"""

import pytest
import torch
from torch.library import opcheck

import aiter_lite.ops.triton.normalization.norm as norm_mod
from aiter_lite.layers import GemmaRMSNorm, RMSNorm
from aiter_lite.ops.native.normalization import rmsnorm as ref_rms
from aiter_lite.ops.triton.normalization import rmsnorm as rms
from op_tests.utils import DEVICE, ON_GPU, assert_close, make_rows, tolerance
from op_tests.utils.norm import BWD_REGIMES, LOOPED_FWD, pin_config

EPS = 1e-6
TRUNCATES_BF16 = not ON_GPU  # the interpreter's fp32 -> bf16 conversion
BACKEND = "inductor" if ON_GPU else "aot_eager"


def _to(t: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """``t.to(dtype)`` as the device running the kernels converts (module doc)."""
    if TRUNCATES_BF16 and dtype == torch.bfloat16 and t.dtype == torch.float32:
        return (t.view(torch.int32) & -65536).view(torch.float32).to(dtype)
    return t.to(dtype)


def llama_rms_norm(hidden_states, weight, eps, to=_to, rstd=None):
    """Hugging Face's ``LlamaRMSNorm.forward``, line for line; ``weight * h`` of two bf16
    (fp16) tensors is their fp32 product (exact) rounded once, written so with ``to``.
    ``rstd``: the kernel's per-row statistic in place of HF's own."""
    input_dtype = hidden_states.dtype
    hidden_states = hidden_states.to(torch.float32)
    variance = hidden_states.pow(2).mean(-1, keepdim=True)
    hidden_states = hidden_states * (torch.rsqrt(variance + eps) if rstd is None else rstd[:, None])
    h = to(hidden_states, input_dtype)
    return h if weight is None else to(weight.float() * h.float(), input_dtype)


def llama_add_rms_norm(x, residual, weight, eps, rstd=None):
    """Hugging Face's decoder step: the residual added in the model's dtype, then normalized."""
    s = _to(x.float() + residual.float(), residual.dtype)
    return llama_rms_norm(s, weight, eps, rstd=rstd), s


def gemma_rms_norm(x, weight, eps, rstd=None):
    """Hugging Face's ``GemmaRMSNorm.forward``: fp32 throughout, one rounding."""
    h = x.float()
    out = h * (torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps) if rstd is None else rstd[:, None])
    return _to(out * (1.0 + weight.float()), x.dtype)


def kernel_rstd(x, weight, offset=0.0, residual=None, casting_mode="llama"):
    """The rstd the forward kernel computes for this call (its launcher, its launch config)."""
    y, rstd = torch.empty_like(x), torch.empty(x.shape[0], device=DEVICE)
    r_out = None if residual is None else torch.empty_like(residual)
    norm_mod._launch_norm_fwd(x, y, weight, None, EPS, True, residual, r_out, None, offset, None, rstd,
                              casting_mode=casting_mode)
    return rstd


def _ste(t, dtype):
    """``t`` rounded to ``dtype`` (kept fp32), the rounding's gradient the identity."""
    return t + (_to(t, dtype).float() - t).detach()


def _weight(n, dtype, offset=0.0):
    return (torch.randn(n, device=DEVICE) * 0.3 + 1.0 - offset).to(dtype)


def _rows(m, n, dtype, strided=False):
    return make_rows(m, n, dtype, strided=strided, scale=3.0)


def _same_bits(got, want, name):
    assert got.dtype == want.dtype and got.shape == want.shape, f"{name}: {got.dtype} {got.shape} != {want.dtype}"
    if torch.equal(got.contiguous().view(-1).view(torch.uint8), want.contiguous().view(-1).view(torch.uint8)):
        return
    bad = (got != want) & ~(got.isnan() & want.isnan())
    i = bad.nonzero()[:4].tolist()
    raise AssertionError(f"{name}: {int(bad.sum())} of {got.numel()} elements differ; first at {i}: "
                         f"got {[got[tuple(j)].item() for j in i]}, want {[want[tuple(j)].item() for j in i]}")


def _within_ulps(got, want, ulps, name):
    """Within ``ulps`` units in the last place of ``got``'s dtype."""
    assert_close(got, want, atol=0, rtol=ulps * torch.finfo(got.dtype).eps, name=name)


# ---------------------------------------------------------------------------
# forward


def test_reference_is_hugging_faces():
    # With torch's conversions the reference is HF's expression itself: weight * h.to(input_dtype).
    x, w = make_rows(5, 96, torch.bfloat16), _weight(96, torch.bfloat16)
    h = x.float() * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + EPS)
    _same_bits(llama_rms_norm(x, w, EPS, to=torch.Tensor.to), w * h.to(torch.bfloat16), "reference")


@pytest.mark.parametrize("weight", ["same", "fp32", "none", "offset"])
@pytest.mark.parametrize("shape", [(1, 1), (7, 300), (3, 769)], ids=str)
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32], ids=str)
def test_llama_forward(dtype, shape, weight):
    m, n = shape
    x = _rows(m, n, dtype, strided=True)
    offset = 1.0 if weight == "offset" else 0.0
    w = None if weight == "none" else _weight(n, torch.float32 if weight == "fp32" else dtype, offset)
    scale = None if w is None else w.float() + offset
    got = rms.rms_norm(x, w, EPS, offset, casting_mode="llama")
    name = f"llama {dtype} {shape} weight {weight}"
    _same_bits(got, llama_rms_norm(x, scale, EPS, rstd=kernel_rstd(x, w, offset)), name)
    _within_ulps(got, llama_rms_norm(x, scale, EPS), 2, f"{name}, HF's rstd")
    # the native reference is HF's, conversions and statistics
    _same_bits(ref_rms.rms_norm(x, w, EPS, offset, casting_mode="llama"),
               llama_rms_norm(x, scale, EPS, to=torch.Tensor.to), f"{name} native")
    if dtype == torch.float32:  # nothing to round: the two modes agree
        _same_bits(got, rms.rms_norm(x, w, EPS, offset, casting_mode="gemma"), "fp32 llama vs gemma")


@pytest.mark.parametrize("residual", [False, True], ids=["plain", "residual"])
@pytest.mark.parametrize("regime", list(LOOPED_FWD))
def test_llama_forward_regimes(monkeypatch, regime, residual):
    # Every forward regime rounds at the same places: looped (runtime, prefetched,
    # compiled-in widths) and rows split over programs.
    pin_config(monkeypatch, fwd=LOOPED_FWD[regime])
    m, n = 3, 1000 if regime != "split_narrow" else 129
    x, w = _rows(m, n, torch.bfloat16), _weight(n, torch.bfloat16)
    if not residual:
        _same_bits(rms.rms_norm(x, w, EPS, casting_mode="llama"),
                   llama_rms_norm(x, w, EPS, rstd=kernel_rstd(x, w)), regime)
        return
    r = _rows(m, n, torch.bfloat16)
    out, r_out = torch.empty_like(x), torch.empty_like(x)
    rms.rmsnorm2d_fwd_with_add(out, x, r, r_out, w, EPS, casting_mode="llama")
    want, s = llama_add_rms_norm(x, r, w, EPS, rstd=kernel_rstd(x, w, residual=r))
    _same_bits(r_out, s, f"{regime} residual_out")
    _same_bits(out, want, f"{regime} out")


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=str)
def test_llama_fused_add_forms(dtype):
    m, n = 9, 200
    x, r, w = _rows(m, n, dtype), _rows(m, n, dtype), _weight(n, dtype)
    want, s = llama_add_rms_norm(x, r, w, EPS, rstd=kernel_rstd(x, w, residual=r))
    out, r_out = torch.empty_like(x), torch.empty_like(x)
    rms.rmsnorm2d_fwd_with_add(out, x, r, r_out, w, EPS, casting_mode="llama")
    _same_bits(r_out, s, "rmsnorm2d_fwd_with_add residual_out")
    _same_bits(out, want, "rmsnorm2d_fwd_with_add out")
    xi, ri = x.clone(), r.clone()
    rms.fused_add_rms_norm(xi, ri, w, EPS, casting_mode="llama")
    _same_bits(ri, s, "fused_add_rms_norm residual")
    _same_bits(xi, want, "fused_add_rms_norm input")
    _within_ulps(xi, llama_add_rms_norm(x, r, w, EPS)[0], 2, "fused_add_rms_norm, HF's rstd")
    xn, rn = x.clone(), r.clone()
    ref_rms.fused_add_rms_norm(xn, rn, w, EPS, casting_mode="llama")
    _same_bits(rn, r + x, "native residual")
    _same_bits(xn, llama_rms_norm(r + x, w, EPS, to=torch.Tensor.to), "native input")


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32], ids=str)
def test_gemma_unchanged(dtype):
    m, n = 7, 300
    x, w = _rows(m, n, dtype), _weight(n, dtype, offset=1.0)
    got = rms.rms_norm(x, w, EPS, 1.0, casting_mode="gemma")
    _same_bits(got, rms.rms_norm(x, w, EPS, 1.0), "gemma vs the default")
    # GemmaRMSNorm's formula: fp32 throughout, one rounding
    _same_bits(got, gemma_rms_norm(x, w, EPS, rstd=kernel_rstd(x, w, 1.0, casting_mode="gemma")), "gemma")
    _within_ulps(got, gemma_rms_norm(x, w, EPS), 1 if dtype != torch.float32 else 4, "gemma, HF's rstd")
    r = _rows(m, n, dtype)
    outs = [torch.empty_like(x) for _ in range(4)]
    rms.rmsnorm2d_fwd_with_add(outs[0], x, r, outs[1], w, EPS, 1.0, casting_mode="gemma")
    rms.rmsnorm2d_fwd_with_add(outs[2], x, r, outs[3], w, EPS, 1.0)
    _same_bits(outs[0], outs[2], "fused add: gemma vs the default")
    _same_bits(outs[1], outs[3], "fused add residual_out: gemma vs the default")


# ---------------------------------------------------------------------------
# gradients


def _llama_ref_grads(x, w, dy, *, r=None, ds=None):
    """Gradients of HF's formula in fp32 autograd, each rounding straight through: to x
    (and the residual), the weight."""
    dtype = x.dtype
    leaves = [t.detach().float().requires_grad_() for t in (x, w) + (() if r is None else (r,))]
    xs, ws = leaves[0], leaves[1]
    s = xs if r is None else _ste(xs + leaves[2], dtype)
    h = s * torch.rsqrt(s.pow(2).mean(-1, keepdim=True) + EPS)
    y = ws * _ste(h, dtype)
    outs, grads = [y], [dy.float()]
    if ds is not None:
        outs.append(s)
        grads.append(ds.float())
    return torch.autograd.grad(outs, leaves, grads)


def _check_grads(got, want, names, dtype, m, n):
    for g, e, name in zip(got, want, names):
        atol, rtol = tolerance(dtype, n if name != "dweight" else m)
        scale = max(1.0, float(e.abs().max()))
        assert_close(g, e, atol=atol * scale, rtol=rtol, name=name)


@pytest.mark.parametrize("regime", ["default", *BWD_REGIMES])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=str)
def test_llama_backward(monkeypatch, dtype, regime):
    m, n = 6, 300
    if regime != "default":
        cfg, n = BWD_REGIMES[regime]
        pin_config(monkeypatch, bwd=cfg)
    x, w = make_rows(m, n, dtype), _weight(n, dtype)
    dy = make_rows(m, n, dtype)
    xs, ws = x.clone().requires_grad_(), w.clone().requires_grad_()
    got = torch.autograd.grad(rms.rms_norm(xs, ws, EPS, casting_mode="llama"), (xs, ws), dy)
    _check_grads(got, _llama_ref_grads(x, w, dy), ("dx", "dweight"), dtype, m, n)


def test_llama_dweight_sums_rounded_values():
    # dweight = sum(dy * round(x * rstd)), the values the forward multiplied the weight by:
    # an fp32 weight keeps the sum precise enough to tell it from sum(dy * x * rstd).
    m, n = 64, 96
    x, w, dy = make_rows(m, n, torch.bfloat16), _weight(n, torch.float32), make_rows(m, n, torch.bfloat16)
    ws = w.clone().requires_grad_()
    (dw,) = torch.autograd.grad(rms.rms_norm(x, ws, EPS, casting_mode="llama"), (ws,), dy)
    h = x.float() * kernel_rstd(x, w)[:, None]  # the forward's x * rstd, in fp32
    rounded = (dy.double() * _to(h, torch.bfloat16).double()).sum(0)
    exact = (dy.double() * h.double()).sum(0)
    assert_close(dw, rounded, atol=1e-4, rtol=1e-5, name="dweight")
    assert (dw.double() - exact).abs().max() > 10 * (dw.double() - rounded).abs().max()


@pytest.mark.parametrize("grads_from", ["both", "out"])
def test_llama_add_backward(grads_from):
    m, n, dtype = 5, 127, torch.bfloat16
    x, r, w = make_rows(m, n, dtype), make_rows(m, n, dtype, strided=True), _weight(n, dtype)
    dy, ds = make_rows(m, n, dtype), make_rows(m, n, dtype) if grads_from == "both" else None
    xs, rs, ws = (t.clone().requires_grad_() for t in (x, r, w))
    out, r_out = torch.empty_like(x), torch.empty_like(x)
    rms.rmsnorm2d_fwd_with_add(out, xs, rs, r_out, ws, EPS, casting_mode="llama")
    outs, grads = ([out, r_out], [dy, ds]) if ds is not None else ([out], [dy])
    got = torch.autograd.grad(outs, (xs, ws, rs), grads)
    want = _llama_ref_grads(x, w, dy, r=r, ds=ds)
    _check_grads(got, want, ("dx", "dweight", "dresidual"), dtype, m, n)


# ---------------------------------------------------------------------------
# the layer, the registered ops, bad values


@pytest.mark.parametrize("form", ["plain", "residual", "residual_recording"])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=str)
def test_layer_backends_agree(dtype, form):
    m, n = 6, 160
    layers = {b: RMSNorm(n, EPS, dtype=dtype, backend=b, casting_mode="llama").to(DEVICE) for b in ("triton", "native")}
    w = _weight(n, dtype)
    for layer in layers.values():
        layer.weight.data.copy_(w)
        assert "casting_mode=llama" in repr(layer)
    x, r, dy = _rows(m, n, dtype), _rows(m, n, dtype), make_rows(m, n, dtype)
    recording = form == "residual_recording"
    results = {}
    for b, layer in layers.items():
        xi = x.clone().requires_grad_(recording)
        ri = r.clone().requires_grad_(recording)
        with torch.set_grad_enabled(recording):
            res = layer(xi) if form == "plain" else layer(xi, ri)
        outs = (res,) if form == "plain" else res
        grads = torch.autograd.grad(outs[0], (xi, ri, layer.weight), dy) if recording else ()
        results[b] = ([o.detach() for o in outs], grads)
    # Triton: the reference with the kernel's rstd; native: Hugging Face's own, bit for bit
    if form == "plain":
        wants = {"triton": [llama_rms_norm(x, w, EPS, rstd=kernel_rstd(x, w))],
                 "native": [llama_rms_norm(x, w, EPS, to=torch.Tensor.to)]}
    else:
        wants = {"triton": list(llama_add_rms_norm(x, r, w, EPS, rstd=kernel_rstd(x, w, residual=r))),
                 "native": [llama_rms_norm(r + x, w, EPS, to=torch.Tensor.to), r + x]}
    for b in layers:
        for got, want, name in zip(results[b][0], wants[b], ("out", "residual_out")):
            _same_bits(got, want, f"{form} {b} {name}")
    # Between the two: HF's rstd against the kernel's, and on the CPU the interpreter's
    # truncations (bf16) where the native ops round to nearest, at up to three places.
    ulps = 4 if TRUNCATES_BF16 and dtype == torch.bfloat16 else 2
    for got, want, name in zip(results["triton"][0], results["native"][0], ("out", "residual_out")):
        _within_ulps(got, want, ulps, f"{form} triton vs native {name}")
    if recording:
        _check_grads(results["triton"][1], results["native"][1], ("dx", "dresidual", "dweight"), dtype, m, n)


def test_gemma_layer_keeps_gemma():
    assert GemmaRMSNorm(64).casting_mode == "gemma" and RMSNorm(64).casting_mode == "gemma"


@pytest.mark.parametrize("call", ["rms_norm", "rmsnorm2d_fwd_with_add", "fused_add_rms_norm", "layer"])
@pytest.mark.parametrize("side", ["triton", "native"])
@pytest.mark.parametrize("value", ["none", "Llama", None])
def test_bad_casting_mode(call, side, value):
    x, w = make_rows(2, 32, torch.bfloat16), _weight(32, torch.bfloat16)
    ops = rms if side == "triton" else ref_rms
    name = "RMSNorm" if call == "layer" else call
    with pytest.raises(ValueError, match=rf"^{name}: casting_mode must be one of 'gemma', 'llama', got {value!r}$"):
        if call == "rms_norm":
            ops.rms_norm(x, w, EPS, casting_mode=value)
        elif call == "rmsnorm2d_fwd_with_add":
            ops.rmsnorm2d_fwd_with_add(torch.empty_like(x), x, x.clone(), torch.empty_like(x), w, EPS,
                                       casting_mode=value)
        elif call == "fused_add_rms_norm":
            ops.fused_add_rms_norm(x.clone(), x.clone(), w, EPS, casting_mode=value)
        else:
            RMSNorm(32, backend=side, casting_mode=value)


def test_registered_ops_take_casting_mode():
    x, w = _rows(5, 96, torch.bfloat16), _weight(96, torch.bfloat16)
    want = rms.rms_norm(x, w, EPS, casting_mode="llama")
    _same_bits(torch.ops.aiter_lite.rms_norm(x, w, EPS, 0.0, "llama"), want, "torch.ops positional")
    _same_bits(torch.ops.aiter_lite.rms_norm(x, w, EPS, casting_mode="llama"), want, "torch.ops keyword")
    xi, ri = x.clone(), x.clone()
    torch.ops.aiter_lite.fused_add_rms_norm(xi, ri, w, EPS, 0.0, "llama")
    _same_bits(xi, llama_add_rms_norm(x, x, w, EPS, rstd=kernel_rstd(x, w, residual=x))[0],
               "torch.ops fused_add_rms_norm")
    y, rstd = torch.empty_like(x), torch.empty(5, device=DEVICE)
    opcheck(torch.ops.aiter_lite.launch_norm_fwd, (x, y, w, None, EPS, True, None, None, None, 0.0, None, rstd),
            {"casting_mode": "llama"})
    torch._dynamo.reset()
    compiled = torch.compile(lambda x, w: rms.rms_norm(x, w, EPS, casting_mode="llama"), backend=BACKEND,
                             fullgraph=True)
    _same_bits(compiled(x, w), want, "compiled")


def test_modes_keep_their_launch_plans_apart():
    # A launch plan's key holds every non-tensor argument: the two modes never share one.
    x, w = make_rows(4, 64, torch.bfloat16), _weight(64, torch.bfloat16)
    first = {mode: rms.rms_norm(x, w, EPS, casting_mode=mode) for mode in ("gemma", "llama")}
    assert not torch.equal(first["gemma"], first["llama"])
    for _ in range(4):
        for mode in ("gemma", "llama"):
            _same_bits(rms.rms_norm(x, w, EPS, casting_mode=mode), first[mode], f"{mode} from its plan")
