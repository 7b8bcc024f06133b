"""QuantFP8: static / dynamic per-tensor / per-token / per-group on both backends; the
dequantized values match the input within one fp8 step, the two backends' scales agree to
the bit (one ulp allowed) and their codes to one step; padding, column-major scales,
scale_ub, the env switch and every bad argument."""

import copy
import pickle

import pytest
import torch

from aiter_lite.layers import GroupShape, QuantFP8
from aiter_lite.ops.triton.quant import (
    get_fp8_e4m3_dtype,
    quant_range,
    supported_quant_dtypes,
)
from op_tests.utils import DEVICE, DTYPES, make_rows

FP8 = get_fp8_e4m3_dtype()
Q_MAX = quant_range(FP8)[1]
if FP8 not in supported_quant_dtypes(DEVICE):
    pytest.skip(f"{FP8} cannot be stored on {DEVICE}", allow_module_level=True)

# name -> (static, group_shape)
MODES = {
    "static": (True, GroupShape.PER_TENSOR),
    "per_tensor": (False, GroupShape.PER_TENSOR),
    "per_token": (False, GroupShape.PER_TOKEN),
    "group128": (False, GroupShape(1, 128)),
    "group64": (False, (1, 64)),
}
# (M, N): no rows, one row, odd widths (a partial last group), a few rows
SHAPES = [(0, 256), (1, 128), (1, 7), (5, 200), (3, 384)]


def _input(m, n, dtype):
    x = make_rows(m, n, dtype, scale=3.0)
    if m > 2:
        x[1].zero_()  # an all-zero row: the scale's floor
    return x


def _static_scale(x):
    amax = x.float().abs().amax() if x.numel() else torch.ones((), device=x.device)
    return (amax / Q_MAX * 1.25).reshape(1).to(torch.float32)


def _broadcast(scale, x, layer):
    """The scales at x's shape (groups repeated over their columns, the last one cut)."""
    if layer.is_group_quant:
        return scale.repeat_interleave(layer.group_size, -1)[..., :x.shape[-1]]
    return scale


def _codes(q):
    """fp8 codes as integers in value order (sign and magnitude bits)."""
    b = q.view(torch.uint8).long()
    return torch.where(b >= 128, -(b & 0x7F), b & 0x7F)


def _assert_dequant(q, scale, x, layer, name):
    """q * scale within one fp8 step of x: 2^-3 of |x|, or the subnormal step 2^-9 * scale."""
    s = _broadcast(scale.float(), x, layer)
    got, want = q.float() * s, x.float()
    bound = 0.125 * want.abs() + s * 2.0 ** -9
    bad = (got - want).abs() > bound
    assert not bad.any(), (f"{name}: {int(bad.sum())} of {bad.numel()} dequantized values off, first at "
                           f"{bad.nonzero()[:4].tolist()}: got {got[bad][:4].tolist()}, input {want[bad][:4].tolist()}")


def _assert_scales_match(a, b, name):
    assert a.shape == b.shape and a.dtype == b.dtype == torch.float32, (name, a.shape, b.shape, a.dtype, b.dtype)
    ulps = (a.contiguous().view(torch.int32).long() - b.contiguous().view(torch.int32).long()).abs()
    assert (ulps <= 1).all(), f"{name}: scales differ by more than one ulp: {a.flatten()[:6]} vs {b.flatten()[:6]}"
    assert torch.isfinite(a).all() and (a > 0).all(), f"{name}: a scale is not finite and positive"


def _run(layer, fn, x, static_scale):
    return fn(x, static_scale) if layer.static else fn(x)


@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("mode", MODES)
def test_native_matches_triton(mode, dtype, shape):
    static, group_shape = MODES[mode]
    layer = QuantFP8(static, group_shape, backend="native")
    x = _input(*shape, dtype)
    scale = _static_scale(x) if static else None
    q_n, s_n = _run(layer, layer.forward_native, x, scale)
    q_t, s_t = _run(layer, layer.forward_triton, x, scale)
    m, n = shape
    if layer.is_group_quant:
        want_scale = (m, -(-n // layer.group_size))
    else:
        want_scale = (m, 1) if mode == "per_token" else (1,)
    for q, s, name in ((q_n, s_n, "native"), (q_t, s_t, "triton")):
        assert q.shape == x.shape and q.dtype == FP8, (name, q.shape, q.dtype)
        assert tuple(s.shape) == want_scale, (name, tuple(s.shape), want_scale)
        if static:
            assert s is scale, f"{name}: a static layer returns the caller's scale"
        _assert_dequant(q, s, x, layer, name)
    _assert_scales_match(s_t, s_n, mode)
    far = (_codes(q_t) - _codes(q_n)).abs() > 1
    assert not far.any(), f"{mode}: {int(far.sum())} codes more than one step apart"
    if m > 2 and mode in ("per_token", "group128", "group64"):
        assert (q_t[1].float() == 0).all() and (q_n[1].float() == 0).all(), "the zero row quantizes to zeros"


@pytest.mark.parametrize("backend", ["native", "triton"])
@pytest.mark.parametrize("mode", MODES)
def test_forward_is_the_picked_path(mode, backend):
    static, group_shape = MODES[mode]
    layer = QuantFP8(static, group_shape, backend=backend)
    assert layer.backend == backend and f"backend={backend}" in repr(layer)
    x = _input(4, 128, torch.bfloat16)
    scale = _static_scale(x) if static else None
    q, s = _run(layer, layer, x, scale)
    q_path, s_path = _run(layer, getattr(layer, f"forward_{backend}"), x, scale)
    assert torch.equal(q.view(torch.uint8), q_path.view(torch.uint8)) and torch.equal(s, s_path)


def test_static_saturates():
    """A static scale below amax / q_max saturates at the dtype's largest value, never inf or NaN."""
    x = _input(3, 64, torch.float32)
    scale = _static_scale(x) / 4
    for backend in ("native", "triton"):
        q, _ = QuantFP8(True, GroupShape.PER_TENSOR, backend=backend)(x, scale)
        assert q.float().abs().max().item() == Q_MAX and not q.float().isnan().any(), backend


@pytest.mark.parametrize("backend", ["native", "triton"])
def test_per_token_scale_ub(backend):
    layer = QuantFP8(False, GroupShape.PER_TOKEN, backend=backend)
    x = _input(4, 96, torch.float16)
    amax = x.float().abs().amax(-1, keepdim=True)
    ub = (amax.median() * 0.5).reshape(1)
    q, s = layer(x, scale_ub=ub)
    want = (amax.clamp(max=ub) / Q_MAX).clamp(min=1 / (Q_MAX * 512))
    torch.testing.assert_close(s, want, rtol=2 ** -23, atol=0)
    q_other, s_other = getattr(layer, f"forward_{'native' if backend == 'triton' else 'triton'}")(x, None, ub)
    _assert_scales_match(s, s_other, "scale_ub")
    assert ((_codes(q) - _codes(q_other)).abs() <= 1).all()
    assert q.float().abs().max().item() == Q_MAX  # the capped rows saturate


@pytest.mark.parametrize("m", [0, 1, 5, 12])
@pytest.mark.parametrize("mode", ["static", "per_tensor", "per_token"])
def test_num_token_padding(mode, m):
    """max(num_token_padding, M) output rows, the padding rows zero; the scales keep M rows."""
    static, group_shape = MODES[mode]
    x = _input(m, 64, torch.bfloat16)
    scale = _static_scale(x) if static else None
    outs = []
    for backend in ("native", "triton"):
        layer = QuantFP8(static, group_shape, num_token_padding=8, backend=backend)
        q, s = _run(layer, layer, x, scale)
        assert q.shape == (max(8, m), 64) and q.dtype == FP8, q.shape
        assert tuple(s.shape) == ((m, 1) if mode == "per_token" else (1,))
        assert torch.equal(q[m:].view(torch.uint8), torch.zeros_like(q[m:].view(torch.uint8))), "padding not zero"
        _assert_dequant(q[:m], s, x, layer, backend)
        outs.append((q, s))
    _assert_scales_match(outs[0][1], outs[1][1], "padded")
    assert ((_codes(outs[0][0]) - _codes(outs[1][0])).abs() <= 1).all()


@pytest.mark.parametrize("backend", ["native", "triton"])
def test_column_major_scales(backend):
    x = _input(6, 256, torch.bfloat16)
    q, s = QuantFP8(False, GroupShape(1, 64), column_major_scales=True, backend=backend)(x)
    q_row, s_row = QuantFP8(False, GroupShape(1, 64), backend=backend)(x)
    assert s.shape == (6, 4) and s.stride() == (1, 6), s.stride()
    assert torch.equal(s, s_row) and torch.equal(q.view(torch.uint8), q_row.view(torch.uint8))


@pytest.mark.parametrize("mode", ["per_token", "group64"])
def test_leading_dims(mode):
    """Rows are every dim but the last: (B, T, N) gives (B, T, 1) or (B, T, G) scales."""
    static, group_shape = MODES[mode]
    x = make_rows(3, 128, torch.float32, lead=(2,))
    layer = QuantFP8(static, group_shape, backend="triton")
    q, s = layer(x)
    q_n, s_n = layer.forward_native(x)
    assert q.shape == x.shape and s.shape == (2, 3, 1 if mode == "per_token" else 2)
    _assert_scales_match(s, s_n, mode)
    assert ((_codes(q) - _codes(q_n)).abs() <= 1).all()
    _assert_dequant(q, s, x, layer, mode)


@pytest.mark.parametrize("family_var", ["AITER_QUANT_BACKEND", "AITER_BACKEND"])
@pytest.mark.parametrize("backend", ["triton", "native"])
def test_env_picks_backend(monkeypatch, family_var, backend):
    monkeypatch.delenv("AITER_QUANT_BACKEND", raising=False)
    monkeypatch.setenv(family_var, backend)
    layer = QuantFP8(False, GroupShape.PER_TOKEN)
    assert layer.backend == backend
    x = _input(3, 64, torch.float32)
    q, s = layer(x)
    q_path, s_path = getattr(layer, f"forward_{backend}")(x)
    assert torch.equal(q.view(torch.uint8), q_path.view(torch.uint8)) and torch.equal(s, s_path)
    assert QuantFP8(False, GroupShape.PER_TOKEN, backend="native").backend == "native"


def test_module_state():
    layer = QuantFP8(False, GroupShape(1, 128), backend="triton")
    assert layer.state_dict() == {} and list(layer.parameters()) == []
    for copied in (pickle.loads(pickle.dumps(layer)), copy.deepcopy(layer)):
        assert copied.backend == "triton" and copied.group_size == 128 and copied.is_group_quant
    assert repr(layer) == f"QuantFP8(static=False, group_shape=(1, 128), quant_dtype={FP8}, backend=triton)"
    with pytest.raises(AttributeError):
        layer.backend = "native"


def test_group_shape():
    assert GroupShape.PER_TENSOR == (-1, -1) and GroupShape.PER_TOKEN == (1, -1)
    assert GroupShape.PER_TENSOR.is_per_tensor() and GroupShape.PER_TOKEN.is_per_token()
    assert GroupShape(1, 128).is_per_group() and not GroupShape.PER_TOKEN.is_per_group()
    assert GroupShape(1, 64).col == 64 and isinstance(GroupShape(1, 64), tuple)
    layer = QuantFP8(False, [1, 64], backend="native")
    assert type(layer.group_shape) is GroupShape and layer.group_size == 64


def test_bad_arguments(monkeypatch):
    for args, kwargs, exc, match in [
        ((2, GroupShape.PER_TENSOR), {}, TypeError, "static must be a bool, got 2"),
        ((False, 128), {}, TypeError, "group_shape must be a GroupShape or a \\(row, col\\) pair of ints, got int"),
        ((False, (1, 1.5)), {}, TypeError, "group_shape must be a GroupShape"),
        ((False, (1, 96)), {}, ValueError, r"group_size a power of 2 from 1 to 8192, got \(1, 96\)"),
        ((False, (-1, 1)), {}, ValueError, r"group_shape must be .*got \(-1, 1\)"),
        ((False, (1, 16384)), {}, ValueError, r"got \(1, 16384\)"),
        ((True, GroupShape.PER_TOKEN), {}, ValueError, "static quantization takes one per-tensor scale"),
        ((False, GroupShape.PER_TOKEN), {"num_token_padding": 0}, ValueError, "num_token_padding must be >= 1, got 0"),
        ((False, GroupShape.PER_TOKEN), {"num_token_padding": 8.0}, TypeError, "num_token_padding must be an int"),
        ((False, (1, 128)), {"num_token_padding": 8}, ValueError, "num_token_padding pads per-tensor and per-token"),
        ((False, GroupShape.PER_TOKEN), {"column_major_scales": True}, ValueError,
         "column_major_scales lays out per-group scales"),
        ((False, (1, 128)), {"column_major_scales": 1}, TypeError, "column_major_scales must be a bool"),
        ((False, GroupShape.PER_TOKEN), {"backend": "cuda"}, ValueError, "QuantFP8: backend must be one of"),
    ]:
        with pytest.raises(exc, match=match):
            QuantFP8(*args, **kwargs)
    monkeypatch.setenv("AITER_QUANT_BACKEND", "cuda")
    with pytest.raises(ValueError, match="AITER_QUANT_BACKEND='cuda' is not valid"):
        QuantFP8(False, GroupShape.PER_TOKEN)
    monkeypatch.delenv("AITER_QUANT_BACKEND")

    x = make_rows(4, 64, torch.float32)
    one = torch.ones(1, device=DEVICE)
    static = QuantFP8(True, GroupShape.PER_TENSOR, backend="native")
    dynamic = QuantFP8(False, GroupShape.PER_TENSOR, backend="native")
    per_token = QuantFP8(False, GroupShape.PER_TOKEN, backend="native")
    for backend in ("native", "triton"):
        for layer, args, exc, match in [
            (static, (x,), ValueError, r"static quantization needs scale \(a one-element float32 tensor\), got None"),
            (static, (x, 1.0), TypeError, "scale must be a torch.Tensor, got float"),
            (static, (x, one.double()), TypeError, "scale must be float32, got torch.float64"),
            (static, (x, torch.ones(2, device=DEVICE)), ValueError, r"scale must have one element, got shape \(2,\)"),
            (dynamic, (x, one), ValueError, "dynamic quantization computes its scales; scale must be None"),
            (dynamic, (x, None, one), ValueError, "scale_ub bounds dynamic per-token scales"),
            (static, (x, one, one), ValueError, "scale_ub bounds dynamic per-token scales; this layer is static"),
            (per_token, (x, None, torch.ones(1, 2, device=DEVICE)), ValueError, "scale_ub must have one element"),
            (per_token, (x.double(),), TypeError, "x must be float16, bfloat16 or float32, got torch.float64"),
            (per_token, (x.tolist(),), TypeError, "x must be a torch.Tensor, got list"),
            (per_token, (torch.ones((), device=DEVICE),), ValueError, "x must have at least one dim"),
            (QuantFP8(False, GroupShape.PER_TOKEN, num_token_padding=8, backend="native"), (x[None],), ValueError,
             r"num_token_padding needs a 2-D x \(tokens, hidden\), got shape \(1, 4, 64\)"),
            (QuantFP8(False, (1, 32), column_major_scales=True, backend="native"), (x[None],), ValueError,
             "column_major_scales needs a 2-D x"),
        ]:
            with pytest.raises(exc, match=match):
                getattr(layer, f"forward_{backend}")(*args)
