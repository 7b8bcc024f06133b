"""The contract every layer follows: ``forward_native`` and ``forward_triton`` share
``forward``'s signature, ``forward`` runs the backend picked at construction (the read-only
``backend``, shown in the repr), and a layer pickles, deep-copies and compiles with
torch.compile(fullgraph=True) on either backend."""

import copy
import inspect
import pickle

import pytest
import torch

from aiter_lite import layers
from aiter_lite.layers import (
    BackendLayer,
    CrossEntropyLoss,
    FusedLinearCrossEntropyLoss,
    GeluAndMul,
    GemmaRMSNorm,
    GroupShape,
    LayerNorm,
    QuantFP8,
    RMSNorm,
    SiluAndMul,
    get_rope,
)
from op_tests.utils import DEVICE, ON_GPU, make_rows

BACKENDS = ["native", "triton"]


def _rope_args():
    return (torch.arange(3, device=DEVICE), make_rows(3, 128, torch.float32), make_rows(3, 64, torch.float32))


# name -> (layer factory taking a backend, inputs factory)
CASES = {
    "rms_norm": (lambda b: RMSNorm(64, backend=b), lambda: (make_rows(3, 64),)),
    "rms_norm_residual": (lambda b: RMSNorm(64, backend=b), lambda: (make_rows(3, 64), make_rows(3, 64))),
    "gemma_rms_norm": (lambda b: GemmaRMSNorm(64, backend=b), lambda: (make_rows(3, 64),)),
    "layer_norm_residual": (lambda b: LayerNorm(64, backend=b), lambda: (make_rows(3, 64), make_rows(3, 64))),
    "silu_and_mul": (lambda b: SiluAndMul(backend=b), lambda: (make_rows(3, 64),)),
    "gelu_and_mul": (lambda b: GeluAndMul("tanh", backend=b), lambda: (make_rows(3, 64),)),
    "rope": (lambda b: get_rope(64, 64, 16, 10000.0, True, backend=b), _rope_args),
    "quant_static": (lambda b: QuantFP8(True, GroupShape.PER_TENSOR, backend=b),
                     lambda: (make_rows(3, 64), torch.full((1,), 0.01, device=DEVICE))),
    "quant_per_token": (lambda b: QuantFP8(False, GroupShape.PER_TOKEN, backend=b), lambda: (make_rows(3, 64),)),
    "quant_group": (lambda b: QuantFP8(False, GroupShape(1, 32), backend=b), lambda: (make_rows(3, 64),)),
    "cross_entropy": (lambda b: CrossEntropyLoss(label_smoothing=0.1, backend=b),
                      lambda: (make_rows(3, 64), torch.tensor([5, -100, 63], device=DEVICE))),
    "fused_linear_cross_entropy": (lambda b: FusedLinearCrossEntropyLoss(softcap=20.0, chunk_size=2, backend=b),
                                   lambda: (make_rows(40, 16), make_rows(3, 16), torch.tensor([5, 39, 0],
                                                                                              device=DEVICE))),
}
LAYER_CLASSES = [getattr(layers, name) for name in layers.__all__
                 if inspect.isclass(getattr(layers, name)) and issubclass(getattr(layers, name), BackendLayer)
                 and getattr(layers, name) is not BackendLayer]


def _flat(out):
    return [t for t in (out if isinstance(out, tuple) else (out,)) if t is not None]


def _same(a, b):
    if a.dtype.itemsize == 1 and a.dtype.is_floating_point:
        a, b = a.view(torch.uint8), b.view(torch.uint8)
    return a.shape == b.shape and torch.equal(a, b)


@pytest.mark.parametrize("cls", LAYER_CLASSES, ids=lambda c: c.__name__)
def test_signatures(cls):
    """forward, forward_native and forward_triton take the same arguments."""
    want = inspect.signature(cls.forward)
    for name in ("forward_native", "forward_triton"):
        got = inspect.signature(getattr(cls, name))
        assert got == want, f"{cls.__name__}.{name}{got} differs from forward{want}"


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("case", CASES)
def test_forward_runs_the_picked_backend(case, backend):
    make_layer, make_inputs = CASES[case]
    layer = make_layer(backend).to(DEVICE)
    assert layer.backend == backend and f"backend={backend}" in repr(layer)
    inputs = make_inputs()
    got = _flat(layer(*[t.clone() for t in inputs]))
    want = _flat(getattr(layer, f"forward_{backend}")(*[t.clone() for t in inputs]))
    assert len(got) == len(want) and all(_same(a, b) for a, b in zip(got, want))
    with pytest.raises(AttributeError):
        layer.backend = "native" if backend == "triton" else "triton"


@pytest.mark.parametrize("case", CASES)
def test_pickle_and_deepcopy(case):
    layer = CASES[case][0]("triton")
    inputs = CASES[case][1]()
    want = _flat(layer.to(DEVICE)(*[t.clone() for t in inputs]))
    for copied in (pickle.loads(pickle.dumps(layer)), copy.deepcopy(layer)):
        assert type(copied) is type(layer) and copied.backend == "triton" and repr(copied) == repr(layer)
        assert copied.state_dict().keys() == layer.state_dict().keys()
        got = _flat(copied(*[t.clone() for t in inputs]))
        assert all(_same(a, b) for a, b in zip(got, want))


@pytest.mark.filterwarnings("ignore:Dynamo detected a call to a `functools.lru_cache`")
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("case", ["rms_norm_residual", "layer_norm_residual", "silu_and_mul", "rope",
                                  "quant_static", "quant_per_token", "quant_group", "cross_entropy",
                                  "fused_linear_cross_entropy"])
def test_compiles_fullgraph(case, backend):
    if case == "rope" and backend == "triton" and not ON_GPU:
        pytest.skip("the Triton RoPE ops read CPU positions on the host to check them (a GPU keeps them on device)")
    make_layer, make_inputs = CASES[case]
    layer = make_layer(backend).to(DEVICE)
    inputs = make_inputs()
    torch._dynamo.reset()
    compiled = torch.compile(layer, backend="inductor" if ON_GPU else "aot_eager", fullgraph=True)
    got = _flat(compiled(*[t.clone() for t in inputs]))
    want = _flat(layer(*[t.clone() for t in inputs]))
    for a, b in zip(got, want):  # inductor may fuse the native math differently: one rounding apart
        rtol = 0.125 if a.dtype.itemsize == 1 else 1e-5
        torch.testing.assert_close(a.float(), b.float(), atol=1e-5, rtol=rtol)
