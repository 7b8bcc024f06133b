"""RMSNorm / GemmaRMSNorm / LayerNorm modules: both backends match the reference and each
other, the residual form follows vLLM's contract, the env switch picks the backend, and
Hugging Face-style modules' state dicts load unchanged."""

import pytest
import torch

from aiter_lite.layers import GemmaRMSNorm, LayerNorm, RMSNorm
from aiter_lite.ops.native.normalization import layernorm as ref_ln
from aiter_lite.ops.native.normalization import rmsnorm as ref_rms
from op_tests.utils import DEVICE, DTYPES, assert_close, make_rows, tolerance

N = 96


def _randomize(layer, dtype):
    """Fresh random parameters (a fresh module's ones / zeros would hide a wrong weight)."""
    with torch.no_grad():
        for p in layer.parameters():
            p.copy_(torch.randn_like(p) * 0.2 + (0.0 if p is getattr(layer, "bias", None) else 1.0))
    return layer.to(device=DEVICE, dtype=dtype)


@pytest.mark.parametrize("backend", ["triton", "native"])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_rmsnorm_layer(dtype, backend):
    layer = _randomize(RMSNorm(N, eps=1e-5, backend=backend), dtype)
    x, r = make_rows(7, N, dtype, lead=(2,)), make_rows(7, N, dtype, lead=(2,))
    atol = tolerance(dtype, N)[0]
    assert_close(layer(x), ref_rms.rms_norm(x, layer.weight, 1e-5), atol=atol)
    e_out, e_res = torch.empty_like(x), torch.empty_like(r)
    ref_rms.rmsnorm2d_fwd_with_add(e_out, x, r, e_res, layer.weight, 1e-5)
    with torch.no_grad():  # serving: in place, as vLLM's fused_add_rms_norm
        out, res = layer(x, r)
    assert out is x and res is r
    assert_close(res, e_res, name="residual")
    assert_close(out, e_out, atol=atol)
    assert backend in repr(layer) and "hidden_size=96" in repr(layer)


@pytest.mark.parametrize("backend", ["triton", "native"])
def test_gemma_rmsnorm_scales_by_one_plus_weight(backend):
    layer = GemmaRMSNorm(N, backend=backend).to(DEVICE)
    assert torch.equal(layer.weight, torch.zeros_like(layer.weight))  # starts as the identity scale
    with torch.no_grad():
        layer.weight.normal_()
    x = make_rows(5, N, torch.float32)
    assert_close(layer(x), ref_rms.rms_norm(x, layer.weight + 1, 1e-6))


@pytest.mark.parametrize("backend", ["triton", "native"])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("affine", ["weight_bias", "weight", "none"])
def test_layernorm_layer(dtype, backend, affine):
    layer = LayerNorm(N, elementwise_affine=affine != "none", bias=affine == "weight_bias", backend=backend)
    layer = _randomize(layer, dtype)
    assert (layer.bias is None) == (affine != "weight_bias")
    x, r = make_rows(6, N, dtype, scale=2.0), make_rows(6, N, dtype)
    atol = tolerance(dtype, N)[0]
    assert_close(layer(x), ref_ln.layer_norm(x, layer.weight, layer.bias, 1e-5), atol=atol)
    x0, r0 = x.clone(), r.clone()
    out, res = layer(x, r)
    assert torch.equal(x, x0) and torch.equal(r, r0), "LayerNorm's residual form modified an input"
    assert_close(res, (x.float() + r.float()).to(dtype), name="residual")
    assert_close(out, ref_ln.layer_norm(res.float(), layer.weight, layer.bias, 1e-5).to(dtype), atol=2 * atol)


def test_rmsnorm_layer_trains():
    layer = _randomize(RMSNorm(N, backend="triton"), torch.float32)
    x = make_rows(9, N, torch.float32).requires_grad_()
    dy = torch.randn_like(x)
    layer(x).backward(dy)
    xs, ws = x.detach().clone().requires_grad_(), layer.weight.detach().clone().requires_grad_()
    ref_rms.rms_norm(xs, ws, 1e-6).backward(dy)
    assert_close(x.grad, xs.grad, name="dx")
    assert_close(layer.weight.grad, ws.grad, atol=1e-4, name="dweight")


@pytest.mark.parametrize("family_var", ["AITER_NORMALIZATION_BACKEND", "AITER_BACKEND"])
@pytest.mark.parametrize("backend", ["triton", "native"])
def test_env_picks_backend(monkeypatch, family_var, backend):
    monkeypatch.delenv("AITER_NORMALIZATION_BACKEND", raising=False)
    monkeypatch.setenv(family_var, backend)
    x = make_rows(3, N, torch.float32)
    for cls in (RMSNorm, GemmaRMSNorm, LayerNorm):
        layer = cls(N).to(DEVICE)
        assert layer.backend == backend
        assert torch.equal(layer(x), getattr(layer, f"forward_{backend}")(x))


def test_bad_arguments(monkeypatch):
    monkeypatch.setenv("AITER_NORMALIZATION_BACKEND", "cuda")
    with pytest.raises(ValueError, match="AITER_NORMALIZATION_BACKEND='cuda' is not valid"):
        RMSNorm(N)
    monkeypatch.delenv("AITER_NORMALIZATION_BACKEND")
    with pytest.raises(ValueError, match="LayerNorm: backend must be one of"):
        LayerNorm(N, backend="cuda")
    with pytest.raises(ValueError, match="RMSNorm: hidden_size must be >= 1, got 0"):
        RMSNorm(0)
    layer = RMSNorm(N, backend="triton").to(DEVICE)
    with pytest.raises(ValueError, match="weight must have shape"):
        layer(make_rows(2, N + 1, torch.float32))


# (M, N): no rows, one row, odd widths
SHAPES = [(0, 96), (1, 1), (1, 7), (5, 127), (3, 96)]
NORMS = {
    "rms": lambda n, backend: RMSNorm(n, eps=1e-5, backend=backend),
    "rms_no_weight": lambda n, backend: RMSNorm(n, has_weight=False, backend=backend),
    "gemma": lambda n, backend: GemmaRMSNorm(n, backend=backend),
    "layer": lambda n, backend: LayerNorm(n, backend=backend),
    "layer_no_bias": lambda n, backend: LayerNorm(n, bias=False, backend=backend),
}


def _norm_both(layer, x, r):
    """(out, residual_out) of forward_native and forward_triton on copies of x and r."""
    outs = []
    for fn in (layer.forward_native, layer.forward_triton):
        xi, ri = x.clone(), r.clone()
        with torch.no_grad():  # serving (training takes the out-of-place path: test_norm_add_backward)
            out, res = fn(xi, ri)
        if isinstance(layer, RMSNorm) and fn == layer.forward_triton:
            assert out is xi and res is ri, "RMSNorm's kernel path works in place, as vLLM's forward_cuda"
        elif isinstance(layer, RMSNorm):  # vLLM's forward_native: out of place
            assert out is not xi and res is not ri and torch.equal(xi, x) and torch.equal(ri, r), \
                "RMSNorm.forward_native modified an input"
        else:
            assert torch.equal(xi, x) and torch.equal(ri, r), "LayerNorm's residual form modified an input"
        outs.append((out, res))
    return outs


@pytest.mark.parametrize("residual", [False, True], ids=["plain", "residual"])
@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("kind", NORMS)
def test_native_matches_triton(kind, dtype, shape, residual):
    m, n = shape
    layer = _randomize(NORMS[kind](n, "native"), dtype)
    x, r = make_rows(m, n, dtype, scale=2.0), make_rows(m, n, dtype)
    atol = tolerance(dtype, n)[0]
    if not residual:
        native, triton = layer.forward_native(x), layer.forward_triton(x)
        assert native.shape == triton.shape == x.shape and triton.dtype == dtype
        assert_close(triton, native, atol=atol)
        return
    (out_n, res_n), (out_t, res_t) = _norm_both(layer, x, r)
    assert_close(res_t, res_n, name="residual")
    assert_close(out_t, out_n, atol=atol)


@pytest.mark.parametrize("backend", ["triton", "native"])
@pytest.mark.parametrize("kind", NORMS)
def test_forward_is_the_picked_path(kind, backend):
    layer = _randomize(NORMS[kind](N, backend), torch.bfloat16)
    x, r = make_rows(4, N, torch.bfloat16), make_rows(4, N, torch.bfloat16)
    path = getattr(layer, f"forward_{backend}")
    assert torch.equal(layer(x), path(x))
    got, want = layer(x.clone(), r.clone()), path(x.clone(), r.clone())
    assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])


# Hugging Face's modules, written out as transformers defines them (the state dict is what matters).

class HFLlamaRMSNorm(torch.nn.Module):
    def __init__(self, hidden_size, eps=1e-6):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.ones(hidden_size))
        self.variance_epsilon = eps

    def forward(self, hidden_states):
        input_dtype = hidden_states.dtype
        hidden_states = hidden_states.to(torch.float32)
        variance = hidden_states.pow(2).mean(-1, keepdim=True)
        hidden_states = hidden_states * torch.rsqrt(variance + self.variance_epsilon)
        return self.weight * hidden_states.to(input_dtype)


class HFGemmaRMSNorm(torch.nn.Module):
    def __init__(self, dim, eps=1e-6):
        super().__init__()
        self.eps = eps
        self.weight = torch.nn.Parameter(torch.zeros(dim))

    def forward(self, x):
        y = x.float() * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + self.eps)
        return (y * (1.0 + self.weight.float())).type_as(x)


HF_NORMS = {
    "llama": (lambda: HFLlamaRMSNorm(N, eps=1e-5), lambda hf, b: RMSNorm(N, eps=hf.variance_epsilon, backend=b)),
    "gemma": (lambda: HFGemmaRMSNorm(N, eps=1e-6), lambda hf, b: GemmaRMSNorm(N, eps=hf.eps, backend=b)),
    "torch_layernorm": (lambda: torch.nn.LayerNorm(N, eps=1e-5), lambda hf, b: LayerNorm(N, eps=hf.eps, backend=b)),
}


@pytest.mark.parametrize("backend", ["triton", "native"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize("kind", HF_NORMS)
def test_loads_hf_state_dict(kind, dtype, backend):
    """A Hugging Face-style module's state dict loads unchanged (strict) and gives its output."""
    make_hf, make_ours = HF_NORMS[kind]
    hf = _randomize(make_hf(), dtype)
    ours = make_ours(hf, backend).to(DEVICE, dtype)
    assert ours.state_dict().keys() == hf.state_dict().keys()
    ours.load_state_dict(hf.state_dict())
    hf.load_state_dict(ours.state_dict())  # and back
    x = make_rows(6, N, dtype, scale=2.0)
    with torch.no_grad():
        want = hf(x)
        # Llama's HF form rounds the normalized x to bf16 before the weight: two roundings to our one
        atol, rtol = tolerance(dtype, N)
        assert_close(ours(x), want.to(dtype), atol=2 * atol, rtol=2 * rtol)


def test_rmsnorm_hf_names():
    layer = RMSNorm(N, eps=1e-5, backend="native")
    assert layer.variance_epsilon == layer.eps == 1e-5
    layer.variance_epsilon = 1e-6
    assert layer.eps == 1e-6 and "eps=1e-06" in repr(layer)
    ln = LayerNorm(N, elementwise_affine=False, backend="native")
    assert ln.normalized_shape == (N,) and ln.elementwise_affine is False and ln.state_dict() == {}


class TinyModel(torch.nn.Module):
    def __init__(self, norm):
        super().__init__()
        self.embed_tokens = torch.nn.Embedding(32, N)
        self.norm = norm
        self.lm_head = torch.nn.Linear(N, 32, bias=False)

    def forward(self, ids):
        return self.lm_head(self.norm(self.embed_tokens(ids)))


@pytest.mark.parametrize("backend", ["triton", "native"])
def test_swap_into_hf_model(backend):
    """RMSNorm set in place of a model's HF-style norm: same output, same (strictly loadable) state dict."""
    model = TinyModel(HFLlamaRMSNorm(N, eps=1e-5)).to(DEVICE)
    with torch.no_grad():
        model.norm.weight.normal_(1.0, 0.2)
    ids = torch.randint(0, 32, (2, 5), device=DEVICE)
    state = model.state_dict()
    with torch.no_grad():
        want = model(ids)
    for name, child in list(model.named_children()):  # as a model-patching pass finds the norms
        if isinstance(child, HFLlamaRMSNorm):
            ours = RMSNorm(child.weight.shape[0], eps=child.variance_epsilon, backend=backend).to(DEVICE)
            ours.load_state_dict(child.state_dict())
            setattr(model, name, ours)
    assert isinstance(model.norm, RMSNorm)
    assert model.state_dict().keys() == state.keys()
    model.load_state_dict(state)
    with torch.no_grad():
        assert_close(model(ids), want, atol=1e-5, rtol=1e-5)
