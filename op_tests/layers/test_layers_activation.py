"""SiluAndMul / GeluAndMul: both backends agree, and the env switch picks the backend."""

import pytest
import torch

from aiter_lite.layers import GeluAndMul, SiluAndMul
from aiter_lite.ops.native import activation as ref
from op_tests.utils import DEVICE, DTYPES, assert_close, make_rows

LAYERS = [
    (SiluAndMul, {}, "silu"),
    (GeluAndMul, {}, "gelu"),
    (GeluAndMul, {"approximate": "tanh"}, "gelu_tanh"),
]


@pytest.mark.parametrize("backend", ["triton", "native"])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("cls,kwargs,activation", LAYERS, ids=[a for *_, a in LAYERS])
def test_layer_matches_reference(cls, kwargs, activation, dtype, backend):
    layer = cls(backend=backend, **kwargs)
    x = make_rows(5, 2 * 48, dtype, lead=(2,))
    y = layer(x)
    assert y.shape == (2, 5, 48) and y.dtype == dtype
    assert_close(y, ref.gated(x, activation))
    assert layer.backend == backend and backend in repr(layer)


@pytest.mark.parametrize("family_var", ["AITER_ACTIVATION_BACKEND", "AITER_BACKEND"])
@pytest.mark.parametrize("backend", ["triton", "native"])
def test_env_picks_backend(monkeypatch, family_var, backend):
    monkeypatch.delenv("AITER_ACTIVATION_BACKEND", raising=False)
    monkeypatch.setenv(family_var, backend)
    layer = SiluAndMul()
    assert layer.backend == backend
    x = make_rows(3, 64, torch.bfloat16)
    assert_close(layer(x), ref.gated(x, "silu"))


def test_bad_backend(monkeypatch):
    monkeypatch.setenv("AITER_ACTIVATION_BACKEND", "cuda")
    with pytest.raises(ValueError, match="AITER_ACTIVATION_BACKEND='cuda' is not valid"):
        SiluAndMul()
    with pytest.raises(ValueError, match="backend must be one of"):
        SiluAndMul(backend="cuda")
    with pytest.raises(ValueError, match="approximate must be 'none' or 'tanh'"):
        GeluAndMul(approximate="fast", backend="native")


def test_layer_on_device():
    layer = SiluAndMul(backend="triton").to(DEVICE)
    assert layer(make_rows(1, 2, torch.float32)).shape == (1, 1)
