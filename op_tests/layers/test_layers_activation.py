"""SiluAndMul / GeluAndMul: both backends agree, the env switch picks the backend, and a
Hugging Face LlamaMLP's weights give its output through SiluAndMul."""

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
    assert torch.equal(layer(x), getattr(layer, f"forward_{backend}")(x))


def test_bad_backend(monkeypatch):
    monkeypatch.setenv("AITER_ACTIVATION_BACKEND", "cuda")
    with pytest.raises(ValueError, match="AITER_ACTIVATION_BACKEND='cuda' is not valid"):
        SiluAndMul()
    with pytest.raises(ValueError, match="backend must be one of"):
        SiluAndMul(backend="cuda")
    with pytest.raises(ValueError, match="approximate must be one of 'none', 'tanh'"):
        GeluAndMul(approximate="fast", backend="native")


def test_layer_on_device():
    layer = SiluAndMul(backend="triton").to(DEVICE)
    assert layer(make_rows(1, 2, torch.float32)).shape == (1, 1)


# (M, 2 * d): no rows, one row, odd widths, strided rows
SHAPES = [(0, 16), (1, 2), (1, 14), (5, 254), (3, 96)]


@pytest.mark.parametrize("strided", [False, True], ids=["contiguous", "strided"])
@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("cls,kwargs,activation", LAYERS, ids=[a for *_, a in LAYERS])
def test_native_matches_triton(cls, kwargs, activation, dtype, shape, strided):
    layer = cls(backend="native", **kwargs)
    x = make_rows(*shape, dtype, strided=strided)
    native, triton = layer.forward_native(x), layer.forward_triton(x)
    assert native.shape == triton.shape == (shape[0], shape[1] // 2) and triton.dtype == dtype
    assert_close(triton, native)


@pytest.mark.parametrize("backend", ["triton", "native"])
def test_forward_is_the_picked_path(backend):
    layer = GeluAndMul("tanh", backend=backend)
    x = make_rows(4, 2 * 40, torch.bfloat16)
    assert torch.equal(layer(x), getattr(layer, f"forward_{backend}")(x))
    with pytest.raises(ValueError, match=r"GeluAndMul: x last dim must be even \(gate, then up\), got shape \(4, 7\)"):
        getattr(layer, f"forward_{backend}")(make_rows(4, 7, torch.float32))


class HFLlamaMLP(torch.nn.Module):
    """A Hugging Face LlamaMLP: ``down_proj(act_fn(gate_proj(x)) * up_proj(x))``."""

    def __init__(self, hidden, inter):
        super().__init__()
        self.gate_proj = torch.nn.Linear(hidden, inter, bias=False)
        self.up_proj = torch.nn.Linear(hidden, inter, bias=False)
        self.down_proj = torch.nn.Linear(inter, hidden, bias=False)
        self.act_fn = torch.nn.SiLU()

    def forward(self, x):
        return self.down_proj(self.act_fn(self.gate_proj(x)) * self.up_proj(x))


class MergedMLP(torch.nn.Module):
    """A serving stack's MLP: one gate | up projection, then SiluAndMul."""

    def __init__(self, hidden, inter, backend):
        super().__init__()
        self.gate_up_proj = torch.nn.Linear(hidden, 2 * inter, bias=False)
        self.act_fn = SiluAndMul(backend=backend)
        self.down_proj = torch.nn.Linear(inter, hidden, bias=False)

    def load_hf_state_dict(self, state):
        self.load_state_dict({"gate_up_proj.weight": torch.cat([state["gate_proj.weight"], state["up_proj.weight"]]),
                              "down_proj.weight": state["down_proj.weight"]})

    def forward(self, x):
        return self.down_proj(self.act_fn(self.gate_up_proj(x)))


@pytest.mark.parametrize("backend", ["triton", "native"])
def test_hf_llama_mlp(backend):
    """A Hugging Face LlamaMLP's weights, merged into gate_up_proj, give its output through SiluAndMul."""
    hf = HFLlamaMLP(32, 48).to(DEVICE)
    ours = MergedMLP(32, 48, backend).to(DEVICE)
    ours.load_hf_state_dict(hf.state_dict())
    assert ours.act_fn.state_dict() == {}
    x = make_rows(5, 32, torch.float32, lead=(2,))
    with torch.no_grad():
        assert_close(ours(x), hf(x), atol=1e-5, rtol=1e-4)
