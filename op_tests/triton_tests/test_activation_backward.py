"""Gradients of the Triton activations (the backward kernel) against autograd through the
fp32 native reference: gated (``*_and_mul``, ``fused_silu_mul``) and elementwise, every
dtype, odd sizes, M = 0 and 1, strided rows, expanded gradients; the layers give the same
gradients on both backends."""

import pytest
import torch

from aiter_lite.layers import GeluAndMul, SiluAndMul
from aiter_lite.ops.native import activation as ref
from aiter_lite.ops.triton import activation as act
from op_tests.utils import DEVICE, DTYPES, assert_close, by_device, make_rows, poisoned
from op_tests.utils.inputs import poison_allocations

ACTIVATIONS = ("silu", "gelu", "gelu_tanh", "relu")
# (rows, d): the input row holds 2 * d
GATED_SHAPES = by_device(
    cpu=[(0, 64), (1, 1), (3, 7), (7, 127), (2, 4097)],
    gpu=[(0, 64), (1, 1), (3, 7), (7, 127), (1000, 4097), (1024, 14336), (3, 65537), (20000, 768)],
)
# (Triton op, its formula in the input's precision)
ELEMENTWISE = {"silu": (act.silu, ref.ACTIVATIONS["silu"]), "gelu": (act.gelu, ref.ACTIVATIONS["gelu"]),
               "relu": (act.relu, ref.ACTIVATIONS["relu"]),
               "gelu_tanh": (lambda x: act.gelu(x, "tanh"), ref.ACTIVATIONS["gelu_tanh"])}


@pytest.fixture(autouse=True)
def _poisoned_empty(monkeypatch):
    """The backward's allocations (x's gradient) start NaN: an element it does not write fails."""
    poison_allocations(monkeypatch)


def _reference_grad(fn, x: torch.Tensor, dy: torch.Tensor) -> torch.Tensor:
    """x's gradient by autograd through ``fn`` on fp32 copies; fp64 ones for an fp32 x: in fp32
    torch's tanh-form GELU gradient cancels (1 + tanh(u) for u << 0) where the kernel's
    sigmoid form does not, by up to 1.5e-5 absolute."""
    xr = x.detach().to(torch.float64 if x.dtype == torch.float32 else torch.float32).requires_grad_()
    fn(xr).backward(dy.to(xr.dtype))
    return xr.grad.float()


def _gated_ref(activation):
    """The native op's formula in the input's own precision (the native op computes in fp32)."""
    act_fn = ref.ACTIVATIONS[activation]
    return lambda x: act_fn(x[..., :x.shape[-1] // 2]) * x[..., x.shape[-1] // 2:]


@pytest.mark.parametrize("strided", [False, True], ids=["dense", "strided"])
@pytest.mark.parametrize("shape", GATED_SHAPES, ids=str)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("activation", ACTIVATIONS)
def test_gated_backward(activation, dtype, shape, strided):
    m, d = shape
    x = make_rows(m, 2 * d, dtype, strided=strided, scale=3.0).requires_grad_()
    dy = make_rows(m, d, dtype)
    out = poisoned((m, d), dtype)
    y = act.act_and_mul(out, x, activation)
    assert y is out and (m == 0 or y.grad_fn is not None)
    y.backward(dy)
    assert_close(x.grad, _reference_grad(_gated_ref(activation), x, dy), name=f"d{activation}_and_mul")


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_fused_silu_mul_backward_allocates_no_copy(dtype):
    """The allocating form returns the autograd node's own result (no copy into a buffer)."""
    x = make_rows(5, 2 * 300, dtype, lead=(2,)).requires_grad_()
    dy = make_rows(5, 300, dtype, lead=(2,))
    y = act.fused_silu_mul(x)
    assert type(y.grad_fn).__name__ == "_ActFunctionBackward"
    y.backward(dy)
    assert_close(x.grad, _reference_grad(_gated_ref("silu"), x, dy), name="dfused_silu_mul")
    with pytest.raises(RuntimeError):  # torch's own refusal: an out= result is not a leaf to write into twice
        act.fused_silu_mul(x, out=torch.empty(2, 5, 300, dtype=dtype, device=DEVICE, requires_grad=True))


def test_expanded_and_transposed_gradients():
    x = make_rows(6, 2 * 40, torch.float32).requires_grad_()
    dy = torch.randn(1, 40, device=DEVICE).expand(6, 40)  # a zero row stride
    act.fused_silu_mul(x).backward(dy)
    assert_close(x.grad, _reference_grad(_gated_ref("silu"), x, dy), name="expanded dy")
    x.grad = None
    dy = torch.randn(40, 6, device=DEVICE).t()  # no unit last stride
    act.silu(x).backward(torch.cat([dy, dy], -1))
    assert_close(x.grad, _reference_grad(ref.ACTIVATIONS["silu"], x, torch.cat([dy, dy], -1)), name="transposed dy")


@pytest.mark.parametrize("shape", by_device(cpu=[(0,), (1,), (7, 127), (3, 5000)],
                                            gpu=[(0,), (1,), (7, 127), (4096, 14336), (3, 65537)]), ids=str)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("name", list(ELEMENTWISE))
def test_elementwise_backward(name, dtype, shape):
    fn, fn_ref = ELEMENTWISE[name]
    x = (torch.randn(shape, device=DEVICE) * 3).to(dtype).requires_grad_()
    dy = torch.randn(shape, device=DEVICE).to(dtype)
    fn(x).backward(dy)
    assert_close(x.grad, _reference_grad(fn_ref, x, dy), name=f"d{name}")


@pytest.mark.parametrize("name", list(ELEMENTWISE))
def test_elementwise_backward_strided_rows(name):
    fn, fn_ref = ELEMENTWISE[name]
    x = make_rows(9, 333, torch.bfloat16, strided=True, scale=3.0).requires_grad_()
    dy = make_rows(9, 333, torch.bfloat16)
    fn(x).backward(dy)
    assert_close(x.grad, _reference_grad(fn_ref, x, dy), name=f"d{name} strided")


@pytest.mark.parametrize("activation", ["silu", "gelu", "gelu_tanh"])
def test_gradients_finite_for_large_inputs(activation):
    """act'(x) saturates without 0 * inf: finite wherever x is, equal to the reference
    where the reference is finite (torch's gelu_tanh backward is NaN once x^3 overflows)."""
    big = torch.tensor([-1e30, -1e4, -100.0, -30.0, 30.0, 100.0, 1e4, 1e30], device=DEVICE)
    x = torch.cat([big, big]).reshape(1, -1).requires_grad_()
    dy = torch.ones(1, big.numel(), device=DEVICE)
    act.act_and_mul(torch.empty_like(dy), x, activation).backward(dy)
    assert torch.isfinite(x.grad[:, :big.numel()]).all(), x.grad
    want = _reference_grad(_gated_ref(activation), x, dy)
    ok = torch.isfinite(want)
    assert_close(x.grad[ok], want[ok], name=f"d{activation} at large |x|")


def test_no_autograd_node_without_grad():
    """Under no_grad, or for inputs that need none, the forward is the serving path: no node."""
    x = make_rows(4, 64, torch.float32)
    assert act.fused_silu_mul(x).grad_fn is None
    with torch.no_grad():
        out = torch.empty(4, 32, device=DEVICE)
        assert act.silu_and_mul(out, x.requires_grad_()) is out and out.grad_fn is None
        assert act.silu(x).grad_fn is None


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("layer", [SiluAndMul, lambda backend: GeluAndMul("tanh", backend=backend)],
                         ids=["SiluAndMul", "GeluAndMul_tanh"])
def test_layer_gradients_equal_on_both_backends(layer, dtype):
    x = make_rows(7, 2 * 96, dtype, lead=(2,), scale=3.0)
    dy = make_rows(7, 96, dtype, lead=(2,))
    grads = []
    for backend in ("triton", "native"):
        xb = x.detach().clone().requires_grad_()
        layer(backend=backend)(xb).backward(dy)
        grads.append(xb.grad)
    assert_close(grads[0], grads[1], name=f"{dtype} layer gradient, triton vs native")


# act_mul: gate and up as two tensors (a Hugging Face MLP's gate_proj(x), up_proj(x))

ACT_MUL_SHAPES = by_device(cpu=[(0, 64), (1, 1), (3, 7), (2, 4097)],
                           gpu=[(0, 64), (1, 1), (3, 7), (1000, 4097), (1024, 14336), (20000, 768)])


@pytest.mark.parametrize("strided", [False, True], ids=["dense", "strided"])
@pytest.mark.parametrize("shape", ACT_MUL_SHAPES, ids=str)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("activation", ACTIVATIONS)
def test_act_mul_forward_and_backward(activation, dtype, shape, strided):
    m, d = shape
    gate = make_rows(m, d, dtype, strided=strided, scale=3.0).requires_grad_()
    up = make_rows(m, d, dtype, strided=not strided, lead=()).requires_grad_()
    dy = make_rows(m, d, dtype, strided=strided)
    y = act.act_mul(gate, up, activation)
    wide = torch.float64 if dtype == torch.float32 else torch.float32  # as _reference_grad
    gr, ur = gate.detach().to(wide).requires_grad_(), up.detach().to(wide).requires_grad_()
    yr = ref.ACTIVATIONS[activation](gr) * ur
    assert_close(y, yr.to(dtype), name=f"{activation}_mul")
    dgate, dup = torch.autograd.grad(y, (gate, up), dy)
    dgr, dur = torch.autograd.grad(yr, (gr, ur), dy.to(wide))
    assert_close(dgate, dgr.float(), name=f"d{activation}_mul/dgate")
    assert_close(dup, dur.float(), name=f"d{activation}_mul/dup")


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_act_mul_equals_the_merged_op(dtype):
    """act_mul(gate, up) is act_and_mul over the concatenated row, bit for bit, both ways."""
    gate, up = (make_rows(5, 300, dtype, lead=(2,)).requires_grad_() for _ in range(2))
    merged = torch.cat([gate.detach(), up.detach()], -1).requires_grad_()
    dy = make_rows(5, 300, dtype, lead=(2,))
    y = act.act_mul(gate, up, "gelu_tanh")
    ym = act.act_and_mul(poisoned((2, 5, 300), dtype), merged, "gelu_tanh")
    assert torch.equal(y, ym)
    y.backward(dy)
    ym.backward(dy)
    assert torch.equal(torch.cat([gate.grad, up.grad], -1), merged.grad)


def test_act_mul_only_one_input_requires_grad():
    gate, up = make_rows(4, 33), make_rows(4, 33).requires_grad_()
    dy = make_rows(4, 33)
    y = act.act_mul(gate, up)
    (dup,) = torch.autograd.grad(y, (up,), dy)
    assert_close(dup, dy * torch.nn.functional.silu(gate), name="dup")
    with torch.no_grad():
        assert act.act_mul(gate, up).grad_fn is None


def test_act_mul_refuses_bad_inputs():
    g = make_rows(4, 8)
    with pytest.raises(ValueError, match=r"^act_mul: up must have gate's shape \(4, 8\), got \(4, 9\)"):
        act.act_mul(g, make_rows(4, 9))
    with pytest.raises(TypeError, match=r"^act_mul: up must have gate's dtype torch.float32, got torch.float16"):
        act.act_mul(g, make_rows(4, 8, torch.float16))
    with pytest.raises(ValueError, match=r"^act_mul: activation must be one of"):
        act.act_mul(g, make_rows(4, 8), "tanh")
    with pytest.raises(ValueError, match=r"^act_mul: gate must have unit stride"):
        act.act_mul(make_rows(4, 16)[:, ::2], make_rows(4, 8))
