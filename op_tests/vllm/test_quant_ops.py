"""aiter_lite.vllm.ops' quantization ops and QuantFP8 against references written from vLLM's
semantics (its tests' references: tests/kernels/quant_utils.py, test_int8_quant.py,
test_fused_quant_layernorm.py, QuantFP8.forward_native). Scales equal the references' bit
for bit; values within one code where vLLM's tests allow it (``x * (1 / s)`` and ``x / s``
round apart at ties). Every allocation the ops make starts poisoned."""

from __future__ import annotations

import pytest
import torch

from aiter_lite.ops.triton.quant import supported_quant_dtypes
from aiter_lite.spec.quant import get_fp8_e4m3_dtype, quant_range
from aiter_lite.vllm import ops
from aiter_lite.vllm.model_executor.layers.quantization.input_quant_fp8 import GroupShape, QuantFP8
from op_tests.utils import DEVICE, DTYPES, ON_GPU, assert_close, make_rows
from op_tests.utils.inputs import poison_allocations

SUPPORTED = supported_quant_dtypes(DEVICE)
FP8S = tuple(d for d in SUPPORTED if d.is_floating_point)
E4M3 = get_fp8_e4m3_dtype(DEVICE)
SHAPES = [(0, 64), (1, 1), (1, 7), (7, 1000), (33, 127)]
EPS = 1e-6


@pytest.fixture(autouse=True)
def _poisoned(monkeypatch):
    poison_allocations(monkeypatch)


def _f32(t):
    return torch.full((), t, dtype=torch.float32, device=DEVICE)


def _codes_close(got, want, steps=1, name="output"):
    """fp8 / int8 values within ``steps`` codes (fp8: adjacent representable values)."""
    assert got.dtype == want.dtype and got.shape == want.shape, (got.dtype, want.dtype, got.shape, want.shape)
    if got.dtype == torch.int8:
        diff = (got.int() - want.int()).abs()
        assert diff.numel() == 0 or diff.max() <= steps, f"{name}: int8 off by {diff.max().item()}"
        return
    assert not got.float().isnan().any(), f"{name}: NaN (unwritten) values"

    def ordinal(t):  # fp8 codes in value order: sign-magnitude bytes as signed integers
        b = t.view(torch.uint8).int()
        return torch.where(b >= 128, -(b & 0x7F), b)

    diff = (ordinal(got) - ordinal(want)).abs()
    assert diff.numel() == 0 or diff.max() <= steps, (f"{name}: {(diff > steps).sum().item()} values more than {steps} "
                                                      f"code off, e.g. {got.float()[diff > steps][:4].tolist()} vs "
                                                      f"{want.float()[diff > steps][:4].tolist()}")


# ---------------------------------------------------------------------------
# references (vLLM's tests)


def _ref_per_token(x, qdtype, scale_ub=None):
    _, q_max = quant_range(qdtype)
    amax = x.float().abs().amax(-1, keepdim=True) if x.shape[-1] else x.float().new_zeros((*x.shape[:-1], 1))
    if scale_ub is not None:
        amax = amax.clamp(max=scale_ub)
    scale = (amax / _f32(q_max)).clamp(min=1.0 / (q_max * 512))
    return _quant(x, scale, qdtype), scale


def _quant(x, scale, qdtype):
    lo, hi = quant_range(qdtype)
    y = (x.float() * (1.0 / scale)).clamp(lo, hi)
    return (y.round() if qdtype == torch.int8 else y).to(qdtype)


def _narrow(y, dtype):
    """fp32 ``y`` in ``dtype`` as the kernels store it: the interpreter truncates to bf16 where
    GPUs round to nearest."""
    if dtype == torch.bfloat16 and not ON_GPU:
        return (y.float().view(torch.int32) & -65536).view(torch.float32).to(dtype)
    return y.to(dtype)


def _rms_ref(x, w, eps, residual=None):
    """vLLM's RMSNorm.forward_native: the sum in the dtype, x * rstd back in it, then weight."""
    if residual is not None:
        x = _narrow(x.float() + residual.float(), x.dtype)
        residual = x
    xf = x.float()
    y = _narrow(xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps), x.dtype)
    return (y if w is None else _narrow(y.float() * w.float(), x.dtype)), residual


def _ref_group(x, g, qdtype, eps=1e-10, ue8m0=False):
    _, q_max = quant_range(qdtype)
    xg = x.float().unflatten(-1, (x.shape[-1] // g, g))
    s = xg.abs().amax(-1).clamp(min=eps) / _f32(q_max)
    if ue8m0:
        s = torch.exp2(torch.ceil(torch.log2(s)))
    return _quant(xg, s[..., None], qdtype).flatten(-2), s


# ---------------------------------------------------------------------------
# scaled_fp8_quant


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("m,n", SHAPES)
@pytest.mark.parametrize("qdtype", FP8S)
@pytest.mark.parametrize("per_token", [False, True])
def test_scaled_fp8_quant_dynamic(dtype, m, n, qdtype, per_token):
    x = make_rows(m, n, dtype, strided=True, scale=3.0)
    out = torch.empty((m, n), dtype=qdtype, device=DEVICE)
    q, s = ops.scaled_fp8_quant(x, output=out, use_per_token_if_dynamic=per_token)
    assert q is out
    if per_token:
        q_ref, s_ref = _ref_per_token(x, qdtype)
        assert s.shape == (m, 1)
    else:
        q_ref, s_ref = _ref_per_token(x.reshape(1, -1), qdtype)
        q_ref, s_ref = q_ref.reshape(m, n), s_ref.reshape(1)
        assert s.shape == (1,)
    assert torch.equal(s, s_ref)
    _codes_close(q, q_ref)


def test_scaled_fp8_quant_defaults_padding_and_ub():
    x = make_rows(5, 96, torch.bfloat16, scale=4.0)
    q, s = ops.scaled_fp8_quant(x)
    assert q.dtype == E4M3 and s.shape == (1,)
    ub = torch.tensor([1.0], device=DEVICE)
    q, s = ops.scaled_fp8_quant(x, num_token_padding=8, scale_ub=ub, use_per_token_if_dynamic=True)
    assert q.shape == (8, 96) and s.shape == (8, 1)
    q_ref, s_ref = _ref_per_token(x, E4M3, scale_ub=1.0)
    assert torch.equal(s[:5], s_ref)
    _codes_close(q[:5], q_ref)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("m,n", [(0, 64), (1, 7), (7, 1000)])
@pytest.mark.parametrize("qdtype", FP8S)
def test_scaled_fp8_quant_static_per_tensor(dtype, m, n, qdtype):
    x = make_rows(m, n, dtype, strided=True, scale=3.0)
    scale = torch.tensor([0.05], device=DEVICE)
    q, s = ops.scaled_fp8_quant(x, scale, output=torch.empty((m, n), dtype=qdtype, device=DEVICE))
    assert s is scale
    _codes_close(q, _quant(x, scale, qdtype))


@pytest.mark.parametrize("kind", ["per_token", "per_token_2d", "per_channel", "block"])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("m", [0, 6])
def test_scaled_fp8_quant_static_groups(kind, dtype, m):
    n = 256
    x = make_rows(m, n, dtype, strided=True, scale=3.0)
    if kind == "per_token":
        scale, gs, full = torch.rand(m, device=DEVICE) + 0.01, (1, -1), lambda s: s[:, None]
    elif kind == "per_token_2d":
        scale, gs, full = torch.rand(m, 1, device=DEVICE) + 0.01, None, lambda s: s
    elif kind == "per_channel":
        scale, gs, full = torch.rand(n, device=DEVICE) + 0.01, (-1, 1), lambda s: s[None, :]
    else:
        scale, gs = torch.rand(max(m // 2, 1), 2, device=DEVICE) + 0.01, None
        full = lambda s: s.repeat_interleave(2, 0).repeat_interleave(128, 1)  # noqa: E731
    q, s = ops.scaled_fp8_quant(x, scale, group_shape=gs)
    assert s is scale and q.shape == (m, n)
    if m:
        _codes_close(q, _quant(x, full(scale), E4M3))


# ---------------------------------------------------------------------------
# scaled_int8_quant


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("m,n", SHAPES + [(3, 5137)])
def test_scaled_int8_quant_dynamic_symmetric(dtype, m, n):
    x = make_rows(m, n, dtype, strided=True) * 1000
    q, s, azp = ops.scaled_int8_quant(x)
    q_ref, s_ref = _ref_per_token(x, torch.int8)
    assert azp is None and s.shape == (m, 1)
    assert torch.equal(s, s_ref)
    _codes_close(q, q_ref)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("scale", [0.1, 2.1])
def test_scaled_int8_quant_static_symmetric(dtype, scale):
    x = make_rows(7, 1025, dtype, strided=True) * 1000
    scale_arg = torch.tensor([scale], device=DEVICE)
    q, s, azp = ops.scaled_int8_quant(x, scale_arg)
    assert s is scale_arg and azp is None
    _codes_close(q, (x.float() / scale_arg).round().clamp(-128, 127).to(torch.int8))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("m,n", [(1, 17), (7, 1025), (2, 20000)])
@pytest.mark.parametrize("scale,azp", [(0.1, -255), (2.1, 54)])
def test_scaled_int8_quant_static_azp(dtype, m, n, scale, azp):
    x = (torch.rand(m, n + 3, device=DEVICE) * 1000 - 300).to(dtype)[:, :n]
    scale_arg = torch.tensor([scale], device=DEVICE)
    azp_arg = torch.tensor([azp], dtype=torch.int32, device=DEVICE)
    q, s, z = ops.scaled_int8_quant(x, scale_arg, azp_arg, symmetric=False)
    assert s is scale_arg and z is azp_arg
    want = ((x.float() / scale).round() + azp).clamp(-128, 127).to(torch.int8)
    _codes_close(q, want)
    exact = ((x.float() * (1.0 / scale_arg)).round() + azp).clamp(-128, 127).to(torch.int8)
    assert torch.equal(q, exact)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("m,n", [(0, 17), (1, 17), (7, 1025), (3, 5137), (2, 40000)])
def test_scaled_int8_quant_dynamic_azp(dtype, m, n):
    x = (torch.rand(m, n + 5, device=DEVICE) * 1000 - 300).to(dtype)[:, :n]
    q, s, z = ops.scaled_int8_quant(x, symmetric=False)
    assert s.shape == (m, 1) and z.shape == (m, 1) and z.dtype == torch.int32
    xf = x.float()
    hi, lo = xf.amax(1, keepdim=True), xf.amin(1, keepdim=True)
    scales = (hi - lo) / torch.full_like(hi, 255.0)  # a division (by a CPU scalar torch multiplies by 1 / 255)
    azps = torch.round(torch.tensor(-128.0) - lo / scales).to(torch.int32)
    want = ((xf / scales).round() + azps).clamp(-128, 127).to(torch.int8)
    assert torch.equal(s, scales)
    assert torch.equal(z, azps)
    _codes_close(q, want, steps=1)


@pytest.mark.parametrize("is_max", [True, False])
def test_scaled_int8_quant_azp_saturates(is_max):
    val = float(torch.iinfo(torch.int32).max if is_max else torch.iinfo(torch.int32).min)
    inf = float("inf")
    x = torch.tensor([[val, val + 1, val - 1, val * 2, -inf if not is_max else inf]], device=DEVICE)
    q, _, _ = ops.scaled_int8_quant(x, torch.scalar_tensor(1.0, device=DEVICE),
                                    torch.scalar_tensor(0, dtype=torch.int32, device=DEVICE), symmetric=False)
    assert torch.equal(q, torch.full((1, 5), 127 if is_max else -128, dtype=torch.int8, device=DEVICE))


# ---------------------------------------------------------------------------
# per_token_group_quant_fp8


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(0, 128), (1, 128), (7, 512), (2, 3, 256)])
@pytest.mark.parametrize("layout", ["row", "col", "tma"])
@pytest.mark.parametrize("qdtype", FP8S)
def test_per_token_group_quant_fp8(dtype, shape, layout, qdtype):
    x = make_rows(shape[-2], shape[-1], dtype, strided=True, lead=shape[:-2], scale=3.0)
    q, s = ops.per_token_group_quant_fp8(x, 64, dtype=qdtype, column_major_scales=layout != "row",
                                         tma_aligned_scales=layout == "tma")
    q_ref, s_ref = _ref_group(x, 64, qdtype)
    assert s.shape == s_ref.shape
    if layout != "row" and shape[-2] > 1:
        assert s.stride(-2) == 1
    assert torch.equal(s, s_ref)
    _codes_close(q, q_ref)


def test_per_token_group_quant_fp8_ue8m0_and_out_q():
    x = make_rows(5, 256, torch.bfloat16, scale=3.0)
    out_q = torch.empty(5, 256, dtype=E4M3, device=DEVICE)
    q, s = ops.per_token_group_quant_fp8(x, 128, out_q=out_q, use_ue8m0=True)
    q_ref, s_ref = _ref_group(x, 128, E4M3, ue8m0=True)
    assert q is out_q
    assert torch.equal(s, s_ref)
    assert torch.equal(s, torch.exp2(torch.log2(s).round()))
    _codes_close(q, q_ref)


# ---------------------------------------------------------------------------
# RMSNorm + quantization


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("m,n", [(0, 64), (1, 64), (7, 1033), (5, 127), (2, 16500)])  # the last looped
@pytest.mark.parametrize("qdtype", SUPPORTED)
@pytest.mark.parametrize("add_residual", [False, True])
def test_rms_norm_dynamic_per_token_quant(dtype, m, n, qdtype, add_residual):
    x = make_rows(m, n, dtype, strided=True)
    w = (torch.rand(n, device=DEVICE) + 0.5).to(dtype)
    r = make_rows(m, n, dtype) if add_residual else None
    ub = torch.tensor([2.0], device=DEVICE) if qdtype != torch.int8 else None
    y_ref, r_ref = _rms_ref(x, w, EPS, r)
    q_ref, s_ref = _ref_per_token(y_ref, qdtype, None if ub is None else 2.0)
    r_in = None if r is None else r.clone()
    q, s = ops.rms_norm_dynamic_per_token_quant(x, w, EPS, qdtype, scale_ub=ub, residual=r_in)
    assert s.shape == (m, 1) and q.dtype == qdtype
    if add_residual:
        assert torch.equal(r_in, r_ref)
    assert_close(s, s_ref, name="scales", atol=0, rtol=1e-5)
    _codes_close(q, q_ref)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("qdtype", SUPPORTED)
@pytest.mark.parametrize("layout", [(False, 0), (True, 0), (True, 4)])
@pytest.mark.parametrize("add_residual", [False, True])
@pytest.mark.parametrize("m,n,g", [(7, 256, 64), (1, 192, 64), (2, 16896, 128)])  # rows past 16384: norm, then quant
def test_rms_norm_per_block_quant(dtype, qdtype, layout, add_residual, m, n, g):
    x = make_rows(m, n, dtype, strided=True)
    w = (torch.rand(n, device=DEVICE) + 0.5).to(dtype)
    r = make_rows(m, n, dtype) if add_residual else None
    y_ref, r_ref = _rms_ref(x, w, EPS, r)
    q_ref, s_ref = _ref_group(y_ref, g, qdtype)
    r_in = None if r is None else r.clone()
    q, s = ops.rms_norm_per_block_quant(x, w, EPS, qdtype, [1, g], residual=r_in, is_scale_transposed=layout[0],
                                        tma_alignment=layout[1])
    if add_residual:
        assert torch.equal(r_in, r_ref)
    assert s.shape == (m, n // g) and (not layout[0] or s.stride(0) == 1)
    assert_close(s, s_ref, name="scales", atol=0, rtol=1e-5)
    _codes_close(q, q_ref)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("qdtype", SUPPORTED)
@pytest.mark.parametrize("transposed", [False, True])
@pytest.mark.parametrize("m", [0, 1, 9])
def test_silu_and_mul_per_block_quant(dtype, qdtype, transposed, m):
    d = 256
    x = make_rows(m, 2 * d, dtype)
    y = torch.nn.functional.silu(x[:, :d].float()) * x[:, d:].float()
    q, s = ops.silu_and_mul_per_block_quant(x, 128, qdtype, is_scale_transposed=transposed)
    q_ref, s_ref = _ref_group(y, 128, qdtype)
    assert s.shape == (m, 2) and (not transposed or m < 2 or s.stride(0) == 1)
    assert_close(s, s_ref, name="scales", atol=1e-6, rtol=2e-2)
    if m:
        assert_close(q.float() * s.repeat_interleave(128, 1), y, name="dequantized", atol=0.2, rtol=0.15)


# ---------------------------------------------------------------------------
# QuantFP8


@pytest.mark.parametrize("static,group_shape", [
    (False, GroupShape.PER_TENSOR), (False, GroupShape.PER_TOKEN), (True, GroupShape.PER_TENSOR),
    (True, GroupShape.PER_TOKEN), (True, GroupShape.PER_CHANNEL), (False, GroupShape(1, 64)),
])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("m", [1, 9])
def test_quant_fp8_layer(static, group_shape, dtype, m):
    n = 256
    x = make_rows(m, n, dtype, scale=3.0)
    layer = QuantFP8(static, group_shape, column_major_scales=group_shape.is_per_group())
    scale = None
    if static:
        scale = {GroupShape.PER_TENSOR: lambda: torch.tensor([0.02], device=DEVICE),
                 GroupShape.PER_TOKEN: lambda: torch.rand(m, 1, device=DEVICE) + 0.01,
                 GroupShape.PER_CHANNEL: lambda: torch.rand(n, device=DEVICE) + 0.01}[group_shape]()
    q, s = layer(x, scale)
    q_ref, s_ref = layer.forward_native(x, scale)
    if group_shape.is_per_group():
        assert s.stride(0) == 1 or m == 1
    assert s.shape == s_ref.shape
    # forward_native (as vLLM's) divides amax by a Python float, which torch does on a GPU as a
    # multiply by its reciprocal; the kernels divide (as vLLM's CUDA kernels): a unit apart at most
    assert_close(s, s_ref, atol=0, rtol=2.0 ** -23 if ON_GPU else 0, name="scales")
    _codes_close(q, q_ref)


def test_quant_fp8_layer_padding_and_refusals():
    x = make_rows(3, 64, torch.bfloat16)
    layer = QuantFP8(False, GroupShape.PER_TOKEN, num_token_padding=8)
    q, s = layer(x, scale_ub=torch.tensor([1.0], device=DEVICE))
    assert q.shape == (8, 64)
    with pytest.raises(ValueError, match="QuantFP8: dynamic quantization"):
        QuantFP8(False, GroupShape.PER_CHANNEL)
    with pytest.raises(ValueError, match="QuantFP8: a dynamic layer takes no scale"):
        QuantFP8(False, GroupShape.PER_TENSOR)(x, torch.ones(1, device=DEVICE))
    with pytest.raises(ValueError, match="QuantFP8: scale_ub"):
        QuantFP8(False, GroupShape.PER_TENSOR)(x, scale_ub=torch.ones(1, device=DEVICE))


# ---------------------------------------------------------------------------
# refusals


def test_bad_arguments_raise_naming_op_and_argument():
    x = make_rows(4, 64, torch.bfloat16)
    cases = [
        (TypeError, "scaled_fp8_quant: input", lambda: ops.scaled_fp8_quant(x.int())),
        (ValueError, "scaled_fp8_quant: input must be 2-D", lambda: ops.scaled_fp8_quant(x[None])),
        (TypeError, "scaled_fp8_quant: output's dtype", lambda: ops.scaled_fp8_quant(
            x, output=torch.empty(4, 64, dtype=torch.int8, device=DEVICE))),
        (ValueError, "scaled_fp8_quant: a scale of shape", lambda: ops.scaled_fp8_quant(
            x, torch.ones(4, device=DEVICE))),
        (ValueError, "scaled_fp8_quant: scale must have", lambda: ops.scaled_fp8_quant(
            x, torch.ones(5, device=DEVICE), group_shape=(1, -1))),
        (TypeError, "scaled_fp8_quant: scale must be", lambda: ops.scaled_fp8_quant(x, torch.ones(1, 1).half())),
        (ValueError, "scaled_int8_quant: azp", lambda: ops.scaled_int8_quant(x, torch.ones(1, device=DEVICE),
                                                                              symmetric=False)),
        (TypeError, "scaled_int8_quant: azp must be int32", lambda: ops.scaled_int8_quant(
            x, torch.ones(1, device=DEVICE), torch.ones(1, device=DEVICE), symmetric=False)),
        (TypeError, "scaled_int8_quant: symmetric", lambda: ops.scaled_int8_quant(x, symmetric="no")),
        (ValueError, "per_token_group_quant_fp8: group_size", lambda: ops.per_token_group_quant_fp8(x, 48)),
        (TypeError, "per_token_group_quant_fp8: dtype", lambda: ops.per_token_group_quant_fp8(
            x, 32, dtype=torch.float16)),
        (ValueError, "rms_norm_dynamic_per_token_quant: weight", lambda: ops.rms_norm_dynamic_per_token_quant(
            x, torch.ones(3, device=DEVICE, dtype=x.dtype), EPS, E4M3)),
        (TypeError, "rms_norm_dynamic_per_token_quant: quant_dtype", lambda: ops.rms_norm_dynamic_per_token_quant(
            x, None, EPS, torch.float16)),
        (ValueError, "rms_norm_per_block_quant: group_size", lambda: ops.rms_norm_per_block_quant(
            x, None, EPS, E4M3, [1, 48])),
        (ValueError, "rms_norm_per_block_quant: scale_ub", lambda: ops.rms_norm_per_block_quant(
            x, None, EPS, E4M3, [1, 32], scale_ub=torch.ones(1, device=DEVICE))),
        (ValueError, "rms_norm_per_block_quant: tma_alignment", lambda: ops.rms_norm_per_block_quant(
            x, None, EPS, E4M3, [1, 32], tma_alignment=8)),
        (ValueError, "silu_and_mul_per_block_quant: input", lambda: ops.silu_and_mul_per_block_quant(
            x[0], 32, E4M3)),
        (ValueError, "silu_and_mul_per_block_quant: group_size", lambda: ops.silu_and_mul_per_block_quant(
            x, 24, E4M3)),
    ]
    for exc, match, call in cases:
        with pytest.raises(exc, match=match):
            call()


def test_exported():
    from aiter_lite.vllm import _custom_ops
    for name in ("scaled_fp8_quant", "scaled_int8_quant", "per_token_group_quant_fp8",
                 "rms_norm_dynamic_per_token_quant", "rms_norm_per_block_quant", "silu_and_mul_per_block_quant"):
        assert name in _custom_ops.__all__ and getattr(ops, name) is getattr(_custom_ops, name)
