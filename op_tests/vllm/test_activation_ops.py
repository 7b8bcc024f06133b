"""aiter_lite.vllm.ops' activation ops and the activation layers against references written
from vLLM's semantics: its layers' forward_native formulas, with the roundings vLLM's
kernels make (the activation stored in the dtype before the multiply; gelu_new / gelu_fast
operating on the dtype's values).

On a GPU the references round as torch does, and silu / mul_and_silu / gelu_tanh / fatrelu
are compared bit for bit (vLLM's own test compares them exactly with
forward_native), the rest with vLLM's tolerances. Triton's interpreter converts fp32 to
bf16 by truncation and its exp / tanh are not the device's: on the CPU the references
convert the same way (``_to``) and a value may sit one unit in the last place away.
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from aiter_lite.vllm import ops
from aiter_lite.vllm.model_executor.layers.activation import (
    FastGELU,
    FatreluAndMul,
    GeluAndMul,
    MulAndSilu,
    NewGELU,
    QuickGELU,
    SiluAndMul,
    SwigluOAIAndMul,
)
from op_tests.utils import DEVICE, DTYPES, ON_GPU, assert_close, by_device, make_rows, poisoned

TRUNCATES_BF16 = not ON_GPU
# One unit in the last place relative to 1 (the CPU's allowance: another exp / tanh and bf16
# truncation); vLLM's default tolerances (tests/kernels/allclose_default.py) for the rest.
# fp32: torch's CPU erf / tanh near -1 (1 + erf cancels) are a few units from the interpreter's.
ULP = {torch.float32: 2.0 ** -21 if ON_GPU else 1e-5, torch.float16: 2.0 ** -10, torch.bfloat16: 2.0 ** -7}
VLLM_ATOL = {torch.float16: 1e-3, torch.bfloat16: 1e-3, torch.float32: 1e-5}
VLLM_RTOL = {torch.float16: 1e-3, torch.bfloat16: 1.6e-2, torch.float32: 1.3e-6}
SWIGLUOAI_RTOL = {torch.float16: 2e-3, torch.bfloat16: 2e-2, torch.float32: 1.3e-6}
# gelu_and_mul (erf) is a unit in the last place from torch's on an H200 in fp16 / fp32 (its erf
# and the multiply-adds around it round differently): compared within a unit, with the others
EXACT = {"silu_and_mul", "mul_and_silu", "gelu_tanh_and_mul", "fatrelu_and_mul"}


def _to(t: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """``t.to(dtype)`` as the device running the kernels converts (module doc)."""
    if TRUNCATES_BF16 and dtype == torch.bfloat16 and t.dtype == torch.float32:
        return (t.view(torch.int32) & -65536).view(torch.float32).to(dtype)
    return t.to(dtype)


def _r(t: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    return _to(t, dtype).float()


# ---- references: vLLM's semantics, fp32 values rounded where vLLM's computation rounds ----

def _halves(x):
    d = x.shape[-1] // 2
    return x.float()[..., :d], x.float()[..., d:]


def ref_gated(name: str, x: torch.Tensor, *params) -> torch.Tensor:
    t = x.dtype
    if name == "swigluoai_and_mul":
        alpha, limit = params or (1.702, 7.0)
        gate = x.float()[..., ::2].clamp(max=limit)
        up = x.float()[..., 1::2].clamp(min=-limit, max=limit)
        return _to((up + 1) * (gate * torch.sigmoid(gate * alpha)), t)
    g, u = _halves(x)
    if name == "mul_and_silu":
        return _to(g * _r(F.silu(u), t), t)
    act = {
        "silu_and_mul": F.silu,
        "gelu_and_mul": F.gelu,
        "gelu_tanh_and_mul": lambda v: F.gelu(v, approximate="tanh"),
        "fatrelu_and_mul": lambda v: F.threshold(v, params[0] if params else 0.0, 0.0),
    }[name]
    return _to(_r(act(g), t) * u, t)


def ref_elementwise(name: str, x: torch.Tensor) -> torch.Tensor:
    t, f = x.dtype, x.float()
    if name == "gelu_quick":
        return _to(f / (1.0 + torch.exp(-1.702 * f)), t)
    if name == "gelu_new":
        x3 = _r(_r(f * f, t) * f, t)
        inner = _r(0.79788456 * _r(f + _r(0.044715 * x3, t), t), t)
    else:
        inner = _r(_r(f * 0.79788456, t) * _r(1.0 + _r(_r(0.044715 * f, t) * f, t), t), t)
    return _to(_r(0.5 * f, t) * _r(1.0 + _r(torch.tanh(inner), t), t), t)


def _cancelling(name: str, x: torch.Tensor) -> torch.Tensor | None:
    """Each element's error bound where ``1 + f`` cancels: gelu_and_mul's ``1 + erf`` near -1
    (erf a unit of 1.0 from torch's: 0.5 |g| |u| units), gelu_new / gelu_fast's ``1 + tanh``
    (a unit of tanh in the dtype: 0.5 |x| units); None for the others."""
    eps = torch.finfo(x.dtype).eps
    if name == "gelu_and_mul":
        g, u = _halves(x)
        return 0.5 * g.abs() * u.abs() * eps
    if name in ("gelu_new", "gelu_fast"):
        return 0.5 * x.float().abs() * eps
    return None


def _check(name: str, got: torch.Tensor, want: torch.Tensor, x: torch.Tensor) -> None:
    dt = got.dtype
    if ON_GPU and name in EXACT:
        assert_close(got, want, atol=0, rtol=0, name=name)
    elif ON_GPU and name == "gelu_and_mul":
        assert_close(got, want, atol=ULP[dt] + _cancelling(name, x), rtol=2 * ULP[dt], name=name)
    elif name in ("gelu_new", "gelu_fast"):
        # a unit of tanh's value near -1 is half |x| units of the result (1 + t cancels)
        scale = 1.0 + float(x.float().abs().max()) if x.numel() else 1.0
        assert_close(got, want, atol=ULP[dt] * scale, rtol=2 * ULP[dt], name=name)
    else:
        assert_close(got, want, atol=ULP[dt], rtol=2 * ULP[dt], name=name)


GATED = ["silu_and_mul", "mul_and_silu", "gelu_and_mul", "gelu_tanh_and_mul", "fatrelu_and_mul",
         "swigluoai_and_mul"]
ELEMENTWISE = ["gelu_new", "gelu_fast", "gelu_quick"]
SHAPES = by_device(
    cpu=[(0, 64), (1, 1), (1, 1000), (3, 7), (7, 127), (33, 64), (5, 4097)],
    gpu=[(0, 64), (1, 1), (1, 14336), (3, 7), (7, 127), (83, 512), (2048, 13824), (1000, 4097), (3, 65537)],
)


def _params(name):
    return {"fatrelu_and_mul": (0.37,), "swigluoai_and_mul": (1.702, 7.0)}.get(name, ())


@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("name", GATED)
def test_gated_op(name, dtype, shape):
    m, d = shape
    x = make_rows(m, 2 * d, dtype, scale=3.0)  # past swigluoai's limit too
    out = poisoned((m, d), dtype)
    with torch.inference_mode():
        assert getattr(ops, name)(out, x, *_params(name)) is None
    _check(name, out, ref_gated(name, x, *_params(name)), x)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("name", GATED)
def test_gated_op_strided_rows_and_out_view(name, dtype):
    m, d = by_device(9, 300), by_device(130, 4099)
    x = make_rows(m, 2 * d, dtype, strided=True, scale=3.0)
    assert not x.is_contiguous()
    before = x.clone()
    buf = poisoned((m, d + 5), dtype)
    out = buf[:, :d]
    getattr(ops, name)(out, x, *_params(name))
    assert torch.equal(x, before), "input was modified"
    assert buf[:, d:].isnan().all(), "wrote outside out"
    _check(name, out, ref_gated(name, x, *_params(name)), x)


@pytest.mark.parametrize("name", GATED)
def test_gated_op_any_rank(name):
    x = make_rows(5, 2 * 48, torch.bfloat16, lead=(2, 3), scale=3.0)
    out = poisoned((2, 3, 5, 48), torch.bfloat16)
    getattr(ops, name)(out, x, *_params(name))
    _check(name, out, ref_gated(name, x, *_params(name)), x)


@pytest.mark.parametrize("threshold", [-1.0, 0.0, 0.5, 2])
def test_fatrelu_threshold(threshold):
    x = make_rows(4, 2 * 64, torch.float32, scale=2.0)
    x[0, :4] = torch.tensor([threshold, float("nan"), -float("inf"), float("inf")])
    out = poisoned((4, 64), torch.float32)
    ops.fatrelu_and_mul(out, x, threshold)
    want = ref_gated("fatrelu_and_mul", x, float(threshold))
    assert out[0, 0] == 0, "a gate equal to the threshold is dropped (F.threshold: x <= threshold)"
    assert out[0, 1].isnan(), "a NaN gate propagates (F.threshold)"
    assert_close(out, want, atol=0, rtol=0)


@pytest.mark.parametrize("alpha,limit", [(1.702, 7.0), (1.0, 0.5), (2.5, 100.0)])
def test_swigluoai_alpha_limit_and_layout(alpha, limit):
    x = make_rows(6, 2 * 40, torch.float32, scale=5.0)
    out = poisoned((6, 40), torch.float32)
    ops.swigluoai_and_mul(out, x, alpha, limit)
    assert_close(out, ref_gated("swigluoai_and_mul", x, alpha, limit), atol=1e-5, rtol=1.3e-6)
    # interleaved, not halves: swapping each gate / up pair changes the result
    swapped = x.view(6, 40, 2).flip(-1).reshape(6, 80)
    other = poisoned((6, 40), torch.float32)
    ops.swigluoai_and_mul(other, swapped, alpha, limit)
    assert not torch.allclose(other, out)


@pytest.mark.parametrize("shape", by_device(cpu=[(0, 8), (1,), (1, 1), (7,), (3, 127), (2, 3, 1000), (4097,)],
                                            gpu=[(0, 8), (1,), (1, 1), (7, 512), (83, 13824), (3, 5, 65537)]),
                         ids=str)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("name", ELEMENTWISE)
def test_elementwise_op(name, dtype, shape):
    x = (torch.randn(shape, device=DEVICE) * 3).to(dtype)
    out = poisoned(shape, dtype)
    assert getattr(ops, name)(out, x) is None
    _check(name, out, ref_elementwise(name, x), x)


@pytest.mark.parametrize("name", ELEMENTWISE)
def test_elementwise_op_strided_rows(name):
    x = make_rows(7, 50, torch.float16, strided=True, lead=(2,), scale=3.0)
    buf = poisoned((2, 7, 53), torch.float16)
    out = buf[..., :50]
    getattr(ops, name)(out, x)
    assert buf[..., 50:].isnan().all(), "wrote outside out"
    _check(name, out, ref_elementwise(name, x), x)


def test_finite_and_saturating():
    x = torch.tensor([-3e38, -1e4, -88.0, -20.0, 0.0, 20.0, 88.0, 1e4, 3e38], device=DEVICE)
    for name in ELEMENTWISE:
        out = poisoned(x.shape, torch.float32)
        getattr(ops, name)(out, x)
        assert out.isfinite().all(), f"{name}: {out.tolist()}"
        assert_close(out[4:], x[4:].clamp(min=0), atol=1e-6, rtol=1e-6, name=name)  # x for x >> 0, 0 at 0
    xs = torch.stack([x, torch.ones_like(x)], -1).reshape(1, -1)  # gate, up pairs
    out = poisoned((1, x.numel()), torch.float32)
    ops.swigluoai_and_mul(out, xs)
    assert out.isfinite().all()


# ---- layers: vLLM's constructors; forward (the kernels) against forward_native -------------

LAYER_THRESHOLD = 0.375

LAYERS = [
    ("silu_and_mul", lambda: SiluAndMul(compile_native=False)),
    ("mul_and_silu", lambda: MulAndSilu()),
    ("gelu_and_mul", lambda: GeluAndMul(approximate="none")),
    ("gelu_tanh_and_mul", lambda: GeluAndMul(approximate="tanh")),
    # a threshold of every dtype: forward_native compares in the dtype (F.threshold rounds it),
    # vLLM's kernel (and ours) in fp32, so a gate equal to a rounded threshold would differ
    ("fatrelu_and_mul", lambda: FatreluAndMul(LAYER_THRESHOLD)),
    ("swigluoai_and_mul", lambda: SwigluOAIAndMul()),
    ("gelu_new", lambda: NewGELU()),
    ("gelu_fast", lambda: FastGELU()),
    ("gelu_quick", lambda: QuickGELU(enforce_enable=True)),
]


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("name,make", LAYERS, ids=[n for n, _ in LAYERS])
def test_layer(name, make, dtype):
    layer = make()
    gated = name not in ELEMENTWISE
    m, d = by_device((7, 512), (83, 13824))
    x = make_rows(m, 2 * d if gated else d, dtype, scale=3.0)
    with torch.inference_mode():
        got = layer(x)
        cuda = layer.forward_cuda(x)
        native = layer.forward_native(x)
    assert got.shape == native.shape and got.dtype == dtype
    assert torch.equal(got, cuda)
    params = (LAYER_THRESHOLD,) if name == "fatrelu_and_mul" else _params(name)
    want = ref_gated(name, x, *params) if gated else ref_elementwise(name, x)
    _check(name, got, want, x)
    if ON_GPU:  # vLLM's test: the kernels against forward_native, as vLLM's test compares them
        if name in EXACT and not (torch.version.hip and name == "gelu_tanh_and_mul"):
            assert_close(got, native, atol=0, rtol=0, name=name)
        elif name not in EXACT:
            rtol = (SWIGLUOAI_RTOL if name == "swigluoai_and_mul" else VLLM_RTOL)[dtype]
            extra = _cancelling(name, x)
            assert_close(got, native, atol=VLLM_ATOL[dtype] + (0 if extra is None else extra), rtol=rtol, name=name)
    else:  # forward_native rounds to nearest where the interpreter truncates: a few units apart
        assert_close(got, native, atol=8 * ULP[dtype] * (1 + float(x.float().abs().max())), rtol=8 * ULP[dtype],
                     name=name)


def test_layer_attributes_and_registration():
    from aiter_lite.vllm.model_executor.custom_op import CustomOp

    assert SwigluOAIAndMul().alpha == 1.702 and SwigluOAIAndMul().limit == 7.0
    assert "alpha=2.0, limit=3.0" in repr(SwigluOAIAndMul(2.0, 3.0))
    assert FatreluAndMul().threshold == 0.0 and "threshold=0.5" in repr(FatreluAndMul(threshold=0.5))
    assert GeluAndMul().approximate == "none" and "approximate='tanh'" in repr(GeluAndMul("tanh"))
    for reg, cls in [("silu_and_mul", SiluAndMul), ("mul_and_silu", MulAndSilu), ("gelu_and_mul", GeluAndMul),
                     ("fatrelu_and_mul", FatreluAndMul), ("swigluoai_and_mul", SwigluOAIAndMul),
                     ("gelu_new", NewGELU), ("gelu_fast", FastGELU), ("quick_gelu", QuickGELU)]:
        assert CustomOp.op_registry[reg] is cls
    with pytest.raises(ValueError, match="GeluAndMul: approximate must be one of"):
        GeluAndMul("erf")
    with pytest.raises(TypeError, match="SiluAndMul: compile_native must be a bool"):
        SiluAndMul(compile_native="yes")
    with pytest.raises(ValueError, match="SwigluOAIAndMul: limit must be finite"):
        SwigluOAIAndMul(limit=math.inf)


def test_layer_compile_native():
    x = make_rows(3, 2 * 16, torch.float32)
    layer = SiluAndMul(compile_native=True)
    torch._dynamo.reset()
    assert_close(layer._forward_native(x), SiluAndMul.forward_native(x))  # inductor's own exp


def test_layer_odd_width_refused():
    with pytest.raises(ValueError, match=r"^MulAndSilu: x last dim must be even"):
        MulAndSilu().forward_cuda(make_rows(2, 7))


# ---- bad input: a TypeError / ValueError naming the op and the argument ---------------------

def _x(m=4, n=16, dtype=torch.float32):
    return make_rows(m, n, dtype)


def _y(m=4, n=8, dtype=torch.float32):
    return torch.empty(m, n, device=DEVICE, dtype=dtype)


BAD = [
    ("odd last dim", lambda: ops.silu_and_mul(_y(4, 7), _x(4, 15)), ValueError,
     "silu_and_mul: input last dim must be even"),
    ("0-dim input", lambda: ops.mul_and_silu(_y(), torch.tensor(1.0, device=DEVICE)), ValueError,
     "mul_and_silu: input last dim must be even"),
    ("input not a tensor", lambda: ops.gelu_and_mul(_y(), [[1.0] * 16] * 4), TypeError,
     "gelu_and_mul: input must be a torch.Tensor"),
    ("int input", lambda: ops.gelu_tanh_and_mul(_y(), _x().int()), TypeError,
     "gelu_tanh_and_mul: input must be float32"),
    ("fp64 out", lambda: ops.silu_and_mul(_y().double(), _x()), TypeError, "silu_and_mul: out must be float32"),
    ("out wrong shape", lambda: ops.fatrelu_and_mul(_y(4, 9), _x()), ValueError,
     "fatrelu_and_mul: out must have shape (4, 8)"),
    ("out None", lambda: ops.swigluoai_and_mul(None, _x()), TypeError, "swigluoai_and_mul: out must be a torch.Tensor"),
    ("strided last dim", lambda: ops.silu_and_mul(_y(), _x(4, 32)[:, ::2]), ValueError,
     "silu_and_mul: input must have unit stride in its last dim"),
    ("threshold a string", lambda: ops.fatrelu_and_mul(_y(), _x(), "0.1"), TypeError,
     "fatrelu_and_mul: threshold must be a real number"),
    ("alpha a bool", lambda: ops.swigluoai_and_mul(_y(), _x(), True), TypeError,
     "swigluoai_and_mul: alpha must be a real number"),
    ("limit NaN", lambda: ops.swigluoai_and_mul(_y(), _x(), 1.702, float("nan")), ValueError,
     "swigluoai_and_mul: limit must be finite"),
    ("out over input", lambda: (lambda x: ops.silu_and_mul(x[:, :8], x))(_x()), ValueError,
     "silu_and_mul: out overlaps input"),
    ("elementwise out None", lambda: ops.gelu_new(None, _x()), TypeError, "gelu_new: out must be a torch.Tensor"),
    ("elementwise out shape", lambda: ops.gelu_fast(_y(4, 15), _x()), ValueError,
     "gelu_fast: out must have input's shape (4, 16)"),
    ("elementwise int", lambda: ops.gelu_quick(_y(), _y().int()), TypeError, "gelu_quick: input must be float32"),
    ("elementwise strided out", lambda: ops.gelu_quick(_x(4, 32)[:, ::2], _x()), ValueError,
     "gelu_quick: out must have unit stride"),
    ("elementwise device", lambda: ops.gelu_new(torch.empty(4, 16, device="meta"), _x()), ValueError,
     "gelu_new: out must be on input's device"),
]


@pytest.mark.parametrize("case,call,exc,match", BAD, ids=[c[0] for c in BAD])
def test_bad_input(case, call, exc, match):
    with pytest.raises(exc, match="^" + match.replace("(", r"\(").replace(")", r"\)")):
        call()


@pytest.mark.parametrize("name", GATED + ELEMENTWISE)
def test_requires_grad_refused(name):
    gated = name in GATED
    x = _x(4, 16).requires_grad_()
    out = _y(4, 8 if gated else 16)
    fn = getattr(ops, name)
    with pytest.raises(ValueError, match=rf"^{name}: input requires grad"):
        fn(out, x, *_params(name))
    with torch.no_grad():
        fn(out, x, *_params(name))
    assert not out.isnan().any()


def test_compiled_forms():
    backend = "inductor" if ON_GPU else "aot_eager"
    x = make_rows(6, 2 * 48, torch.bfloat16, scale=3.0)

    def block(x):
        a = torch.empty(6, 48, device=x.device, dtype=x.dtype)
        b = torch.empty_like(a)
        c = torch.empty_like(x)
        ops.silu_and_mul(a, x)
        ops.swigluoai_and_mul(b, x)
        ops.gelu_new(c, x)
        return a, b, c

    torch._dynamo.reset()
    compiled = torch.compile(block, backend=backend, fullgraph=True)
    with torch.inference_mode():
        for got, want in zip(compiled(x), block(x)):
            assert_close(got, want, atol=0, rtol=0)
