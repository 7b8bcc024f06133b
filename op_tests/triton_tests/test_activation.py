"""aiter_lite.ops.triton.activation against the fp32 native reference."""

import inspect

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

import aiter_lite.utils.checks as checks
from aiter_lite.ops.native import activation as ref
from aiter_lite.ops.triton import activation as act
from aiter_lite.ops.triton.activation import ActLaunchConfig
from op_tests.utils import DEVICE, DTYPES, ON_GPU, assert_close, by_device, make_rows, poisoned

GATED = {"silu": act.silu_and_mul, "gelu": act.gelu_and_mul, "gelu_tanh": act.gelu_tanh_and_mul}

# (rows, d): d is the output width, the input row holds 2 * d. Odd widths come
# from tensor-parallel sharding; M=0 and M=1 are the empty batch and decode.
GATED_SHAPES = by_device(
    cpu=[(0, 64), (1, 1), (1, 1000), (3, 7), (7, 127), (33, 64), (5, 4097), (2, 5120), (4, 1024)],
    gpu=[(0, 64), (1, 1), (1, 14336), (3, 7), (7, 127), (33, 64), (1000, 4097), (64, 14336),
         (4096, 14336), (513, 28672), (2, 65536), (3, 65537), (20000, 768)],
)


def _run_gated(activation, x, out_dtype=None):
    out = poisoned((*x.shape[:-1], x.shape[-1] // 2), out_dtype or x.dtype)
    result = GATED[activation](out, x)
    assert result is out
    expected = ref.act_and_mul(torch.empty_like(out), x, activation)
    assert_close(out, expected, name=f"{activation}_and_mul{tuple(x.shape)}")
    return out


@pytest.mark.parametrize("shape", GATED_SHAPES, ids=str)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("activation", list(GATED))
def test_gated(activation, dtype, shape):
    m, d = shape
    _run_gated(activation, make_rows(m, 2 * d, dtype))


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("activation", list(GATED))
def test_gated_strided_rows(activation, dtype):
    # x[:, :2d] of a wider tensor: the row stride is not 2d.
    x = make_rows(by_device(37, 1025), 2 * by_device(300, 4099), dtype, strided=True)
    assert not x.is_contiguous()
    _run_gated(activation, x)


@pytest.mark.parametrize("lead", [(), (2,), (2, 3)], ids=str)
def test_gated_any_rank(lead):
    x = make_rows(5, 2 * 96, torch.bfloat16, lead=lead)
    _run_gated("silu", x)
    _run_gated("silu", x[..., 0, :])  # drops a dim; rank 1 when lead == ()


def test_gated_non_collapsible_leading_dims():
    # Every other row of a 3-D tensor: no single row stride, gathered by reshape.
    x = make_rows(6, 2 * 40, torch.float16, lead=(3,))[:, ::2, :]
    _run_gated("gelu_tanh", x)


@pytest.mark.parametrize("in_dtype,out_dtype", [(torch.float32, torch.bfloat16), (torch.bfloat16, torch.float32)],
                         ids=str)
def test_gated_out_dtype_follows_out(in_dtype, out_dtype):
    _run_gated("silu", make_rows(9, 2 * 130, in_dtype), out_dtype)


def test_gated_writes_only_out_and_leaves_input():
    x = make_rows(17, 2 * 200, torch.bfloat16, strided=True)
    before = x.clone()
    buf = poisoned((17, 260), torch.bfloat16)
    out = buf[:, :200]
    act.silu_and_mul(out, x)
    assert torch.equal(x, before), "input was modified"
    assert buf[:, 200:].isnan().all(), "wrote outside out"
    assert_close(out, ref.act_and_mul(torch.empty_like(out), x, "silu"))


def test_gated_out_over_gate_half_refused():
    # out over the gate half partly overlaps input: refused, as torch refuses such an out.
    x = make_rows(11, 2 * 300, torch.float32)
    with pytest.raises(ValueError, match=r"^silu_and_mul: out overlaps input"):
        act.silu_and_mul(x[:, :300], x)


def test_gated_nan_stays_in_its_row():
    x = make_rows(4, 2 * 64, torch.float32)
    x[2, 5] = float("nan")
    out = _run_gated("gelu", x)
    assert out[2, 5].isnan() and out.isnan().sum() == 1


@settings(max_examples=by_device(25, 60), deadline=None)
@given(
    m=st.integers(1, 40),
    d=st.integers(1, 300),
    block_m=st.sampled_from([1, 2, 8]),
    block_n=st.sampled_from([16, 64, 256]),
    activation=st.sampled_from(list(GATED)),
)
def test_gated_any_tile(m, d, block_m, block_n, activation):
    # Pinned launch configs: partial tiles in both dims, rows and columns masked.
    x = make_rows(m, 2 * d, torch.float32)
    out = poisoned((m, d), torch.float32)
    act.act_and_mul(out, x, activation, config=ActLaunchConfig(block_m, block_n, 4))
    assert_close(out, ref.act_and_mul(torch.empty_like(out), x, activation))


def test_gated_row_blocks_past_grid_limit(monkeypatch):
    # Grid axis 1 stops at 65535 row blocks; programs then stride over the rest.
    if ON_GPU:
        m = 140_001  # 140001 one-row blocks: three strides on the real limit
    else:
        monkeypatch.setattr(act, "_MAX_GRID_Y", 3)
        m = 11
    x = make_rows(m, 2 * 8, torch.bfloat16)
    out = poisoned((m, 8), torch.bfloat16)
    act.act_and_mul(out, x, "silu", config=ActLaunchConfig(1, 8, 1))
    assert_close(out, ref.gated(x, "silu"))


@pytest.mark.skipif(not ON_GPU, reason="needs > 2^31 elements of device memory")
def test_gated_past_int32_offsets():
    # 66000 x 2 x 16384 bf16 input: 2.16e9 elements, offsets past 2^31 in the last rows.
    m, d = 66000, 16384
    x = torch.randn(m, 2 * d, device=DEVICE, dtype=torch.bfloat16)
    out = torch.full((m, d), float("nan"), device=DEVICE, dtype=torch.bfloat16)
    act.silu_and_mul(out, x)
    assert not out.isnan().any()
    for rows in (slice(0, 4), slice(m - 4, m)):
        assert_close(out[rows], ref.gated(x[rows], "silu"))


def test_fused_silu_mul():
    x = make_rows(2, 2 * 50, torch.bfloat16, lead=(3,))
    y = act.fused_silu_mul(x)
    assert y.shape == (3, 2, 50) and y.dtype == torch.bfloat16
    assert_close(y, ref.gated(x, "silu"))
    out = poisoned((3, 2, 50), torch.bfloat16)
    assert act.fused_silu_mul(x, out) is out
    assert_close(out, y)


ELEMENTWISE = {
    "silu": (act.silu, ref.silu),
    "gelu": (act.gelu, ref.gelu),
    "gelu_tanh": (lambda x: act.gelu(x, approximate="tanh"), lambda x: ref.gelu(x, approximate="tanh")),
    "relu": (act.relu, ref.relu),
}
ELEMENTWISE_SHAPES = by_device(
    cpu=[(), (0,), (1,), (7,), (3, 127), (2, 3, 1000), (4097,)],
    gpu=[(), (0,), (1,), (7,), (3, 127), (2, 3, 1000), (4097,), (1000, 4096), (3, 5, 65537)],
)


@pytest.mark.parametrize("shape", ELEMENTWISE_SHAPES, ids=str)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("name", list(ELEMENTWISE))
def test_elementwise(name, dtype, shape):
    fn, ref_fn = ELEMENTWISE[name]
    x = (torch.randn(shape, device=DEVICE) * 3).to(dtype)
    y = fn(x)
    assert y.shape == x.shape and y.dtype == dtype
    assert_close(y, ref_fn(x), name=f"{name}{shape}")


@pytest.mark.parametrize("name", list(ELEMENTWISE))
def test_elementwise_strided_rows(name):
    fn, ref_fn = ELEMENTWISE[name]
    x = make_rows(3, 50, torch.bfloat16, strided=True, lead=(2,), scale=3)
    assert_close(fn(x), ref_fn(x))


@pytest.mark.parametrize("name", ["silu", "gelu_tanh", "gelu"])
def test_finite_for_large_inputs(name):
    # gelu_tanh is written without tanh: no inf/inf for |x| up to 1e4 and beyond.
    fn, ref_fn = ELEMENTWISE[name]
    x = torch.cat([torch.linspace(-1e4, 1e4, 2001), torch.tensor([-3e38, -1e13, -88.0, 88.0, 1e13, 3e38])])
    x = x.to(DEVICE)
    y = fn(x)
    assert y.isfinite().all(), f"{name}: non-finite at {x[~y.isfinite()].tolist()}"
    assert_close(y, ref_fn(x))
    gated = poisoned((1, x.numel()), torch.float32)
    act.act_and_mul(gated, torch.cat([x, torch.ones_like(x)])[None], name)
    assert gated.isfinite().all()


def test_nan_propagates_elementwise():
    x = torch.tensor([float("nan"), -1.0, 2.0], device=DEVICE)
    for name, (fn, _) in ELEMENTWISE.items():
        y = fn(x)
        assert y[0].isnan() and y[1:].isfinite().all(), name


# ---- bad input: a TypeError / ValueError naming the argument ----------------------------------

def assert_each_tensor_refused_on_meta(op, *args, **kwargs):
    """``op(*args, **kwargs)`` with each tensor argument in turn on the meta device (Triton
    launches on none): a ValueError from the public op naming that argument, as the caller
    named it (on the meta device, or not on the device of one that was checked)."""
    names = list(inspect.signature(op).parameters)
    slots = [(i, names[i]) for i, a in enumerate(args) if isinstance(a, torch.Tensor)]
    slots += [(k, k) for k, a in kwargs.items() if isinstance(a, torch.Tensor)]
    assert slots
    for key, name in slots:
        a, kw = list(args), dict(kwargs)
        where = a if isinstance(key, int) else kw
        where[key] = torch.empty(where[key].shape, dtype=where[key].dtype, device="meta")
        with pytest.raises(ValueError, match=rf"^{op.__name__}: {name} (is on the meta device|must be on )"):
            op(*a, **kw)


def _x(m=4, n=16, dtype=torch.float32):
    return make_rows(m, n, dtype)


BAD_GATED = [
    ("input not a tensor", lambda: act.silu_and_mul(_x(4, 8), [[1.0] * 16] * 4), TypeError, "input must be a torch.Tensor"),
    ("int input", lambda: act.silu_and_mul(_x(4, 8), _x().to(torch.int32)), TypeError, "input must be float32"),
    ("fp64 input", lambda: act.gelu_and_mul(_x(4, 8), _x().double()), TypeError, "input must be float32"),
    ("int out", lambda: act.silu_and_mul(_x(4, 8).to(torch.int64), _x()), TypeError, "out must be float32"),
    ("odd last dim", lambda: act.silu_and_mul(_x(4, 7), _x(4, 15)), ValueError, "last dim must be even"),
    ("0-dim input", lambda: act.silu_and_mul(_x(4, 8), torch.tensor(1.0, device=DEVICE)), ValueError, "even"),
    ("out wrong width", lambda: act.silu_and_mul(_x(4, 16), _x()), ValueError, "out must have shape (4, 8)"),
    ("out wrong rows", lambda: act.gelu_tanh_and_mul(_x(5, 8), _x()), ValueError, "out must have shape (4, 8)"),
    ("out other device", lambda: act.silu_and_mul(torch.empty(4, 8, device="meta"), _x()), ValueError,
     "out must be on input's device"),
    ("strided last dim", lambda: act.silu_and_mul(_x(4, 8), _x(4, 32)[:, ::2]), ValueError,
     "input must have unit stride in its last dim"),
    ("transposed input", lambda: act.silu_and_mul(_x(16, 2), _x(4, 16).t()), ValueError, "unit stride"),
    ("strided out", lambda: act.silu_and_mul(_x(4, 16)[:, ::2], _x()), ValueError, "out must have unit stride"),
    ("out not rows", lambda: act.silu_and_mul(_x(8, 6).view(2, 4, 6)[:, :2, :4], _x(4, 8).view(2, 2, 8)), ValueError, "out with shape"),
    ("unknown activation", lambda: act.act_and_mul(_x(4, 8), _x(), "swish"), ValueError, "activation must be one of"),
    ("fused odd", lambda: act.fused_silu_mul(_x(4, 9)), ValueError, "last dim must be even"),
]


@pytest.mark.parametrize("case,call,exc,match", BAD_GATED, ids=[c[0] for c in BAD_GATED])
def test_gated_bad_input(case, call, exc, match):
    with pytest.raises(exc, match=match.replace("(", r"\(").replace(")", r"\)")):
        call()


BAD_ELEMENTWISE = [
    ("not a tensor", lambda: act.silu([1.0, 2.0]), TypeError, "x must be a torch.Tensor"),
    ("int", lambda: act.relu(_x().to(torch.int32)), TypeError, "x must be float32"),
    ("strided last dim", lambda: act.gelu(_x(4, 32)[:, ::2]), ValueError, "x must have unit stride"),
    ("approximate", lambda: act.gelu(_x(), approximate="erf"), ValueError, "approximate must be one of 'none', 'tanh'"),
]


@pytest.mark.parametrize("case,call,exc,match", BAD_ELEMENTWISE, ids=[c[0] for c in BAD_ELEMENTWISE])
def test_elementwise_bad_input(case, call, exc, match):
    with pytest.raises(exc, match=match):
        call()


def test_meta_tensors_refused():
    """Every op, every tensor argument: refused by the public op before Triton sees it."""
    x, out = _x(), torch.empty(4, 8, device=DEVICE)
    for op in (act.silu_and_mul, act.gelu_and_mul, act.gelu_tanh_and_mul):
        assert_each_tensor_refused_on_meta(op, out, x)
    assert_each_tensor_refused_on_meta(act.act_and_mul, out, x, "silu")
    assert_each_tensor_refused_on_meta(act.fused_silu_mul, x)
    assert_each_tensor_refused_on_meta(act.fused_silu_mul, x, out=out)
    for op in (act.silu, act.relu):
        assert_each_tensor_refused_on_meta(op, x)
    assert_each_tensor_refused_on_meta(act.gelu, x, "tanh")


def test_fused_silu_mul_names_its_arguments():
    """fused_silu_mul's errors under its own name and its caller's names (x, out)."""
    with pytest.raises(TypeError, match=r"^fused_silu_mul: x must be a torch.Tensor"):
        act.fused_silu_mul([1.0, 2.0])
    with pytest.raises(ValueError, match=r"^fused_silu_mul: x last dim must be even"):
        act.fused_silu_mul(_x(4, 7))
    with pytest.raises(ValueError, match=r"^fused_silu_mul: out must have shape \(4, 8\) for x \(4, 16\)"):
        act.fused_silu_mul(_x(), out=torch.empty(4, 7, device=DEVICE))
    with pytest.raises(TypeError, match=r"^fused_silu_mul: out must be float32"):
        act.fused_silu_mul(_x(), out=torch.empty(4, 8, device=DEVICE, dtype=torch.int32))
    with pytest.raises(ValueError, match=r"^fused_silu_mul: out must have unit stride"):
        act.fused_silu_mul(_x(), out=torch.empty(4, 16, device=DEVICE)[:, ::2])


def test_cpu_tensor_without_interpreter(monkeypatch):
    monkeypatch.setattr(checks, "LAUNCH_DEVICES", {"cuda"})  # as without the interpreter
    x = torch.randn(4, 16)
    with pytest.raises(ValueError, match="input is on the CPU; the Triton backend needs a GPU tensor"):
        act.silu_and_mul(torch.empty(4, 8), x)
    with pytest.raises(ValueError, match="x is on the CPU"):
        act.silu(x)


# torch.compile(fullgraph=True): the launches are a registered custom op.
COMPILE_BACKEND = "inductor" if ON_GPU else "aot_eager"


@pytest.mark.parametrize("gated", [True, False])
def test_opcheck_act_launch(gated):
    from torch.library import opcheck

    x = make_rows(5, 64, torch.float32)
    y = torch.empty(5, 32 if gated else 64, device=DEVICE)
    opcheck(torch.ops.aiter_lite.launch_act_and_mul, (x, y, "silu", gated))


def test_compiled_activations():
    x = make_rows(6, 2 * 48, torch.bfloat16, lead=(2,))

    def block(x):
        h = act.fused_silu_mul(x)
        out = torch.empty_like(h)
        act.gelu_tanh_and_mul(out, torch.cat([h, h], -1))
        return h, out, act.relu(out[0, :, :24]), act.gelu(h[..., :40])  # strided rows too

    torch._dynamo.reset()
    compiled = torch.compile(block, backend=COMPILE_BACKEND, fullgraph=True)
    for got, want in zip(compiled(x), block(x)):
        assert_close(got, want, atol=0, rtol=0)


# ---- forward-only forms (vLLM's activation ops): against the native references -------------

TRUNCATES_BF16 = not ON_GPU  # the interpreter's fp32 -> bf16 conversion truncates


def _units(dtype, x=None):
    """(atol, rtol) of about two units of the dtype; gelu_new / gelu_fast round tanh's value
    to the dtype, where one unit becomes half |x| units of the result (1 + t cancels)."""
    u = {torch.float32: 1e-5, torch.float16: 2.0 ** -10, torch.bfloat16: 2.0 ** -7 if TRUNCATES_BF16 else 2.0 ** -8}
    scale = 1.0 + (float(x.float().abs().max()) if x is not None and x.numel() else 0.0)
    return 2 * u[dtype] * scale, 2 * u[dtype]


FORWARD_GATED = {
    "act_and_mul_rounded silu": (lambda o, x: act.act_and_mul_rounded(o, x, "silu"),
                                 lambda o, x: ref.act_and_mul_rounded(o, x, "silu")),
    "act_and_mul_rounded gelu_tanh, act second": (lambda o, x: act.act_and_mul_rounded(o, x, "gelu_tanh", False),
                                                 lambda o, x: ref.act_and_mul_rounded(o, x, "gelu_tanh", False)),
    "act_and_mul_rounded gelu": (lambda o, x: act.act_and_mul_rounded(o, x, "gelu"),
                                 lambda o, x: ref.act_and_mul_rounded(o, x, "gelu")),
    "fatrelu_and_mul": (lambda o, x: act.fatrelu_and_mul(o, x, 0.3), lambda o, x: ref.fatrelu_and_mul(o, x, 0.3)),
    "swigluoai_and_mul": (act.swigluoai_and_mul, ref.swigluoai_and_mul),
    "swigluoai_and_mul small limit": (lambda o, x: act.swigluoai_and_mul(o, x, 1.0, 0.5),
                                      lambda o, x: ref.swigluoai_and_mul(o, x, 1.0, 0.5)),
}


@pytest.mark.parametrize("shape", by_device(cpu=[(0, 8), (1, 1), (3, 7), (7, 127), (5, 4097)],
                                            gpu=[(0, 8), (1, 1), (7, 127), (1000, 4097), (4096, 14336)]), ids=str)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("name", list(FORWARD_GATED))
def test_forward_only_gated(name, dtype, shape):
    fn, ref_fn = FORWARD_GATED[name]
    m, d = shape
    x = make_rows(m, 2 * d, dtype, scale=3.0, strided=m > 3)
    out = poisoned((m, d), dtype)
    assert fn(out, x) is out
    atol, rtol = _units(dtype)
    assert_close(out, ref_fn(torch.empty_like(out), x), atol=atol, rtol=rtol, name=name)


@pytest.mark.parametrize("shape", [(0, 4), (1,), (3, 127), (2, 3, 1000)], ids=str)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("name", ["gelu_new", "gelu_fast", "gelu_quick"])
def test_forward_only_elementwise(name, dtype, shape):
    x = (torch.randn(shape, device=DEVICE) * 3).to(dtype)
    y = getattr(act, name)(x)
    assert y.shape == x.shape and y.dtype == dtype
    atol, rtol = _units(dtype, x)
    assert_close(y, getattr(ref, name)(x), atol=atol, rtol=rtol, name=name)
    xs = make_rows(3, 50, dtype, strided=True, lead=(2,), scale=3)
    atol, rtol = _units(dtype, xs)
    assert_close(getattr(act, name)(xs), getattr(ref, name)(xs), atol=atol, rtol=rtol, name=f"{name} strided")


def _every_value(dtype):
    """Every bit pattern of a 16-bit dtype, NaNs and infinities included."""
    return torch.arange(65536, dtype=torch.int32, device=DEVICE).to(torch.int16).view(dtype)


def _same_values(got, want, what):
    """Equal value for value, -0 apart from 0, any NaN equal to any NaN (on the CPU within
    two units: the interpreter's numpy exp, flushed subnormals and truncating bf16)."""
    if not ON_GPU:
        atol, rtol = _units(got.dtype)
        assert_close(got, want, atol=atol, rtol=rtol, name=what)
        return
    got, want = got.float(), want.float()
    same = (got == want) & (torch.signbit(got) == torch.signbit(want)) | got.isnan() & want.isnan()
    bad = (~same).nonzero().flatten()[:4].tolist()
    assert not bad, f"{what}: {int((~same).sum())} values differ, e.g. " + \
        ", ".join(f"{got[i].item()!r} (want {want[i].item()!r})" for i in bad)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=str)
def test_rounded_silu_and_quick_gelu_every_value(dtype):
    """Every value of the dtype, bit for bit against torch's own ops: silu rounded to the
    dtype before the multiply (silu_and_mul / mul_and_silu's rounded form), quick GELU as
    vLLM computes it (x / (1 + expf(-1.702 x)), one rounding). On an NVIDIA GPU the
    kernels take ex2.approx, div.full (bf16) or a reciprocal (fp16) and patch the inputs
    where those round apart (``_silu_rounded``): this proves the result torch's for every
    value, and would catch a patch list that missed one. The interpreter's math is
    numpy's: there, within two units."""
    v = _every_value(dtype)
    ones = torch.ones_like(v)
    silu = F.silu(v)
    for act_first in (True, False):
        x = torch.stack([v, ones] if act_first else [ones, v], 1)
        out = poisoned((v.numel(), 1), dtype)
        act.act_and_mul_rounded(out, x, "silu", act_first)
        _same_values(out[:, 0], silu, f"silu rounded, act_first={act_first}")
    f = v.float()
    _same_values(act.gelu_quick(v), (f / (1 + torch.exp(-1.702 * f))).to(dtype), "gelu_quick")


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=str)
def test_gelu_new_and_fast_every_value(dtype):
    """Every value of the dtype, bit for bit against vLLM's kernels written as torch ops on the
    dtype (each op rounds where vLLM's operations on T round; tanh is tanhf of a T value,
    rounded). On a GPU the kernels' tanh is not tanhf (``_tanh_rounded``): this proves it
    rounds the same for every input."""
    x = _every_value(dtype)
    f = x.float()
    x3 = x * x * x
    t = torch.tanh((0.79788456 * (x + (0.044715 * x3.float()).to(dtype)).float()).to(dtype))
    _same_values(act.gelu_new(x), (0.5 * x) * (1 + t), "gelu_new")
    t = torch.tanh((f * 0.79788456).to(dtype) * (1 + (0.044715 * f).to(dtype) * x))
    _same_values(act.gelu_fast(x), (0.5 * x) * (1 + t), "gelu_fast")


def test_forward_only_refuse_grad_and_bad_input():
    x = _x().requires_grad_()
    with pytest.raises(ValueError, match=r"^fatrelu_and_mul: input requires grad, but fatrelu_and_mul has no "
                                         r"gradient"):
        act.fatrelu_and_mul(_x(4, 8), x)
    with pytest.raises(ValueError, match=r"^gelu_new: x requires grad"):
        act.gelu_new(x)
    with pytest.raises(ValueError, match=r"^act_and_mul_rounded: activation must be one of"):
        act.act_and_mul_rounded(_x(4, 8), _x(), "swish")
    with pytest.raises(TypeError, match=r"^act_and_mul_rounded: act_first must be a bool"):
        act.act_and_mul_rounded(_x(4, 8), _x(), "silu", "no")
    with pytest.raises(ValueError, match=r"^swigluoai_and_mul: input last dim must be even"):
        act.swigluoai_and_mul(_x(4, 8), _x(4, 17))
    with pytest.raises(TypeError, match=r"^fatrelu_and_mul: threshold must be a real number"):
        act.fatrelu_and_mul(_x(4, 8), _x(), None)
    with pytest.raises(TypeError, match=r"^gelu_quick: x must be float32"):
        act.gelu_quick(_x().int())
    out = torch.empty(4, 8, device=DEVICE)
    assert_each_tensor_refused_on_meta(act.swigluoai_and_mul, out, _x())
    assert_each_tensor_refused_on_meta(act.act_and_mul_rounded, out, _x(), "gelu")
    assert_each_tensor_refused_on_meta(act.gelu_fast, _x())


def test_forward_only_any_tile():
    # Pinned tiles: partial in both dims, the interleaved split included.
    from aiter_lite.ops.triton.activation import _launch_act_ex

    x = make_rows(11, 2 * 77, torch.float32, scale=4.0)
    for cfg in (ActLaunchConfig(1, 16, 1), ActLaunchConfig(4, 64, 4), ActLaunchConfig(8, 256, 4)):
        out = poisoned((11, 77), torch.float32)
        _launch_act_ex(x, None, out, "swish", True, 1.702, 7.0, True, True, False, config=cfg)
        assert_close(out, ref.swigluoai_and_mul(torch.empty_like(out), x))
        out = poisoned((11, 77), torch.float32)
        _launch_act_ex(x[:, 77:], x[:, :77], out, "silu", True, 0.0, 0.0, False, False, True, config=cfg)
        assert_close(out, ref.act_and_mul_rounded(torch.empty_like(out), x, "silu", False))
