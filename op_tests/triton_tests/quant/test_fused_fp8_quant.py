"""aiter's fused_fp8_quant forms (aiter_lite.ops.triton.quant.fused_fp8_quant) against the
fp32 native reference: RMSNorm of inp1 (after res1) quantized per group or by a static
scale, the second input's norm, the unquantized and residual outputs, aiter's transposed
scale layouts; every input dtype and quantized dtype, odd widths, M = 0 and 1, strided
rows, the widest rows; NaN kept to its row; bad arguments raise naming the op and the
argument; the call compiles whole. Outputs are allocated NaN (an unwritten element fails).

The norm is fp32 in both; the quantized codes may differ by one step where the row sum's
order moves a value across a rounding boundary, the unquantized outputs by the dtype's
last bit (the interpreter truncates to bf16)."""

import pytest
import torch

from aiter_lite.ops.native.quant import fused_fp8_quant as native
from aiter_lite.ops.triton.quant import fused_fp8_quant as tri
from op_tests.triton_tests.quant.test_quant import (  # noqa: F401 (_storable: autouse)
    Q_DTYPES,
    _assert_codes,
    _storable,
)
from op_tests.utils import DEVICE, DTYPES, ON_GPU, assert_close, by_device, make_rows
from op_tests.utils.inputs import poison_allocations

# (rows, inp1 width, inp2 width): DeepSeek-V3's q_a / kv_a (1536, 512) and hidden (7168) on the GPU
SHAPES = by_device(cpu=[(0, 64, 16), (1, 1, 1), (5, 127, 33), (9, 300, 72), (3, 1076, 512)],
                   gpu=[(0, 64, 16), (1, 1, 1), (5, 127, 33), (9, 300, 72), (64, 1536, 512), (1024, 7168, 512),
                        (7, 16384, 16384)])
COMPILE_BACKEND = "inductor" if ON_GPU else "aot_eager"


@pytest.fixture(autouse=True)
def _poisoned_empty(monkeypatch):
    poison_allocations(monkeypatch)


def _inputs(m, n1, n2, dtype, strided=False):
    x1 = make_rows(m, n1, dtype, strided=strided, scale=3.0)
    x2 = make_rows(m, n2, dtype, strided=strided)
    r1 = make_rows(m, n1, dtype, strided=strided)
    w1 = (torch.rand(n1, device=DEVICE) + 0.5).to(dtype)
    w2 = (torch.rand(n2, device=DEVICE) + 0.5).to(dtype)
    return x1, w1, x2, w2, r1


def _assert_outputs(got, want, dtype, name):
    for i, (g, w) in enumerate(zip(got, want)):
        assert (g is None) == (w is None), f"{name}: output {i} is {'None' if g is None else 'given'}"
        if g is not None:
            assert g.dtype == w.dtype and g.shape == w.shape, f"{name}: output {i}"
            assert_close(g, w, dtype=dtype, name=f"{name}: output {i}")


def _assert_group(got, want, dtype, name):
    (q, s), *rest = got
    (q_ref, s_ref), *rest_ref = want
    assert s.shape == s_ref.shape and (s.stride() == s_ref.stride() or not s.numel()), \
        f"{name}: scale strides {s.stride()}, aiter's {s_ref.stride()}"
    assert_close(s, s_ref, atol=0.0, rtol=1e-5, name=f"{name}: scales")
    _assert_codes(q, q_ref, f"{name}: codes")
    _assert_outputs(rest, rest_ref, dtype, name)


# every quantized dtype plainly; the options with e4m3fn (and int8 with everything)
QDTYPE_OPTIONS = ([(q, "plain") for q in Q_DTYPES]
                  + [(torch.float8_e4m3fn, o) for o in ("res1, unquantized, inp2", "transposed", "transposed, strided")]
                  + [(torch.int8, "res1, unquantized, inp2")])


@pytest.mark.parametrize("qdtype, options", QDTYPE_OPTIONS, ids=lambda v: str(v).replace("torch.", ""))
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("m, n1, n2", SHAPES)
def test_group_quant_matches_native(m, n1, n2, dtype, qdtype, options):
    x1, w1, x2, w2, r1 = _inputs(m, n1, n2, dtype)
    kw = dict(group_size=128 if n1 > 128 else 32, dtype_quant=qdtype)
    if options == "res1, unquantized, inp2":
        kw.update(inp2=x2, inp2_weight=w2, inp2_epsilon=1e-5, res1=r1, output_unquantized_inp1=True)
    elif options.startswith("transposed"):
        kw.update(transpose_scale=True, is_x_scale_strided=options.endswith("strided"))
    got = tri.fused_rms_fp8_group_quant(x1, w1, 1e-6, **kw)
    want = native.fused_rms_fp8_group_quant(x1, w1, 1e-6, **kw)
    _assert_group(got, want, dtype, f"{m}x{n1} {options}")


@pytest.mark.parametrize("qdtype, round_norm",
                         [(q, False) for q in Q_DTYPES] + [(torch.float8_e4m3fn, True), (torch.int8, True)],
                         ids=lambda v: str(v).replace("torch.", ""))
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("m, n1, n2", SHAPES[:4])
def test_static_quant_matches_native(m, n1, n2, dtype, qdtype, round_norm):
    x1, w1, x2, w2, r1 = _inputs(m, n1, n2, dtype)
    scale = torch.rand(1, device=DEVICE) * 0.02 + 0.005
    args = (x1, w1, 1e-6, scale, x2, w2, 1e-5, qdtype, r1, True, round_norm)
    got, want = tri.fused_rms_fp8_per_tensor_static_quant(*args), native.fused_rms_fp8_per_tensor_static_quant(*args)
    _assert_codes(got[0], want[0], f"{m}x{n1} static")
    _assert_outputs(got[1:], want[1:], dtype, f"{m}x{n1} static")


def test_strided_rows_and_inputs_untouched():
    """Rows of a wider tensor (inp1, res1, inp2); nothing the caller passed is modified."""
    x1, w1, x2, w2, r1 = _inputs(6, 200, 40, torch.bfloat16, strided=True)
    before = [t.clone() for t in (x1, w1, x2, w2, r1)]
    kw = dict(inp2=x2, inp2_weight=w2, inp2_epsilon=1e-5, group_size=64, res1=r1, output_unquantized_inp1=True)
    _assert_group(tri.fused_rms_fp8_group_quant(x1, w1, 1e-6, **kw),
                  native.fused_rms_fp8_group_quant(x1, w1, 1e-6, **kw), torch.bfloat16, "strided")
    for t, b in zip((x1, w1, x2, w2, r1), before):
        assert torch.equal(t, b)


def test_nan_stays_in_its_row():
    """A NaN in a row makes that row's norm, codes and scales NaN; other rows are bit for bit
    what they are without it."""
    x1, w1, *_ = _inputs(4, 256, 8, torch.float32)
    (q0, s0), *_ = tri.fused_rms_fp8_group_quant(x1, w1, 1e-6, group_size=64)
    xb = x1.clone()
    xb[2, 100] = float("nan")
    (q1, s1), *_ = tri.fused_rms_fp8_group_quant(xb, w1, 1e-6, group_size=64)
    assert s1[2].isnan().all() and q1[2].float().isnan().all()
    keep = [0, 1, 3]
    assert torch.equal(s1[keep], s0[keep]) and torch.equal(q1[keep].view(torch.uint8), q0[keep].view(torch.uint8))


def test_gemm_out_zero_init_and_fp8_bounds():
    x1, w1, *_ = _inputs(3, 128, 8, torch.bfloat16)
    buf = torch.randn(5, 7, device=DEVICE)
    tri.fused_rms_fp8_group_quant(x1, w1, 1e-6, gemm_out_zero_init=buf)
    assert not buf.any()
    assert tri.get_fp8_min_max_bounds(torch.float8_e4m3fn) == (-448.0, 448.0)
    assert tri.get_fp8_min_max_bounds(torch.float8_e4m3fnuz) == (-224.0, 224.0)  # vLLM's, not the dtype's 240
    assert tri.get_fp8_min_max_bounds(torch.float8_e5m2) == native.get_fp8_min_max_bounds(torch.float8_e5m2)
    with pytest.raises(TypeError, match="get_fp8_min_max_bounds: fp8_dtype must be a float8"):
        tri.get_fp8_min_max_bounds(torch.bfloat16)


def _bad_calls():
    x, w = make_rows(4, 64, torch.bfloat16), torch.ones(64, device=DEVICE, dtype=torch.bfloat16)
    g = tri.fused_rms_fp8_group_quant
    s = tri.fused_rms_fp8_per_tensor_static_quant
    one = torch.ones(1, device=DEVICE)
    return [
        (lambda: g(x[0], w, 1e-6), ValueError, "fused_rms_fp8_group_quant: inp1 must be 2-D"),
        (lambda: g(x.int(), w, 1e-6), TypeError, "fused_rms_fp8_group_quant: inp1 must be"),
        (lambda: g(x, w[:3], 1e-6), ValueError, r"inp1_weight must have shape \(64,\)"),
        (lambda: g(x, w, -1.0), ValueError, "inp1_epsilon must be a finite real >= 0"),
        (lambda: g(x, w, 1e-6, group_size=100), ValueError, "group_size must be a power of 2"),
        (lambda: g(x, w, 1e-6, dtype_quant=torch.float16), TypeError, "dtype_quant must be one of"),
        (lambda: g(x, w, 1e-6, inp2=x), ValueError, "inp2 needs inp2_weight and inp2_epsilon"),
        (lambda: g(x, w, 1e-6, inp2=x[:2], inp2_weight=w, inp2_epsilon=1e-6), ValueError,
         r"inp2 must have shape \(4, 64\)"),
        (lambda: g(x, w, 1e-6, res1=x[:, :32]), ValueError, r"res1 must have shape \(4, 64\)"),
        (lambda: g(x, w, 1e-6, transpose_scale=2), TypeError, "transpose_scale"),
        (lambda: g(x.t(), w[:4], 1e-6), ValueError, "inp1"),
        (lambda: g(make_rows(2, 16385), torch.ones(16385, device=DEVICE), 1e-6), ValueError,
         "up to 16384 columns"),
        (lambda: g(x.float().requires_grad_(), w, 1e-6), ValueError, "inp1 requires grad, but "
         "fused_rms_fp8_group_quant has no gradient"),
        (lambda: s(x, w, 1e-6, torch.ones(2, device=DEVICE)), ValueError,
         "fused_rms_fp8_per_tensor_static_quant: inp1_scale must be a one-element float tensor"),
        (lambda: s(x, w, 1e-6, one, rmsnorm_convert_to_inp1_type="yes"), TypeError, "rmsnorm_convert_to_inp1_type"),
    ]


@pytest.mark.parametrize("i", range(15))
def test_bad_arguments_raise(i):
    call, error, match = _bad_calls()[i]
    with pytest.raises(error, match=match):
        call()


@pytest.mark.parametrize("transpose_scale", [False, True])
def test_compiles_whole(transpose_scale, monkeypatch):
    monkeypatch.undo()  # the traced allocations are the graph's, not NaN-filled ones
    x1, w1, x2, w2, r1 = _inputs(5, 256, 64, torch.bfloat16)

    def f(x1, w1, x2, w2, r1):
        return tri.fused_rms_fp8_group_quant(x1, w1, 1e-6, x2, w2, 1e-5, 64, None, r1, True, transpose_scale)

    torch._dynamo.reset()
    got = torch.compile(f, backend=COMPILE_BACKEND, fullgraph=True)(x1, w1, x2, w2, r1)
    want = f(x1, w1, x2, w2, r1)
    (q, s), *rest = got
    (q_ref, s_ref), *rest_ref = want
    assert torch.equal(s, s_ref) and torch.equal(q.view(torch.uint8), q_ref.view(torch.uint8))
    for g, w in zip(rest, rest_ref):
        assert torch.equal(g, w)
