"""aiter's fused_fp8_quant forms (aiter_lite.ops.triton.quant.fused_fp8_quant) against the
fp32 native reference: RMSNorm of inp1 (after res1, or a split-K sum) quantized per group
or by a static scale, the second input's norm, the unquantized and residual outputs, the
third input's sum, aiter's transposed scale layouts; the gated norm, the split-K gated
activation, the flattened heads and the static SwiGLU forms; every input dtype and
quantized dtype, odd widths, M = 0 and 1, strided rows, the widest rows; NaN kept to its
row; bad arguments raise naming the op and the argument; each call compiles whole.
Outputs are allocated NaN (an unwritten element fails).

The norm is fp32 in both; the quantized codes may differ by one step where the row sum's
order moves a value across a rounding boundary, the unquantized outputs by the dtype's
last bit (the interpreter truncates to bf16)."""

import pytest
import torch

from aiter_lite.ops.native.quant import fused_fp8_quant as native
from aiter_lite.ops.triton.quant import fused_fp8_quant as tri
from aiter_lite.utils.registry import flat_tensors
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


@pytest.mark.parametrize("i", range(15 + 14))
def test_bad_arguments_raise(i):
    call, error, match = (_bad_calls() + _bad_calls_of_further_forms())[i]
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


# ---------------------------------------------------------------------------
# the split-K, gated, flatten and static SwiGLU forms

SPLIT_SHAPES = SHAPES[:4] if not ON_GPU else [(0, 64, 16), (1, 1, 1), (5, 127, 33), (64, 1536, 512), (512, 7168, 576)]
# (splits, options, dtype): 2-D plainly and with everything in every dtype; split-K partial
# products (fp32 in practice) likewise, with one other dtype, and strided
REDUCE_OPTIONS = ([(None, o, d) for o in ("plain", "all") for d in DTYPES]
                  + [(3, "plain", torch.float32), (3, "all", torch.float32), (3, "all", torch.bfloat16),
                     (2, "all, strided", torch.float32)])


def _reduce_inputs(m, n1, n2, n3, spk, dtype, strided=False):
    lead = () if spk is None else (spk,)
    x1 = make_rows(m, n1, dtype, strided=strided, scale=3.0, lead=lead)
    x2 = make_rows(m, n2, dtype, strided=strided, lead=lead)
    x3 = make_rows(m, n3, dtype, strided=strided, lead=(spk or 1,))
    w1 = (torch.rand(n1, device=DEVICE) + 0.5).to(dtype)
    w2 = (torch.rand(n2, device=DEVICE) + 0.5).to(dtype)
    return x1, w1, x2, w2, x3


@pytest.mark.parametrize("spk, options, dtype", REDUCE_OPTIONS, ids=str)
@pytest.mark.parametrize("m, n1, n2", SPLIT_SHAPES)
def test_reduce_rms_matches_native(m, n1, n2, dtype, spk, options):
    """Split-K partials summed, then as the group form; inp2 of its own width (aiter masks it
    by inp1's) and inp3 summed into out3, also with 2-D inputs (aiter leaves out3 unwritten
    there), into the caller's out3 or a new one."""
    x1, w1, x2, w2, x3 = _reduce_inputs(m, n1, n2, 24, spk, dtype, strided=options.endswith("strided"))
    kw = dict(group_size=128 if n1 > 128 else 32, dtype_quant=torch.float8_e4m3fn)
    if options.startswith("all"):
        out_dtype = torch.bfloat16 if dtype == torch.float32 else None
        kw.update(inp2=x2, inp2_weight=w2, inp2_epsilon=1e-5, inp3=x3, dtype=out_dtype,
                  res1=make_rows(m, n1, dtype), output_unquantized_inp1=True, transpose_scale=True)
    got = tri.fused_reduce_rms_fp8_group_quant(x1, w1, 1e-6, **kw)
    want = native.fused_reduce_rms_fp8_group_quant(x1, w1, 1e-6, **kw)
    out_dtype = kw.get("dtype") or dtype
    _assert_group(got, want, out_dtype, f"{spk}x{m}x{n1} {options}")
    if options == "all":  # into the caller's out3 (NaN-filled: every element must be written)
        out3 = torch.full((m, 24), float("nan"), device=DEVICE, dtype=torch.float16)
        got = tri.fused_reduce_rms_fp8_group_quant(x1, w1, 1e-6, **kw, out3=out3)
        assert got[4] is out3
        assert_close(out3, x3.float().sum(0), dtype=torch.float16, name="out3")


@pytest.mark.parametrize("activation", ["silu", "gelu", "gelu_tanh"])
@pytest.mark.parametrize("spk, dtype", [(None, torch.float32), (None, torch.float16), (None, torch.bfloat16),
                                        (4, torch.float32), (2, torch.bfloat16)], ids=str)
@pytest.mark.parametrize("m, n", [(0, 64), (1, 1), (5, 127), (9, 300)] if not ON_GPU else
                         [(0, 64), (1, 1), (5, 127), (64, 2048), (1024, 2304)])
def test_reduce_act_mul_matches_native(m, n, spk, dtype, activation):
    """act(x[:, :n]) * x[:, n:] (x summed over its splits) quantized per group, in fp32 (not
    rounded to x's dtype first, as aiter); x2 summed into y2 of ``dtype``."""
    lead = () if spk is None else (spk,)
    x = make_rows(m, 2 * n, dtype, lead=lead, strided=spk == 2)
    x2 = None if spk is None else make_rows(m, 40, dtype, lead=lead)
    kw = dict(group_size=64, dtype_quant=torch.float8_e4m3fn, dtype=torch.float16)
    got = tri.fused_reduce_act_mul_fp8_group_quant(x, activation, x2, **kw)
    want = native.fused_reduce_act_mul_fp8_group_quant(x, activation, x2, **kw)
    (q, s), y2 = got
    (q_ref, s_ref), y2_ref = want
    assert_close(s, s_ref, atol=0.0, rtol=1e-5, name="scales")
    _assert_codes(q, q_ref, "codes")
    _assert_outputs([y2], [y2_ref], torch.float16, "y2")


# wider than any row held in registers (2N > 32768), an odd last group: on the GPU also
# Qwen2.5-72B's and llama3-405B's intermediates, with Gemma2-27B's as x2
@pytest.mark.parametrize("m, n, n2", [(3, 16447, 16500)] if not ON_GPU else
                         [(3, 16447, 16500), (64, 29568, 8), (300, 53248, 36864)])
def test_reduce_act_mul_any_width(m, n, n2):
    x = make_rows(m, 2 * n, torch.float32, lead=(2,))
    x2 = make_rows(m, n2, torch.float32, lead=(2,))
    kw = dict(group_size=64, dtype_quant=torch.float8_e4m3fn, dtype=torch.bfloat16)
    (q, s), y2 = tri.fused_reduce_act_mul_fp8_group_quant(x, "silu", x2, **kw)
    (q_ref, s_ref), y2_ref = native.fused_reduce_act_mul_fp8_group_quant(x, "silu", x2, **kw)
    assert_close(s, s_ref, atol=0.0, rtol=1e-5, name="scales")
    _assert_codes(q, q_ref, "codes")
    _assert_outputs([y2], [y2_ref], torch.bfloat16, "y2")


@pytest.mark.parametrize("tile", [(1, 0), (1, 64), (4, 128), (2, 256)], ids=str)
def test_reduce_act_mul_tiles_agree(tile):
    """Every tile (rows, output columns of whole groups; 0: the whole row) gives the same
    bits: each group is the same computation wherever its tile lies. x2 in tiles of its own."""
    m, n, n2 = 7, 300, 520
    x, x2 = make_rows(m, 2 * n, torch.bfloat16, lead=(3,), strided=True), make_rows(m, n2, torch.bfloat16, lead=(3,))
    x[1, 2, 5] = float("nan")

    def run(config):
        q = torch.full((m, n), float("nan"), device=DEVICE).to(torch.float8_e4m3fn)
        s = torch.full((m, 20), float("nan"), device=DEVICE)  # 10 groups, every other column
        y2 = torch.full((m, n2), float("nan"), device=DEVICE, dtype=torch.float16)
        tri._launch_fused_rms_quant(x, None, None, None, None, q, s[:, ::2], None, None, None, 0.0, 0.0, 32, False,
                                    x2, y2, "gelu_tanh", config)
        assert s[:, 1::2].isnan().all()
        return q.view(torch.uint8), s[:, ::2], y2

    want = run(None)
    got = run(tri.FusedRmsQuantLaunchConfig(4, *tile))
    for g, w, name in zip(got, want, ("codes", "scales", "y2")):
        assert torch.equal(g.nan_to_num(), w.nan_to_num()) and torch.equal(g.isnan(), w.isnan()), name
    assert not want[2].isnan().any() and want[1].isnan().any(dim=1).tolist() == [False, False, True] + [False] * 4


GATED = [(0, 128, None), (1, 128, 128), (7, 192, 64), (5, 96, 96), (3, 1000, None)] if not ON_GPU else \
    [(0, 128, None), (1, 128, 128), (7, 192, 64), (4096, 128, 128), (300, 4096, 128), (9, 16384, None)]


@pytest.mark.parametrize("norm_before_gate, use_ue8m0, activation, has_bias",
                         [(True, False, "silu", False), (False, True, "sigmoid", True), (True, True, "swish", True),
                          (False, False, "silu", False)], ids=str)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("m, n, group_size", GATED)
def test_gated_matches_native(m, n, group_size, dtype, norm_before_gate, use_ue8m0, activation, has_bias):
    x, z = make_rows(m, n, dtype, scale=2.0), make_rows(m, n, dtype, strided=True)
    w = (torch.rand(n, device=DEVICE) + 0.5).to(dtype)
    b = torch.randn(n, device=DEVICE).to(dtype) if has_bias else None
    kw = dict(norm_before_gate=norm_before_gate, use_ue8m0=use_ue8m0, activation=activation, group_size=group_size,
              out_dtype=torch.float8_e4m3fn)
    q, s = tri.fused_rms_gated_fp8_group_quant(x, w, b, z, 1e-6, **kw)
    q_ref, s_ref = native.fused_rms_gated_fp8_group_quant(x, w, b, z, 1e-6, **kw)
    assert s.shape == s_ref.shape == ((m, n // group_size) if group_size else (m,))
    assert_close(s, s_ref, atol=0.0, rtol=0.0 if use_ue8m0 else 1e-5, name="scales")
    _assert_codes(q, q_ref, "codes")


def test_gated_scales_ue8m0_exactly_and_keep_nan():
    """A scale already a power of 2 stays itself under UE8M0 (aiter's approximate log2 can
    take it one power up), aiter's bounds and floor by default and as given; a NaN stays
    in its row's group."""
    n = 256
    x = make_rows(4, n)
    w = torch.zeros(n, device=DEVICE)
    b = torch.linspace(-56.0, 10.0, n, device=DEVICE)  # y = b: amax 56, 56 / 448 = 2^-3
    q, s = tri.fused_rms_gated_fp8_group_quant(x, w, b, None, 1e-6, use_ue8m0=True, group_size=128,
                                               out_dtype=torch.float8_e4m3fn)
    assert s[:, 0].eq(0.125).all() and s[:, 1].eq(2.0 ** -4).all()  # amax 22.9: 22.9 / 448 rounds up to 2^-4
    _, s = tri.fused_rms_gated_fp8_group_quant(x, w, b, None, 1e-6, fp8_min=-56.0, fp8_max=56.0,
                                               fp8_min_scaling_factor=0.5)
    assert s.eq(1.0).all()
    _, s = tri.fused_rms_gated_fp8_group_quant(x, w, torch.zeros(n, device=DEVICE), None, 1e-6,
                                               out_dtype=torch.float8_e4m3fn)
    assert s.eq(1.0 / (448.0 * 512.0)).all()  # an all-zero row: the floor
    xb, z = make_rows(4, n), make_rows(4, n)
    q0, s0 = tri.fused_rms_gated_fp8_group_quant(xb, w + 1, None, z, 1e-6, group_size=64)
    xb[1, 70] = float("nan")  # the gate after the norm: the RMS carries it across the row
    q1, s1 = tri.fused_rms_gated_fp8_group_quant(xb, w + 1, None, z, 1e-6, group_size=64)
    assert s1[1].isnan().all() and q1[1].float().isnan().all()
    assert torch.equal(s1[[0, 2, 3]], s0[[0, 2, 3]])


FLATTEN = [(0, 2, 64, 32), (1, 1, 1, 32), (5, 3, 100, 64), (7, 4, 128, 128), (3, 5, 64, 32)] if not ON_GPU else \
    [(0, 2, 64, 32), (1, 1, 1, 32), (5, 3, 100, 64), (1, 128, 128, 128), (4096, 16, 128, 128), (300, 128, 512, 128)]


@pytest.mark.parametrize("layout", ["heads first (transposed)", "contiguous", "strided rows"])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("m, n1, n2, group_size", FLATTEN)
def test_flatten_matches_native(m, n1, n2, group_size, dtype, layout):
    """(M, N1, N2) flattened and quantized per group with no copy of x, whatever the stride
    of its first two dims; groups run over the flattened row where N2 is not a multiple of
    the group (aiter's restart at each segment and write past the scales' row)."""
    if layout.startswith("heads"):
        x = make_rows(m, n2, dtype, lead=(n1,)).transpose(0, 1)
    else:
        x = make_rows(n1 * m, n2, dtype, strided=layout == "strided rows").unflatten(0, (m, n1))
    for transpose_scale in (False, True):
        q, s = tri.fused_flatten_fp8_group_quant(x, group_size, torch.float8_e4m3fn, transpose_scale)
        q_ref, s_ref = native.fused_flatten_fp8_group_quant(x, group_size, torch.float8_e4m3fn, transpose_scale)
        assert s.shape == s_ref.shape == (m, -(-n1 * n2 // group_size)) and (s.stride() == s_ref.stride() or m < 2)
        assert_close(s, s_ref, atol=0.0, rtol=0.0, name="scales")
        _assert_codes(q, q_ref, "codes")


@pytest.mark.parametrize("qdtype, convert", [(q, False) for q in Q_DTYPES] + [(torch.float8_e4m3fn, True)],
                         ids=lambda v: str(v).replace("torch.", ""))
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("m, n", [(0, 8), (1, 1), (5, 127), (9, 300)] if not ON_GPU else
                         [(0, 8), (1, 1), (5, 127), (512, 14336), (7, 28672)])
def test_silu_mul_static_matches_native(m, n, dtype, qdtype, convert):
    x = make_rows(m, 2 * n, dtype, strided=True, scale=2.0)
    scale = torch.rand(1, device=DEVICE) * 0.02 + 0.005
    got = tri.fused_silu_mul_fp8_per_tensor_static_quant(x, scale, qdtype, convert)
    _assert_codes(got, native.fused_silu_mul_fp8_per_tensor_static_quant(x, scale, qdtype, convert), "codes")


def _bad_calls_of_further_forms():
    x, w = make_rows(4, 64, torch.bfloat16), torch.ones(64, device=DEVICE, dtype=torch.bfloat16)
    x3 = make_rows(4, 64, lead=(2,))
    r = tri.fused_reduce_rms_fp8_group_quant
    a = tri.fused_reduce_act_mul_fp8_group_quant
    gq = tri.fused_rms_gated_fp8_group_quant
    f = tri.fused_flatten_fp8_group_quant
    sm = tri.fused_silu_mul_fp8_per_tensor_static_quant
    return [
        (lambda: r(x3, w, 1e-6, inp2=x, inp2_weight=w, inp2_epsilon=1e-6), ValueError,
         r"fused_reduce_rms_fp8_group_quant: inp2 must be 3-D \(SPK, M, N\)"),
        (lambda: r(x3, w, 1e-6, inp3=make_rows(4, 8, lead=(3,))), ValueError, r"inp3 must have shape \(2, 4, 8\)"),
        (lambda: r(x, w, 1e-6, out3=torch.empty(4, 8, device=DEVICE)), ValueError, "out3 without inp3"),
        (lambda: r(x, w, 1e-6, dtype=torch.int8), TypeError, "fused_reduce_rms_fp8_group_quant: dtype must be"),
        (lambda: a(x, "relu"), ValueError, "fused_reduce_act_mul_fp8_group_quant: activation must be one of"),
        (lambda: a(x, "silu", x), ValueError, "x2 must be None"),
        (lambda: a(x[:, :63], "silu"), ValueError, "must be even"),
        (lambda: gq(x, w, None, x[:2], 1e-6), ValueError, r"fused_rms_gated_fp8_group_quant: z must have shape"),
        (lambda: gq(x, w, None, x, 1e-6, group_size=48), ValueError, "group_size must divide x's width 64"),
        (lambda: gq(x, w, None, x, 1e-6, fp8_min=-1.0), ValueError, "fp8_min and fp8_max go together"),
        (lambda: gq(x, w, None, x, 1e-6, activation="gelu"), ValueError, "activation must be one of"),
        (lambda: f(x, 32), ValueError, r"fused_flatten_fp8_group_quant: x must be 3-D"),
        (lambda: f(x3, 48), ValueError, "group_size must be a power of 2"),
        (lambda: sm(x, torch.ones(3, device=DEVICE)), ValueError,
         "fused_silu_mul_fp8_per_tensor_static_quant: inp_scale must be a one-element float tensor"),
    ]


@pytest.mark.parametrize("form", ["reduce rms", "reduce act mul", "gated", "flatten", "silu static"])
def test_further_forms_compile_whole(form, monkeypatch):
    monkeypatch.undo()  # the traced allocations are the graph's, not NaN-filled ones
    x3, w = make_rows(5, 128, lead=(3,)), torch.rand(128, device=DEVICE) + 0.5
    x, z = make_rows(5, 128, torch.bfloat16), make_rows(5, 128, torch.bfloat16)
    calls = {
        "reduce rms": lambda: tri.fused_reduce_rms_fp8_group_quant(x3, w, 1e-6, x3, w, 1e-6, x3, 64, None,
                                                                   torch.bfloat16, x3[0], True, None, True),
        "reduce act mul": lambda: tri.fused_reduce_act_mul_fp8_group_quant(x3, "silu", x3[:, :, :40], 32),
        "gated": lambda: tri.fused_rms_gated_fp8_group_quant(x, w, w, z, 1e-6, use_ue8m0=True, group_size=64),
        "flatten": lambda: tri.fused_flatten_fp8_group_quant(x.view(5, 4, 32).transpose(0, 1), 32),
        "silu static": lambda: tri.fused_silu_mul_fp8_per_tensor_static_quant(x, torch.ones(1, device=DEVICE) / 64),
    }
    torch._dynamo.reset()
    got = torch.compile(calls[form], backend=COMPILE_BACKEND, fullgraph=True)()
    want = calls[form]()
    for g, w_ in zip(flat_tensors(got), flat_tensors(want)):
        assert torch.equal(g.view(torch.uint8) if g.element_size() == 1 else g,
                           w_.view(torch.uint8) if w_.element_size() == 1 else w_), form
