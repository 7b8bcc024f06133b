"""Gated activation fused with quantization, against this project's unfused pair
(``act_and_mul`` then the quant op) and against the fp32 native reference.

The fused kernel rounds y to x's dtype exactly where ``act_and_mul`` stores it, so its
scales equal the unfused pair's bit for bit and its values are within one step (in
practice equal). The native reference's y may differ from the kernel's by a unit in
the last place of x's dtype (exp / erf implementations, rounding), which moves an amax,
and near zero by more in relative terms (torch's tanh-form GELU cancels in 1 + tanh for
large negative inputs, where fp8 still resolves tiny values): its scales are compared
within the input dtype's tolerance, its dequantized values within one step plus that
unit at the row's amax. Every buffer the ops allocate starts poisoned, so an unwritten
element fails.
"""

import pytest
import torch

from aiter_lite.ops.native.quant import act_quant as native
from aiter_lite.ops.native.activation import gated
from aiter_lite.ops.triton import quant
from aiter_lite.ops.triton.activation import act_and_mul
from aiter_lite.ops.triton.quant import act_quant as fused
from aiter_lite.ops.triton.quant.quant import QuantLaunchConfig
from aiter_lite.spec.device import INTERPRETER, PROFILES
from op_tests.triton_tests.quant.test_quant import (  # noqa: F401  (_storable: skips qdtypes this device cannot store)
    BADS,
    SUPPORTED,
    _assert_codes,
    _assert_scales,
    _poisoned_q,
    _same,
    _storable,
    assert_nonfinite_isolated,
)
from op_tests.triton_tests.quant.test_quant import _assert_dequant as _dequant_within
from op_tests.triton_tests.test_activation import assert_each_tensor_refused_on_meta
from op_tests.utils import DEVICE, DTYPES, ON_GPU, assert_close, by_device, make_rows
from op_tests.utils.inputs import poison_allocations

ACTIVATIONS = ("silu", "gelu", "gelu_tanh")
Q_DTYPES = (torch.float8_e4m3fn, torch.float8_e4m3fnuz, torch.float8_e5m2, torch.int8)
# (rows, d, activation, strided): the input is (rows, 2d). M = 0 and 1, odd widths, a
# tensor-parallel shard of 1368 (d = 684), strided rows; on a GPU, serving shapes and
# rows past the per-token register path (looped), rows the per-token quant kernel would
# split over programs (a wave of rows, 131072 wide: looped here).
CASES = by_device(
    [(0, 64, "silu", False), (1, 1, "gelu", False), (1, 684, "gelu_tanh", True), (5, 127, "silu", True),
     (33, 269, "gelu", False), (3, 1368, "gelu_tanh", True)],
    [(0, 64, "silu", False), (1, 1, "gelu", False), (1, 684, "gelu_tanh", True), (5, 127, "silu", True),
     (33, 269, "gelu", False), (3, 1368, "gelu_tanh", True), (4096, 7168, "silu", False),
     (16384, 2048, "gelu", True), (2, 14336, "silu", True), (3, 16385, "gelu_tanh", False),
     (1024, 18432, "silu", False), (1, 28672, "gelu", True), (300, 131072, "silu", False)],
)
# (rows, d, group_size, column_major, activation)
GROUP_CASES = by_device(
    [(0, 128, 128, False, "silu"), (1, 128, 128, True, "gelu"), (5, 200, 64, False, "gelu_tanh"),
     (9, 684, 128, True, "silu"), (2, 1000, 64, True, "gelu"), (3, 1408, 128, False, "gelu_tanh")],
    [(0, 128, 128, False, "silu"), (1, 128, 128, True, "gelu"), (5, 200, 64, False, "gelu_tanh"),
     (33, 684, 128, True, "silu"), (2, 1000, 64, True, "gelu"), (3, 1408, 128, False, "gelu_tanh"),
     (4096, 7168, 128, True, "silu"), (16384, 2048, 64, False, "gelu"), (3, 65600, 128, False, "silu")],
)


@pytest.fixture
def poisoned_empty(monkeypatch):
    """Allocations start poisoned (NaN; fp8 its NaN byte; int8 0x5A), so an element an
    allocating op does not write fails."""
    poison_allocations(monkeypatch)


def _input(m, d, dtype, strided=False, lead=()):
    """(*lead, m, 2d): gate then up, one all-zero row (the scale's floor)."""
    x = make_rows(m, 2 * d, dtype, strided=strided, scale=3.0, lead=lead)
    if m > 1:
        x[..., m // 2, :] = 0
    return x


def _unfused_y(x, activation):
    """This project's act_and_mul: y in x's dtype."""
    y = torch.empty((*x.shape[:-1], x.shape[-1] // 2), dtype=x.dtype, device=x.device)
    return act_and_mul(y, x, activation)


# Two units in the last place of x's dtype, relative: y's budget against the native reference.
Y_RTOL = {torch.float32: 1e-6, torch.float16: 2 * 2**-11, torch.bfloat16: 2 * 2**-8}


def _assert_scales_close(got, want, dtype, name):
    assert torch.isfinite(got).all() and (got > 0).all(), f"{name}: a scale is not finite and positive"
    assert_close(got, want, atol=0.0, rtol=2 * Y_RTOL[dtype], name=name)


def _assert_dequant(q, s, q_ref, s_ref, dtype, name, row_amax=None):
    _dequant_within(q, s, q_ref, s_ref, name, Y_RTOL[dtype], row_amax)


def _check_per_token(x, activation, qdtype, q, s, scale_ub=None):
    d = x.shape[-1] // 2
    assert q.shape == (*x.shape[:-1], d) and q.dtype == qdtype
    assert s.shape == (*x.shape[:-1], 1) and s.dtype == torch.float32
    q_un, s_un = quant.scaled_fp8_quant(_unfused_y(x, activation), scale_ub=scale_ub, use_per_token_if_dynamic=True,
                                        dtype=qdtype)
    _assert_scales(s, s_un, "per-token scale vs unfused")
    _assert_codes(q, q_un, "per-token vs unfused")
    q_ref, s_ref = native.act_mul_and_fp8_quant(x, activation, None, qdtype, scale_ub=scale_ub)
    _assert_scales_close(s, s_ref, x.dtype, "per-token scale vs native")
    _assert_dequant(q, s, q_ref, s_ref, x.dtype, "per-token vs native")


@pytest.mark.parametrize("case", CASES, ids=str)
@pytest.mark.parametrize("qdtype", Q_DTYPES, ids=str)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_per_token(dtype, qdtype, case, poisoned_empty):
    m, d, activation, strided = case
    x = _input(m, d, dtype, strided)
    q, s = fused.act_mul_and_fp8_quant(x, activation, dtype_quant=qdtype)
    _check_per_token(x, activation, qdtype, q, s)
    if m > 1:  # the zero row: zeros and the floor 1 / (q_max * 512)
        assert (q[m // 2].float() == 0).all()
        assert s[m // 2].item() == pytest.approx(1 / (quant.quant_range(qdtype)[1] * 512))


@pytest.mark.parametrize("case", CASES, ids=str)
@pytest.mark.parametrize("qdtype", Q_DTYPES, ids=str)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_static(dtype, qdtype, case, poisoned_empty):
    m, d, activation, strided = case
    x = _input(m, d, dtype, strided)
    # a scale that saturates the largest values: y's amax lands past q_max
    scale = torch.tensor([1.5 / quant.quant_range(qdtype)[1]], device=DEVICE)
    q, s = fused.act_mul_and_fp8_quant(x, activation, scale, qdtype)
    assert s is scale and q.shape == (m, d) and q.dtype == qdtype
    q_un = quant.static_per_tensor_quant_fp8_i8(_poisoned_q((m, d), qdtype), _unfused_y(x, activation), scale)
    _assert_codes(q, q_un, "static vs unfused")
    q_ref, _ = native.act_mul_and_fp8_quant(x, activation, scale, qdtype)
    # y's rounding is relative to its own amax, which the saturating scale clips in q_ref
    y_amax = gated(x, activation).float().abs().amax(-1, keepdim=True) if m else None
    _assert_dequant(q, scale, q_ref, scale, dtype, "static vs native", y_amax)
    if activation == "silu":  # vLLM's form, into a caller's (poisoned) out
        out = _poisoned_q((m, d), qdtype)
        assert fused.silu_and_mul_quant(out, x, scale) is out
        assert torch.equal(out.view(torch.uint8), q.view(torch.uint8))
        q_ref = native.silu_and_mul_quant(torch.empty_like(out), x, scale)
        _assert_dequant(out, scale, q_ref, scale, dtype, "silu_and_mul_quant vs native", y_amax)


@pytest.mark.parametrize("case", GROUP_CASES, ids=str)
@pytest.mark.parametrize("qdtype", Q_DTYPES, ids=str)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_group(dtype, qdtype, case, poisoned_empty):
    m, d, group, column_major, activation = case
    x = _input(m, d, dtype)
    if d > group:
        x[:, group:2 * group] = 0  # an all-zero gate group: scale eps / q_max
    q, s = fused.act_mul_and_fp8_group_quant(x, activation, group, qdtype, column_major_scales=column_major)
    assert q.shape == (m, d) and q.dtype == qdtype and s.shape == (m, -(-d // group)) and s.dtype == torch.float32
    if column_major and m > 1:
        assert s.stride(0) == 1
    y = _unfused_y(x, activation)
    q_un, s_un = quant.per_token_group_quant_fp8(y, group, dtype=qdtype, column_major_scales=column_major)
    _assert_scales(s, s_un, "group scale vs unfused")
    _assert_codes(q, q_un, "group vs unfused")
    q_ref, s_ref = native.act_mul_and_fp8_group_quant(x, activation, group, qdtype)
    _assert_scales_close(s, s_ref, dtype, "group scale vs native")

    def by_column(scales):
        return scales.repeat_interleave(group, -1)[..., :d]

    _assert_dequant(q, by_column(s), q_ref, by_column(s_ref), dtype, "group vs native")
    if d > group and m:  # the zero group: eps / q_max by an IEEE division, zeros
        floor = torch.full((), 1e-10, device=DEVICE) / torch.full((), quant.quant_range(qdtype)[1], device=DEVICE)
        assert (s[:, 1] == floor).all() and (q[:, group:2 * group].float() == 0).all()


@pytest.mark.parametrize("activation", ACTIVATIONS)
def test_three_dims(activation, poisoned_empty):
    """3-D inputs: rows of one stride (strided), and rows of two strides (gathered by a copy)."""
    qdtype = SUPPORTED[0]
    for x in (_input(3, 100, torch.bfloat16, strided=True, lead=(2,)), _input(4, 100, torch.float16, lead=(2,))[:, 1:]):
        q, s = fused.act_mul_and_fp8_quant(x, activation, dtype_quant=qdtype)
        _check_per_token(x, activation, qdtype, q, s)
        q, s = fused.act_mul_and_fp8_group_quant(x, activation, 64, qdtype)
        assert q.shape == (2, 3, 100) and s.shape == (2, 3, 2)
        q_un, s_un = quant.per_token_group_quant_fp8(_unfused_y(x, activation).reshape(6, 100), 64, dtype=qdtype)
        _assert_scales(s.reshape(6, 2), s_un, "3-D group scale")
        _assert_codes(q.reshape(6, 100), q_un, "3-D group")


# Pinned launches, so the interpreter covers every code path cheaply: looped rows (several
# chunks, a partial last one), several rows a program, tiles that divide (EVEN).
PINNED = {
    "looped": ("per_token", QuantLaunchConfig(1, 64, 4, LOOPED=True), (5, 300)),
    "looped_2rows": ("per_token", QuantLaunchConfig(2, 64, 4, LOOPED=True), (5, 300)),
    "looped_even": ("per_token", QuantLaunchConfig(1, 64, 4, LOOPED=True), (4, 256)),
    "rows": ("per_token", QuantLaunchConfig(4, 512, 4), (5, 300)),
    "rows_even": ("per_token", QuantLaunchConfig(2, 128, 4), (4, 128)),
    "static_even": ("static", QuantLaunchConfig(2, 64, 4), (4, 256)),
    "group_even": ("group", QuantLaunchConfig(2, 128, 4), (4, 256)),
    "group_one": ("group", QuantLaunchConfig(4, 64, 4), (5, 300)),
}


@pytest.mark.parametrize("name", PINNED)
def test_pinned_configs(name, poisoned_empty):
    mode, cfg, (m, d) = PINNED[name]
    qdtype, activation = SUPPORTED[0], "gelu_tanh"
    x = _input(m, d, torch.bfloat16)
    if mode == "per_token":
        q, s = fused.act_mul_and_fp8_quant(x, activation, dtype_quant=qdtype, config=cfg)
        _check_per_token(x, activation, qdtype, q, s)
    elif mode == "static":
        scale = torch.tensor([0.01], device=DEVICE)
        q, _ = fused.act_mul_and_fp8_quant(x, activation, scale, qdtype, config=cfg)
        want = quant.static_per_tensor_quant_fp8_i8(_poisoned_q((m, d), qdtype), _unfused_y(x, activation), scale)
        _assert_codes(q, want, f"static {cfg}")
    else:
        q, s = fused.act_mul_and_fp8_group_quant(x, activation, 64, qdtype, config=cfg)
        q_un, s_un = quant.per_token_group_quant_fp8(_unfused_y(x, activation), 64, dtype=qdtype)
        _assert_scales(s, s_un, f"group scale {cfg}")
        _assert_codes(q, q_un, f"group {cfg}")


def test_launch_configs():
    cfg = fused.act_quant_launch_config("per_token", 4, 1 << 20)
    assert cfg.LOOPED and cfg.BLOCK_M == 1
    cfg = fused.act_quant_launch_config("per_token", 4, 16384)
    assert not cfg.LOOPED and cfg.BLOCK_N == 16384
    for group in (64, 128, 1024, 8192):
        cfg = fused.act_quant_launch_config("group", 100, 100, INTERPRETER, group)
        assert cfg.BLOCK_N % group == 0 and not cfg.LOOPED
    with pytest.raises(ValueError, match="multiple of group_size"):
        fused.act_mul_and_fp8_group_quant(_input(2, 256, torch.float32), "silu", 128, config=QuantLaunchConfig(1, 64, 4))


@pytest.mark.parametrize("profile", PROFILES.values(), ids=lambda p: p.name)
def test_per_token_configs_hold_whole_rows(profile):
    """Every device's per-token launch loops or holds the whole row; this kernel has no
    split-row mode, so rows the quant kernel splits (a wave of rows, > 65536 wide) loop."""
    for m in (1, 7, profile.sms, 4 * profile.sms, 65536):
        for d in (1, 4096, 16384, 16385, 65537, 131072, 262144, 1 << 20):
            cfg = fused.act_quant_launch_config("per_token", m, d, profile)
            assert not cfg.SPLIT and (cfg.LOOPED or cfg.BLOCK_N >= d), (m, d, cfg)


@pytest.mark.parametrize("cfg", [QuantLaunchConfig(1, 64, 4), QuantLaunchConfig(1, 64, 4, SPLIT=True)], ids=str)
def test_per_token_pinned_partial_rows_refused(cfg):
    x = _input(2, 300, torch.float32)
    with pytest.raises(ValueError, match="holds whole rows"):
        fused.act_mul_and_fp8_quant(x, "silu", config=cfg)
    with pytest.raises(ValueError, match="needs BLOCK_N >= the 300 columns"):
        quant.dynamic_per_token_quant_fp8_i8(torch.empty(2, 300, dtype=torch.int8, device=DEVICE), x[:, :300],
                                             torch.empty(2, 1, device=DEVICE), config=QuantLaunchConfig(1, 64, 4))


def test_wide_group_and_row_chunks(monkeypatch, poisoned_empty):
    """A group wider than the tile (one group a tile); more row blocks than grid axis 1
    holds (further launches, made to happen with a small limit); 64-bit offsets."""
    x = _input(7, 300, torch.float16, strided=True)
    y = _unfused_y(x, "silu")
    q, s = fused.act_mul_and_fp8_group_quant(x, "silu", 256, torch.int8)
    q_un, s_un = quant.per_token_group_quant_fp8(y, 256, dtype=torch.int8)
    _assert_scales(s, s_un, "group 256")
    _assert_codes(q, q_un, "group 256")
    monkeypatch.setattr(fused, "_MAX_GRID_Y", 2)
    monkeypatch.setattr(fused, "_needs_int64", lambda *args: True)
    cfg = QuantLaunchConfig(1, 128, 4)
    for column_major in (False, True):
        q, s = fused.act_mul_and_fp8_group_quant(x, "silu", 64, torch.int8, column_major_scales=column_major,
                                                 config=cfg)
        q_un, s_un = quant.per_token_group_quant_fp8(y, 64, dtype=torch.int8)
        _assert_scales(s, s_un, "group in row chunks")
        _assert_codes(q, q_un, "group in row chunks")
    scale = torch.tensor([0.02], device=DEVICE)
    q, _ = fused.act_mul_and_fp8_quant(x, "silu", scale, torch.int8, config=cfg)
    _assert_codes(q, quant.static_per_tensor_quant_fp8_i8(_poisoned_q(y.shape, torch.int8), y, scale), "static chunks")
    for cfg in (QuantLaunchConfig(2, 512, 4), QuantLaunchConfig(1, 64, 4, LOOPED=True)):
        q, s = fused.act_mul_and_fp8_quant(x, "silu", dtype_quant=torch.int8, config=cfg)
        _check_per_token(x, "silu", torch.int8, q, s)


def test_scale_ub(poisoned_empty):
    x = _input(8, 500, torch.bfloat16)
    ub = torch.tensor([2.0], device=DEVICE)
    for qdtype in SUPPORTED:
        q, s = fused.act_mul_and_fp8_quant(x, "silu", dtype_quant=qdtype, scale_ub=ub)
        _check_per_token(x, "silu", qdtype, q, s, scale_ub=ub)
        q_max = quant.quant_range(qdtype)[1]
        capped = torch.full_like(s, 2.0 / q_max)
        capped[4] = 1 / (q_max * 512)  # the zero row keeps the floor
        assert torch.equal(s, capped)  # every other row's amax is above 2


def test_zero_input():
    x = torch.zeros(4, 200, device=DEVICE, dtype=torch.bfloat16)
    for qdtype in SUPPORTED:
        q_max = quant.quant_range(qdtype)[1]
        q, s = fused.act_mul_and_fp8_quant(x, "gelu", dtype_quant=qdtype)
        assert (s == torch.tensor(1 / (q_max * 512))).all() and (q.float() == 0).all()
        q, s = fused.act_mul_and_fp8_group_quant(x, "silu", 64, qdtype)
        assert torch.isfinite(s).all() and (s > 0).all() and (q.float() == 0).all()
    # rows of no columns: scales at the floor, nothing else
    q, s = fused.act_mul_and_fp8_quant(torch.empty(3, 0, device=DEVICE), "silu", dtype_quant=torch.int8)
    assert q.shape == (3, 0) and torch.equal(s, torch.full((3, 1), 1 / (127 * 512), device=DEVICE))
    q, s = fused.act_mul_and_fp8_group_quant(torch.empty(3, 0, device=DEVICE), "silu", 64, torch.int8)
    assert q.shape == (3, 0) and s.shape == (3, 0)


def test_default_dtype():
    q, _ = fused.act_mul_and_fp8_quant(make_rows(2, 16), "silu")
    assert q.dtype == quant.get_fp8_e4m3_dtype(DEVICE)
    q, _ = fused.act_mul_and_fp8_group_quant(make_rows(2, 256), "silu", 64)
    assert q.dtype == quant.get_fp8_e4m3_dtype(DEVICE)


def test_bad_inputs():
    x = make_rows(4, 128, torch.bfloat16)
    one = torch.ones(1, device=DEVICE)
    out = torch.empty(4, 64, dtype=torch.int8, device=DEVICE)
    group, per_tensor = fused.act_mul_and_fp8_group_quant, fused.act_mul_and_fp8_quant
    with pytest.raises(ValueError, match=r"x last dim must be even .* got shape \(4, 127\)"):
        per_tensor(x[:, :127], "silu")
    with pytest.raises(ValueError, match=r"input last dim must be even"):
        fused.silu_and_mul_quant(out, x[:, :127], one)
    with pytest.raises(ValueError, match="activation must be one of 'silu', 'gelu', 'gelu_tanh', got 'swish'"):
        group(x, "swish", 64)
    with pytest.raises(ValueError, match="activation must be one of .* got 'relu'"):
        per_tensor(x, "relu")
    with pytest.raises(ValueError, match="group_size must be a power of 2 from 1 to 8192, got 48"):
        group(x, "silu", 48)
    with pytest.raises(TypeError, match="group_size must be an int, got float"):
        group(x, "silu", 64.0)
    with pytest.raises(ValueError, match=r"scale must have one element .* got shape \(2,\)"):
        per_tensor(x, "silu", torch.ones(2, device=DEVICE))
    with pytest.raises(ValueError, match="scale must have one element"):
        fused.silu_and_mul_quant(out, x, torch.ones(1, 2, device=DEVICE))
    with pytest.raises(TypeError, match="scale must be float32, got torch.float16"):
        per_tensor(x, "silu", one.half())
    with pytest.raises(ValueError, match="scale_ub must have one element"):
        per_tensor(x, "silu", scale_ub=torch.ones(4, device=DEVICE))
    with pytest.raises(ValueError, match="scale_ub bounds dynamic per-token scales"):
        per_tensor(x, "silu", one, scale_ub=one)
    with pytest.raises(TypeError, match="dtype_quant must be one of .* got torch.float16"):
        per_tensor(x, "silu", dtype_quant=torch.float16)
    with pytest.raises(TypeError, match="x must be float32, float16 or bfloat16, got torch.int32"):
        group(x.to(torch.int32), "silu", 64)
    with pytest.raises(ValueError, match="x must have unit stride in its last dim"):
        per_tensor(make_rows(64, 4, torch.float32).t(), "silu")
    with pytest.raises(ValueError, match="column_major_scales needs a 2-D x"):
        group(x.reshape(2, 2, 128), "silu", 64, column_major_scales=True)
    with pytest.raises(TypeError, match="out must be one of .* got torch.bfloat16"):
        fused.silu_and_mul_quant(x[:, :64].clone(), x, one)
    with pytest.raises(ValueError, match=r"out must have shape \(4, 64\) for input \(4, 128\), got \(4, 128\)"):
        fused.silu_and_mul_quant(torch.empty(4, 128, dtype=torch.int8, device=DEVICE), x, one)
    with pytest.raises(TypeError, match="x must be a torch.Tensor"):
        per_tensor(x.tolist(), "silu")
    if ON_GPU:
        with pytest.raises(ValueError, match="scale must be on x's device"):
            per_tensor(x, "silu", torch.ones(1))


def test_unsupported_dtype():
    """A quant dtype this device cannot store is a ValueError naming it."""
    x = make_rows(2, 128, torch.bfloat16)
    for qdtype in Q_DTYPES:
        if qdtype in SUPPORTED:
            continue
        with pytest.raises(ValueError, match=f"dtype_quant of dtype {qdtype} cannot be written"):
            fused.act_mul_and_fp8_group_quant(x, "silu", 64, qdtype)
        with pytest.raises(ValueError, match=f"out of dtype {qdtype} cannot be written"):
            fused.silu_and_mul_quant(torch.empty(2, 64, dtype=qdtype, device=DEVICE), x, torch.ones(1, device=DEVICE))


# torch.compile(fullgraph=True): the launches are registered custom ops.
COMPILE_BACKEND = "inductor" if ON_GPU else "aot_eager"


def test_opcheck_launches():
    from torch.library import opcheck

    x = make_rows(5, 256, torch.float32)
    q = torch.empty(5, 128, dtype=torch.int8, device=DEVICE)
    launch = torch.ops.aiter_lite.launch_act_quant
    opcheck(launch, (x, q, torch.ones(1, device=DEVICE), None, "silu", "static", 1))
    opcheck(launch, (x, q, torch.empty(5, device=DEVICE), None, "gelu", "per_token", 1))
    opcheck(launch, (x, q, torch.empty(5, 2, device=DEVICE), None, "gelu_tanh", "group", 64))


def test_compiled():
    x = make_rows(6, 2 * 96, torch.bfloat16, lead=(2,))
    scale = torch.tensor([0.01], device=DEVICE)

    def block(x):
        q1, s1 = fused.act_mul_and_fp8_group_quant(x, "silu", 64, torch.int8)
        q2, s2 = fused.act_mul_and_fp8_quant(x, "gelu", dtype_quant=torch.int8)
        q3, _ = fused.act_mul_and_fp8_quant(x, "gelu_tanh", scale, torch.int8)
        return q1, s1, q2, s2, q3

    torch._dynamo.reset()
    compiled = torch.compile(block, backend=COMPILE_BACKEND, fullgraph=True)
    for got, want in zip(compiled(x), block(x)):
        assert torch.equal(got, want)


@pytest.fixture
def without_e4m3fn():
    """This device's profile, less e4m3fn among the dtypes it stores."""
    from dataclasses import replace

    from aiter_lite.spec.device import device_profile, use_profile

    with use_profile(replace(device_profile(DEVICE), quant_dtypes=(torch.float8_e5m2, torch.int8))):
        yield


def test_compiled_call_refuses_a_dtype_the_device_cannot_store(without_e4m3fn):
    # The storable dtypes are a constant to torch.compile: a compiled call refuses one as an
    # eager call does (no kernel compiled for it), here on a device pretending to lack e4m3fn.
    op = getattr(fused.act_mul_and_fp8_group_quant, "eager", fused.act_mul_and_fp8_group_quant)
    x = make_rows(2, 128, torch.bfloat16)
    torch._dynamo.reset()
    with pytest.raises(torch._dynamo.exc.Unsupported, match="Observed exception"):  # dynamo's word for a raise
        torch.compile(op, backend=COMPILE_BACKEND, fullgraph=True)(x, "silu", 64, torch.float8_e4m3fn)
    torch._dynamo.reset()
    with pytest.raises(ValueError, match="dtype_quant of dtype torch.float8_e4m3fn cannot be written"):
        torch.compile(op, backend=COMPILE_BACKEND)(x, "silu", 64, torch.float8_e4m3fn)  # the raise, run eagerly
    torch._dynamo.reset()
    q, _ = torch.compile(op, backend=COMPILE_BACKEND, fullgraph=True)(x, "silu", 64, torch.float8_e5m2)
    assert q.dtype == torch.float8_e5m2
    torch._dynamo.reset()


# ---------------------------------------------------------------------------
# NaN and inf in y: visible in their own row (group), never in another


@pytest.mark.parametrize("looped", [False, True], ids=["regs", "looped"])
@pytest.mark.parametrize("bad", BADS)
@pytest.mark.parametrize("qdtype", Q_DTYPES, ids=str)
def test_per_token_nonfinite_row(qdtype, bad, looped):
    """A NaN in one row's gate or an inf in its up half: that row's scale NaN / inf as the
    reference's, every other row bit for bit the clean input's."""
    dtype = DTYPES[Q_DTYPES.index(qdtype) % len(DTYPES)]
    cfg = QuantLaunchConfig(1, 16, 4, LOOPED=True) if looped else None
    x = make_rows(4, 2 * 24, dtype, strided=True, scale=3.0)

    def run(x):
        return fused.act_mul_and_fp8_quant(x, "silu", dtype_quant=qdtype, config=cfg)

    def ref(x):
        return native.act_mul_and_fp8_quant(x, "silu", dtype_quant=qdtype)

    at = (1, 20) if bad == "nan" else (1, 24 + 20)  # gate NaN; up inf (silu(gate) * inf)
    assert_nonfinite_isolated(run, ref, x, at, BADS[bad], 1, 20)


@pytest.mark.parametrize("bad", BADS)
@pytest.mark.parametrize("qdtype", Q_DTYPES, ids=str)
def test_group_nonfinite(qdtype, bad):
    """A NaN / inf in one group of one row: that group's scale only (the partial last one too)."""
    dtype = DTYPES[Q_DTYPES.index(qdtype) % len(DTYPES)]
    x = make_rows(3, 2 * 40, dtype, scale=3.0)

    def run(x):
        return fused.act_mul_and_fp8_group_quant(x, "silu", 16, dtype_quant=qdtype, column_major_scales=True)

    def ref(x):
        return native.act_mul_and_fp8_group_quant(x, "silu", 16, dtype_quant=qdtype)

    assert_nonfinite_isolated(run, ref, x, (2, 17) if bad == "nan" else (2, 40 + 17), BADS[bad], 2, 17, 16)
    assert_nonfinite_isolated(run, ref, x, (0, 38) if bad == "nan" else (0, 40 + 38), BADS[bad], 0, 38, 16)


@pytest.mark.parametrize("qdtype", Q_DTYPES, ids=str)
def test_static_nonfinite(qdtype):
    """Static: y's NaN is NaN in fp8, 0 in int8, its inf saturates, as the reference; nothing else moves."""
    x = make_rows(3, 2 * 24, torch.bfloat16, scale=3.0)
    scale = torch.tensor([0.02], device=DEVICE)
    clean = fused.silu_and_mul_quant(_poisoned_q((3, 24), qdtype), x, scale)
    x[1, 0], x[1, 24 + 1] = float("nan"), float("inf")
    out = fused.silu_and_mul_quant(_poisoned_q((3, 24), qdtype), x, scale)
    out_ref = native.silu_and_mul_quant(torch.empty_like(out), x, scale)
    assert _same(out[1, :2], out_ref[1, :2])
    assert out[1, 0].float().isnan() if qdtype.is_floating_point else out[1, 0].item() == 0
    assert out[1, 1].float().item() in quant.quant_range(qdtype)  # +-inf saturates
    keep = torch.ones(3, 24, dtype=torch.bool, device=DEVICE)
    keep[1, :2] = False
    assert torch.equal(out.view(torch.uint8)[keep], clean.view(torch.uint8)[keep])
    q, _ = fused.act_mul_and_fp8_quant(x, "silu", scale, qdtype)
    assert torch.equal(q.view(torch.uint8), out.view(torch.uint8))


def test_meta_tensors_refused():
    """Every op, every tensor argument on a device Triton cannot launch on: named by the public op."""
    x, one = make_rows(4, 128, torch.bfloat16), torch.ones(1, device=DEVICE)
    out = torch.empty(4, 64, dtype=torch.int8, device=DEVICE)
    assert_each_tensor_refused_on_meta(fused.act_mul_and_fp8_group_quant, x, "silu", 32)
    assert_each_tensor_refused_on_meta(fused.act_mul_and_fp8_quant, x, "silu", one)
    assert_each_tensor_refused_on_meta(fused.act_mul_and_fp8_quant, x, "silu", None, None, one)
    assert_each_tensor_refused_on_meta(fused.silu_and_mul_quant, out, x, one)


def test_flags_and_configs_named():
    x = make_rows(4, 128, torch.bfloat16)
    with pytest.raises(TypeError, match=r"^act_mul_and_fp8_group_quant: column_major_scales must be a bool"):
        fused.act_mul_and_fp8_group_quant(x, "silu", 32, column_major_scales="yes")
    with pytest.raises(ValueError, match=r"^act_mul_and_fp8_group_quant: config's BLOCK_N must be a multiple of "
                                         r"group_size 32, got 16"):
        fused.act_mul_and_fp8_group_quant(x, "silu", 32, config=QuantLaunchConfig(1, 16, 4))
