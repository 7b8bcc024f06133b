"""aiter's fused_clamp_act_mul (aiter_lite.ops.triton.fusions) against the fp32 native
reference: the unquantized form in every dtype, with and without SwiGLU's clamp, row and
element weights (strided too); fp32 group scales (row-major and aiter's transposed
presentation, fp8 and int8); UE8M0 scales (row-major, transposed, shuffled into aiter's
padded e8m0_shuffle buffer); caller's buffers; NaN and all-zero groups; M = 0 and 1, odd
widths, strided rows; bad arguments raise naming the op and the argument. Outputs start
poisoned (the package's conftest). Quantized values may sit one step from the reference's
(an fp32 product one ulp apart crossing a rounding boundary); scales are compared to fp32's
tolerance (UE8M0: byte for byte)."""

import pytest
import torch

from aiter_lite.ops.native.fusions import fused_clamp_act_mul as native_op
from aiter_lite.ops.native.quant.mx_quant import unshuffle_scale
from aiter_lite.ops.triton.fusions import fused_clamp_act_mul
from aiter_lite.ops.triton.quant.dtypes import supported_quant_dtypes
from op_tests.triton_tests.quant.test_quant import _assert_codes
from op_tests.utils import DEVICE, DTYPES, assert_close, by_device, make_rows

SUPPORTED = supported_quant_dtypes(DEVICE)
E4M3 = torch.float8_e4m3fn if torch.float8_e4m3fn in SUPPORTED else torch.float8_e4m3fnuz
# (M, N): M = 0 and 1, widths no block divides, strided rows; on a GPU DeepSeek-V3's (2048
# wide experts, 18432 dense) and gpt-oss's at serving batch sizes
SHAPES = by_device(cpu=[(0, 64), (1, 96), (5, 200), (3, 1024)],
                   gpu=[(0, 64), (1, 96), (5, 200), (3, 1024), (4096, 2048), (257, 18432), (16384, 2880)])


def _weights(kind: str, m: int, n: int):
    if kind == "none":
        return None
    if kind == "row":
        return torch.randn(m, 1, device=DEVICE) * 0.5
    w = torch.randn(n + 5, m, device=DEVICE).t()[:, :n] if kind == "strided" else torch.randn(m, n, device=DEVICE)
    return w * 0.5


def _inp(m, n, dtype, scale=3.0):
    return make_rows(m, 2 * n, dtype, strided=True, scale=scale)


@pytest.mark.parametrize("weights", ["none", "row", "full", "strided"])
@pytest.mark.parametrize("limit", [0.0, 7.0, 1.5])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("m, n", SHAPES)
def test_unquantized(m, n, dtype, limit, weights):
    x = _inp(m, n, dtype)
    w = _weights(weights, m, n)
    before = x.clone()
    y = fused_clamp_act_mul(x, swiglu_limit=limit, weights=w)
    assert y.dtype == dtype and y.shape == (m, n)
    assert_close(y, native_op(x, swiglu_limit=limit, weights=w), name=f"limit {limit} weights {weights}")
    assert torch.equal(x, before)


@pytest.mark.parametrize("activation", ["silu", "gelu", "gelu_tanh", "relu"])
def test_activations(activation):
    x = _inp(33, 160, torch.bfloat16)
    assert_close(fused_clamp_act_mul(x, swiglu_limit=4.0, activation=activation),
                 native_op(x, swiglu_limit=4.0, activation=activation), name=activation)
    q, s = fused_clamp_act_mul(x, swiglu_limit=4.0, activation=activation, dtype_quant=E4M3)
    q_ref, s_ref = native_op(x, swiglu_limit=4.0, activation=activation, dtype_quant=E4M3)
    assert_close(s, s_ref, dtype=torch.float32, name=f"{activation} scales")
    _assert_codes(q, q_ref, activation)


def test_the_clamp_is_swiglus():
    """The gate at most the limit (below it untouched), the up within +-limit."""
    x = torch.tensor([[10.0, -10.0, 2.0, 10.0, -10.0, 2.0]], device=DEVICE)  # gates 10, -10, 2; ups 10, -10, 2
    y = fused_clamp_act_mul(x, swiglu_limit=3.0)
    g = torch.tensor([3.0, -10.0, 2.0], device=DEVICE)
    want = torch.nn.functional.silu(g) * torch.tensor([3.0, -3.0, 2.0], device=DEVICE)
    assert_close(y[0], want, dtype=torch.float32)


@pytest.mark.parametrize("transpose", [False, True])
@pytest.mark.parametrize("group", [128, 32, 64])
@pytest.mark.parametrize("qdtype", [torch.float8_e4m3fn, torch.float8_e4m3fnuz, torch.float8_e5m2, torch.int8],
                         ids=str)
@pytest.mark.parametrize("m, n", SHAPES)
def test_fp32_group_scales(m, n, qdtype, group, transpose):
    if qdtype not in SUPPORTED:
        pytest.skip(f"{qdtype} cannot be stored on this device")
    x = _inp(m, n, torch.bfloat16)
    w = _weights("row", m, n)
    q, s = fused_clamp_act_mul(x, swiglu_limit=7.0, weights=w, dtype_quant=qdtype, transpose_scale=transpose,
                               quant_block_size=group)
    q_ref, s_ref = native_op(x, swiglu_limit=7.0, weights=w, dtype_quant=qdtype, transpose_scale=transpose,
                             quant_block_size=group)
    assert s.shape == (m, -(-n // group)) and s.dtype == torch.float32
    assert s.is_contiguous()  # transposed: the column-major (G, M) buffer viewed as (M, G), aiter's presentation
    assert_close(s, s_ref, dtype=torch.float32, name="scales")
    _assert_codes(q, q_ref, "values")


@pytest.mark.parametrize("layout", ["rows", "transposed", "shuffled"])
@pytest.mark.parametrize("group", [32, 128])
@pytest.mark.parametrize("m, n", SHAPES)
def test_ue8m0_scales(m, n, group, layout):
    x = _inp(m, n, torch.bfloat16)
    w = _weights("full", m, n)
    kw = dict(swiglu_limit=7.0, weights=w, dtype_quant=E4M3, quant_block_size=group, scale_dtype_fmt="ue8m0",
              transpose_scale=layout == "transposed", shuffle_scale=layout == "shuffled")
    q, s = fused_clamp_act_mul(x, **kw)
    q_ref, s_ref = native_op(x, **kw)
    assert s.dtype == torch.uint8 and s.shape == s_ref.shape
    assert torch.equal(s, s_ref), f"{int((s != s_ref).sum())} scale bytes differ"  # padding 127 included
    if layout == "shuffled" and m:
        g = -(-n // group)
        assert torch.equal(unshuffle_scale(s, m, g), unshuffle_scale(s_ref, m, g))
    _assert_codes(q, q_ref, "values")


def test_into_callers_buffers():
    """out and scale given: written and returned; out's dtype wins over dtype_quant (aiter's
    rule); a caller's shuffled buffer keeps its padding."""
    m, n = 9, 96
    x = _inp(m, n, torch.bfloat16)
    out = torch.empty(m, n, dtype=E4M3, device=DEVICE)
    scale = torch.full((256, 8), 7, dtype=torch.uint8, device=DEVICE)
    q, s = fused_clamp_act_mul(x, out, scale, 7.0, dtype_quant=torch.float8_e5m2, quant_block_size=32,
                               scale_dtype_fmt="ue8m0", shuffle_scale=True)
    assert q is out and s is scale
    q_ref, s_ref = native_op(x, swiglu_limit=7.0, dtype_quant=E4M3, quant_block_size=32, scale_dtype_fmt="ue8m0",
                             shuffle_scale=True)
    assert torch.equal(unshuffle_scale(s, m, 3), unshuffle_scale(s_ref, m, 3))
    assert (unshuffle_scale(s, 256, 8)[m:] == 7).all() and (unshuffle_scale(s, 256, 8)[:, 3:] == 7).all()
    _assert_codes(q, q_ref, "values")
    y = torch.empty(m, n, dtype=torch.float16, device=DEVICE)
    assert fused_clamp_act_mul(x, y) is y
    assert_close(y, native_op(x, out=torch.empty(m, n, dtype=torch.float16, device=DEVICE)), name="fp16 out")


def test_row_weights_equal_expanded_weights():
    x = _inp(40, 256, torch.bfloat16)
    w = torch.randn(40, 1, device=DEVICE)
    a = fused_clamp_act_mul(x, weights=w)
    b = fused_clamp_act_mul(x, weights=w.expand(40, 256).contiguous())
    assert torch.equal(a, b)


@pytest.mark.parametrize("fmt", ["fp32", "ue8m0"])
def test_nan_and_zero_groups(fmt):
    """A NaN in a group: its scale NaN (UE8M0: byte 0xFF) and its values NaN, the other groups
    as without it; an all-zero group: values 0 (UE8M0 scale byte 0, fp32 scale 1e-10 / q_max)."""
    m, n = 4, 128
    x = _inp(m, n, torch.float32)
    x[1, :32] = 0.0  # row 1's first gates: group 0 of row 1 all zero
    xn = x.clone()
    xn[2, 40] = float("nan")  # gate of column 40: group 1 of row 2
    kw = dict(dtype_quant=E4M3, quant_block_size=32, scale_dtype_fmt=fmt)
    q0, s0 = fused_clamp_act_mul(x, **kw)
    q1, s1 = fused_clamp_act_mul(xn, **kw)
    nan_scale = s1[2, 1].item() == 255 if fmt == "ue8m0" else s1[2, 1].isnan().item()
    assert nan_scale and q1[2, 32:64].float().isnan().all()
    keep = torch.ones_like(s0, dtype=torch.bool)
    keep[2, 1] = False
    assert torch.equal(s0[keep], s1[keep])
    assert (q0[1, :32].float() == 0).all()
    if fmt == "ue8m0":
        assert s0[1, 0].item() == 0
    else:
        assert s0[1, 0].item() == pytest.approx(1e-10 / torch.finfo(E4M3).max)


@pytest.mark.parametrize("i", range(11))
def test_bad_arguments_raise(i):
    x = _inp(4, 64, torch.bfloat16)
    calls = [
        (lambda: fused_clamp_act_mul(x[:, :127]), "inp"),
        (lambda: fused_clamp_act_mul(x.view(2, 2, 128)), "inp"),
        (lambda: fused_clamp_act_mul(x, activation="swish"), "activation"),
        (lambda: fused_clamp_act_mul(x, weights=torch.ones(4, 2, device=DEVICE)), "weights"),
        (lambda: fused_clamp_act_mul(x, dtype_quant=torch.float16), "dtype_quant"),
        (lambda: fused_clamp_act_mul(x, dtype_quant=torch.float8_e5m2, scale_dtype_fmt="ue8m0"), "ue8m0"),
        (lambda: fused_clamp_act_mul(x, dtype_quant=E4M3, shuffle_scale=True), "shuffle_scale"),
        (lambda: fused_clamp_act_mul(x, dtype_quant=E4M3, quant_block_size=48), "quant_block_size"),
        (lambda: fused_clamp_act_mul(x, backend="gluon"), "backend"),
        (lambda: fused_clamp_act_mul(x, None, torch.empty(4, 2, device=DEVICE), dtype_quant=E4M3), "scale"),
        (lambda: fused_clamp_act_mul(x, swiglu_limit=float("nan")), "swiglu_limit"),
    ]
    call, name = calls[i]
    with pytest.raises((TypeError, ValueError), match=f"fused_clamp_act_mul: .*{name}|fused_clamp_act_mul: {name}"):
        call()
