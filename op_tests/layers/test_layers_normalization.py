"""RMSNorm / GemmaRMSNorm / LayerNorm modules: both backends match the reference, the
residual form follows vLLM's contract, and the env switch picks the backend."""

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
    out, res = layer(x, r)
    assert out is x and res is r  # in place, as vLLM's fused_add_rms_norm
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
    for cls in (RMSNorm, GemmaRMSNorm, LayerNorm):
        assert cls(N).backend == backend


def test_bad_arguments(monkeypatch):
    monkeypatch.setenv("AITER_NORMALIZATION_BACKEND", "cuda")
    with pytest.raises(ValueError, match="AITER_NORMALIZATION_BACKEND='cuda' is not valid"):
        RMSNorm(N)
    monkeypatch.delenv("AITER_NORMALIZATION_BACKEND")
    with pytest.raises(ValueError, match="LayerNorm: backend must be one of"):
        LayerNorm(N, backend="cuda")
    with pytest.raises(ValueError, match="RMSNorm: hidden_size must be a positive int, got 0"):
        RMSNorm(0)
    layer = RMSNorm(N, backend="triton").to(DEVICE)
    with pytest.raises(ValueError, match="weight must have shape"):
        layer(make_rows(2, N + 1, torch.float32))
