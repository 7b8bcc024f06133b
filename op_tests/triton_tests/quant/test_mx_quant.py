"""aiter's MX / NV block quantization (aiter_lite.ops.triton.quant.mx_quant) against the fp32
native reference, decoded or code for code: MXFP4 (every scaling mode), MXFP8 (every fp8
dtype), NVFP4 (with and without a global scale), the gated-activation, RMSNorm and flatten
forms, aiter's padded and shuffled scale layouts; every input dtype, odd widths (partial
blocks), M = 0 and 1, strided rows; a NaN kept to its block (RMSNorm: its row); bad
arguments raise naming the op and the argument. The reference itself is checked against
aiter's own formulas (its test's log2 form of the scale, vLLM's NVFP4 reference) and the
e2m1 grid's rounding ties. Outputs are allocated poisoned (float NaN, uint8 random bytes),
so an unwritten element fails.

The plain forms' math is exact (power-of-2 scales), so codes and scales equal the
reference's bit for bit; the fused forms (RMSNorm, activation) may put an fp32 value one
ulp apart, so a code may differ by one step where that crosses a rounding boundary.
"""

import math

import pytest
import torch

from aiter_lite.ops.native.quant import mx_quant as native
from aiter_lite.ops.triton import activation as tri_act
from aiter_lite.ops.triton.quant import fused_mxfp4_quant, fused_mxfp8_quant
from aiter_lite.ops.triton.quant import mx_quant as tri
from aiter_lite.ops.triton.quant import quant as tri_quant
from aiter_lite.ops.triton.quant.dtypes import supported_quant_dtypes
from aiter_lite.utils import fast_launch
from op_tests.triton_tests.quant.test_quant import _assert_codes
from op_tests.utils import DEVICE, DTYPES, ON_GPU, assert_close, by_device, make_rows
from op_tests.utils.inputs import poison_allocations

FP8 = (torch.float8_e4m3fn, torch.float8_e4m3fnuz, torch.float8_e5m2)
SUPPORTED = supported_quant_dtypes(DEVICE)
NV_SCALE = tri.get_fp8_e4m3_dtype(DEVICE)  # NVFP4's block scale dtype here (none storable on sm_80)
MODES = ("even", "floor", "ceil", "rceil")
# (rows, width): M = 0 and 1, partial last blocks (66, 1000), the widest rows on a GPU
SHAPES = by_device(cpu=[(0, 64), (1, 2), (7, 66), (5, 1000)],
                   gpu=[(0, 64), (1, 2), (7, 66), (5, 1000), (4096, 7168), (3, 65536), (16384, 18432)])
RMS_SHAPES = by_device(cpu=[(0, 64), (1, 2), (5, 130), (3, 1000)],
                       gpu=[(0, 64), (1, 2), (5, 130), (3, 1000), (1024, 7168), (7, 16384)])
COMPILE_BACKEND = "inductor" if ON_GPU else "aot_eager"


@pytest.fixture(autouse=True)
def _poisoned(monkeypatch):
    """Float outputs NaN (op_tests.utils.inputs), uint8 outputs random bytes: any byte is a
    valid code, so an unwritten run of them fails the exact comparison with odds of 1 / 256 a byte."""
    poison_allocations(monkeypatch)
    empty = torch.empty

    def poisoned(*args, **kwargs):
        t = empty(*args, **kwargs)
        if t.dtype == torch.uint8 and t.numel() and t.device.type != "meta" and not torch.compiler.is_compiling():
            t.copy_(torch.randint(0, 256, t.shape, dtype=torch.uint8, device=t.device))
        return t

    monkeypatch.setattr(torch, "empty", poisoned)


def _skip_unstorable(dtype):
    if dtype not in SUPPORTED:
        pytest.skip(f"{dtype} cannot be stored on this device")


def _equal(got, want, name):
    """Same shape, dtype and strides; the same bytes (fp8 as values: -0 and 0 alike, NaN alike)."""
    assert got.shape == want.shape and got.dtype == want.dtype, f"{name}: {got.shape} {got.dtype}"
    assert got.stride() == want.stride() or not got.numel(), f"{name}: strides {got.stride()}, {want.stride()}"
    if got.dtype.is_floating_point:
        g, w = got.float(), want.float()
        same = (g == w) | (g.isnan() & w.isnan())
    else:
        same = got == want
    if not bool(same.all()):
        where = (~same).nonzero()[:6].tolist()
        raise AssertionError(f"{name}: {int((~same).sum())} of {got.numel()} differ; first at {where}: "
                             f"{got[~same][:6].tolist()} vs {want[~same][:6].tolist()}")


_GRID = torch.tensor(native.E2M1_VALUES)


def _near_scales(s, s_ref, name):
    """e8m0 scales of fused math: equal but where fp32 rounding in another order moved a
    block's amax across a power of 2 (the GPU's exp, a norm's sum): then one exponent apart,
    at most 1 in 500 blocks, never a NaN byte. The blocks apart (a mask of s's shape)."""
    if torch.equal(s, s_ref):
        return torch.zeros(s.shape, dtype=torch.bool, device=s.device)
    assert s.shape == s_ref.shape and s.stride() == s_ref.stride(), f"{name}: scales' layout"
    d = (s.int() - s_ref.int()).abs()
    apart = d != 0
    assert d.max() <= 1 and not (s_ref[apart] == 0xFF).any() and int(apart.sum()) <= max(1, d.numel() // 500), \
        f"{name}: scales: {int(apart.sum())} of {d.numel()} differ, by up to {int(d.max())}"
    return apart


def _assert_fp4_close(q, s, q_ref, s_ref, name, block=native.MX_BLOCK, unshuffled=None):
    """Scales as :func:`_near_scales` (a block one exponent apart decoded within the larger
    scale's step: row-major scales); e2m1 codes equal but where fp32 rounding of the fused
    math moved a value across a boundary: then one step apart, at most 1 in 500 of them."""
    apart = _near_scales(s, s_ref, name)
    assert q.shape == q_ref.shape and q.dtype == torch.uint8, name
    got, want = native.e2m1_to_float(q).cpu(), native.e2m1_to_float(q_ref).cpu()
    if apart.any():
        assert s.shape[0] == q.shape[0], f"{name}: scales apart in a padded or shuffled layout"
        cols = apart.repeat_interleave(block, -1)[:, :got.shape[-1]].cpu()
        sc = [native.e8m0_to_float(t).repeat_interleave(block, -1)[:, :got.shape[-1]].cpu() for t in (s, s_ref)]
        assert ((got * sc[0] - want * sc[1]).abs()[cols] <= 2 * torch.maximum(*sc)[cols]).all(), name
        got, want = got[~cols], want[~cols]
    off = got != want
    if off.any():
        idx = lambda v: (v.abs()[..., None] == _GRID).float().argmax(-1)  # noqa: E731
        far = ((idx(got) - idx(want)).abs() > 1) | ((got.sign() * want.sign()) < 0)
        assert not far.any() and int(off.sum()) <= max(1, off.numel() // 500), \
            f"{name}: {int(off.sum())} of {off.numel()} codes differ, {int(far.sum())} by more than one step"


# ---------------------------------------------------------------------------
# the reference against aiter's formulas and the e2m1 grid


def _aiter_mxfp4(x):
    """aiter's test reference (op_tests/triton_tests/quant/test_quant_mxfp4.py): the "even"
    scale by log2, values by the grid's nearest even, for finite x of an even width."""
    m, n = x.shape
    b = native._blocks(x.float(), 32)
    amax = b.abs().amax(-1)
    amax = ((amax.view(torch.int32) + 0x200000) & 0xFF800000).view(torch.float32)
    s = (torch.log2(amax).floor() - 2).clamp(-127, 127)
    v = (b * torch.exp2(-s)[..., None]).flatten(-2)[:, :n]
    # nearest of the grid, ties to the even code (an even mantissa bit)
    mag = v.abs().clamp(max=6.0)[..., None]
    dist = (mag - _GRID.to(v.device)).abs()
    best = dist.min(-1, keepdim=True).values
    codes = torch.arange(8, device=v.device)
    cand = torch.where(dist == best, codes, 99)
    code = torch.where((cand % 2 == 0) & (cand < 99), cand, 99).amin(-1)
    code = torch.where(code == 99, cand.amin(-1), code)
    code = code | torch.where(torch.signbit(v), 8, 0)
    return (code[:, 0::2] | (code[:, 1::2] << 4)).to(torch.uint8), (s + 127).to(torch.uint8)


@pytest.mark.parametrize("n", [64, 66, 1000])
def test_reference_is_aiters_mxfp4(n):
    x = (torch.randn(9, n, device=DEVICE) * torch.logspace(-3, 3, n, device=DEVICE)).bfloat16()
    x[0, :32] = 0.0  # an all-zero block
    q_ref, s_ref = _aiter_mxfp4(x)
    q, s = native.dynamic_mxfp4_quant(x)
    _equal(q, q_ref, "codes")
    _equal(s.contiguous(), s_ref, "scales")


def test_e2m1_rounding_ties_and_saturation():
    """A block whose scale is 1 (amax 4): every tie to the even code, the top saturating at 6;
    negative values and -0 keep the sign bit."""
    vals = [4.0, 0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0, 5.9, 0.24, 0.26, 2.9, 3.49, 0.0, -0.0, -0.25, -5.0, -3.4]
    want = [6, 0, 2, 2, 4, 4, 6, 6, 7, 0, 1, 5, 5, 0, 8, 8, 14, 13]
    x = torch.zeros(1, 32, device=DEVICE)
    x[0, :len(vals)] = torch.tensor(vals)
    for fn in (tri.dynamic_mxfp4_quant, native.dynamic_mxfp4_quant):
        q, s = fn(x)
        codes = torch.stack((q & 0xF, q >> 4), -1).flatten()[:len(vals)]
        assert codes.tolist() == want and s.item() == 127, (fn.__module__, codes.tolist(), s.item())


def test_scaling_mode_definitions():
    """Each block's amax picks its e8m0 exponent by the mode's formula (emax 2 for e2m1)."""
    amaxes = [1.0, 1.5, 1.75, 3.0, 6.0, 7.0, 1e-3, 3e4, 2.0 ** -125, 2.0 ** -140]
    x = torch.zeros(1, 32 * len(amaxes), device=DEVICE)
    x[0, ::32] = torch.tensor(amaxes)
    rule = {"floor": lambda a: math.floor(math.log2(a)) - 2, "ceil": lambda a: math.ceil(math.log2(a)) - 2,
            # a quotient below fp32's normals takes the smallest normal's exponent (aiter's, torchao's)
            "rceil": lambda a: max(math.ceil(math.log2(a / 6)), -126),
            "even": lambda a: math.floor(math.log2(a)) - 2 + (a / 2 ** math.floor(math.log2(a)) >= 1.75)}
    for mode in MODES:
        _, s = tri.dynamic_mxfp4_quant(x, mode)
        want = [min(max(rule[mode](a), -127), 127) + 127 for a in amaxes]
        assert s.flatten().tolist() == want, (mode, s.flatten().tolist(), want)


# ---------------------------------------------------------------------------
# the plain forms


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("m, n", SHAPES)
def test_dynamic_mxfp4_quant(m, n, dtype):
    x = make_rows(m, n, dtype, strided=True, scale=3.0)
    before = x.clone()
    q, s = tri.dynamic_mxfp4_quant(x)
    q_ref, s_ref = native.dynamic_mxfp4_quant(x)
    _equal(q, q_ref, "codes")
    _equal(s, s_ref, "scales")  # column-major, strides (1, M), as aiter's
    assert torch.equal(x, before)
    if m:  # decoded within the block's step: at most amax / 4 off (saturation at 6 of up to 7)
        d = native.mxfp4_dequant(q, s)
        amax = native._blocks(x.float(), 32).abs().amax(-1).repeat_interleave(32, -1)[:, :n]
        assert ((d - x.float()).abs() <= amax / 4 + 1e-30).all()


@pytest.mark.parametrize("mode", MODES[1:])
def test_dynamic_mxfp4_quant_scaling_modes(mode):
    x = make_rows(6, 200, torch.bfloat16, scale=2.0)
    x[1, 3] = float("inf")
    for q, want in zip(tri.dynamic_mxfp4_quant(x, mode), native.dynamic_mxfp4_quant(x, mode)):
        _equal(q, want, mode)


def _every_bf16(seed: int) -> torch.Tensor:
    """Every bf16 bit pattern once (NaNs, infinities, subnormals, -0), shuffled into rows of
    32-value blocks, and the same values again in blocks of one magnitude (sorted), so that
    blocks whose scale is 2^-127 or 2^127 are there too."""
    g = torch.Generator().manual_seed(seed)
    bits = torch.arange(-32768, 32768, dtype=torch.int32).to(torch.int16)
    if not ON_GPU:  # Triton's interpreter widens bf16 subnormals wrongly: signed zeros in their place there
        bits = torch.where(bits & 0x7F80 == 0, bits & -32768, bits)
    shuffled = bits[torch.randperm(bits.numel(), generator=g)]
    return torch.cat([shuffled, bits.sort().values]).view(torch.bfloat16).view(-1, 1024).to(DEVICE)


@pytest.mark.parametrize("mode", MODES)
def test_dynamic_mxfp4_quant_every_bf16_value(mode):
    """Code for code against the reference on every bf16 value, in every scaling mode (on
    NVIDIA the bf16 form, two values an instruction, computes these)."""
    x = _every_bf16(int(MODES.index(mode)))
    for got, want, name in zip(tri.dynamic_mxfp4_quant(x, mode), native.dynamic_mxfp4_quant(x, mode),
                               ("codes", "scales")):
        _equal(got, want, f"{mode} {name}")


@pytest.mark.skipif(not ON_GPU, reason="the bf16 form runs on NVIDIA GPUs only (the interpreter truncates bf16)")
@pytest.mark.parametrize("shape", [(3, 32), (6, 200), (5, 96), (33, 1024), (4096, 7168), (2, 65536)])
def test_mxfp4_bf16_form_equals_the_fp32_form(shape, monkeypatch):
    """The bf16 lines (dynamic_mxfp4_quant and the flatten form of bf16 rows on NVIDIA) give
    the fp32 lines' bytes on fresh values, rows strided, small tiles (fewer blocks than lanes), a
    width with a partial block (200: the fp32 form there)."""
    m, n = shape
    x = make_rows(m, n, torch.bfloat16, strided=True, scale=3.0)
    x3 = torch.stack([make_rows(m, n, torch.bfloat16, scale=3.0), make_rows(m, n, torch.bfloat16, scale=1e-38)])
    x3 = x3.transpose(0, 1)  # (M, 2, n), segments M * n apart; the second one's blocks tiny (scales 2^-127)
    out = {}
    for lines16 in (True, False):
        monkeypatch.setattr(tri, "_LINES16", lines16)
        out[lines16] = [*tri.dynamic_mxfp4_quant(x), *tri.fused_flatten_mxfp4_quant(x3)]
    for got, want, name in zip(out[True], out[False], ("codes", "scales", "flatten codes", "flatten scales")):
        _equal(got, want, name)


@pytest.mark.parametrize("qdtype", FP8, ids=str)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("m, n", SHAPES[1:])
def test_dynamic_mxfp8_quant(m, n, dtype, qdtype):
    _skip_unstorable(qdtype)
    x = make_rows(m, n, dtype, strided=True, scale=3.0)
    y, s = tri.dynamic_mxfp8_quant(x, quant_dtype=qdtype)
    y_ref, s_ref = native.dynamic_mxfp8_quant(x, quant_dtype=qdtype)
    _equal(y, y_ref, "values")
    _equal(s, s_ref, "scales")
    assert y.float().abs().max() <= torch.finfo(qdtype).max  # e4m3fnuz's emax is 7: nothing past 240


def test_dynamic_mxfp8_quant_is_aiters_for_e4m3fn():
    """aiter's formula: the "even" amax, log2 floor minus 8, x * 2^-s converted (never past 448)."""
    _skip_unstorable(torch.float8_e4m3fn)
    x = (torch.randn(4, 3, 96, device=DEVICE) * 50).bfloat16()
    b = native._blocks(x.float(), 32)
    amax = ((b.abs().amax(-1).view(torch.int32) + 0x200000) & 0xFF800000).view(torch.float32)
    s = (torch.log2(amax).floor() - 8).clamp(-127, 127)
    y, sc = tri.dynamic_mxfp8_quant(x)
    assert y.shape == (4, 3, 96) and sc.shape == (4, 3, 3)
    _equal(sc, (s + 127).to(torch.uint8), "scales")
    _equal(y, (b * torch.exp2(-s)[..., None]).flatten(-2).to(torch.float8_e4m3fn), "values")


def test_dynamic_mxfp8_quant_into_callers_scale():
    """A caller's (rows, G) uint8 buffer, column-major here, is written and handed back."""
    x = make_rows(5, 70, torch.float16)
    buf = torch.zeros(3, 5, dtype=torch.uint8, device=DEVICE).t()
    y, s = tri.dynamic_mxfp8_quant(x, buf, torch.float8_e5m2)
    y_ref, s_ref = native.dynamic_mxfp8_quant(x, None, torch.float8_e5m2)
    assert s is buf
    _equal(s.contiguous(), s_ref, "scales")
    _equal(y, y_ref, "values")


def _vllm_nvfp4(x, global_scale):
    """vLLM's ``ref_nvfp4_quant`` (tests/kernels/quantization/nvfp4_utils.py): the decoded values."""
    rcp = lambda t: torch.where(t == 0, 0.0, 1.0 / t)  # noqa: E731
    b = native._blocks(x.float(), 16)
    amax = b.abs().amax(-1)
    scale = (global_scale * (amax * torch.tensor(1 / 6.0, device=x.device))).clamp(max=448).to(torch.float8_e4m3fn)
    out_scale = rcp(scale.float() * rcp(global_scale))
    return (b * out_scale[..., None]).clamp(-6, 6).flatten(-2)[:, :x.shape[1]], scale


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("m, n", SHAPES)
def test_dynamic_nvfp4_quant(m, n, dtype):
    _skip_unstorable(NV_SCALE)
    x = make_rows(m, n, dtype, strided=True, scale=30.0)
    g = torch.full((1,), 448 * 6 / 90.0, device=DEVICE)
    for global_scale in (None, g):
        q, s = tri.dynamic_nvfp4_quant(x, global_scale)
        q_ref, s_ref = native.dynamic_nvfp4_quant(x, global_scale)
        _equal(q, q_ref, "codes")
        _equal(s, s_ref, "scales")
    if m and s.dtype == torch.float8_e4m3fn:  # vLLM's: the same scales, the values its values' nearest codes
        want, scale = _vllm_nvfp4(x, g.reshape(()))
        _equal(s.contiguous(), scale, "vLLM's scales")
        d = native.e2m1_to_float(q)
        assert ((d - want).abs() <= torch.where(want.abs() < 2, 0.25, torch.where(want.abs() < 4, 0.5, 1.0))).all()


def test_nvfp4_zero_block_and_saturated_scale():
    """An all-zero block: scale 0 and zeros (aiter: 0 * inf = NaN codes); a block past the
    scale's range: the scale saturates at 448 and the values at 6."""
    _skip_unstorable(torch.float8_e4m3fn)
    x = torch.zeros(1, 32, device=DEVICE)
    x[0, 16:] = 1e5
    q, s = tri.dynamic_nvfp4_quant(x)
    assert s.float().flatten().tolist() == [0.0, 448.0]
    assert q[0, :8].eq(0).all() and q[0, 8:].eq(0x77).all()


# ---------------------------------------------------------------------------
# the fused forms and the scale layouts


def _padded(s, m, g, shuffle):
    assert s.shape == (-(-m // 256) * 256, -(-g // 8) * 8) and s.is_contiguous()
    return native.unshuffle_scale(s, s.shape[0], s.shape[1]) if shuffle else s


@pytest.mark.parametrize("layout", ["plain", "padded", "shuffled"])
@pytest.mark.parametrize("activation", ["silu", "gelu", "gelu_tanh", "relu"])
def test_act_mul_and_mxfp4_quant(activation, layout):
    """``act(x[:, :n]) * x[:, n:]`` quantized; the padded / shuffled scales hold the plain ones
    (n = 96: 3 blocks, not a multiple of 8, where aiter's shuffle overlaps its 32-row tiles)
    and 127 in every padding byte."""
    m, n = 37, 96
    x = make_rows(m, 2 * n, torch.bfloat16, strided=True, scale=2.0)
    shuffle, pad = layout == "shuffled", layout == "padded"
    q, s = tri_act.act_mul_and_mxfp4_quant(x, activation, "even", shuffle, pad)
    q_ref, s_ref = native.act_mul_and_mxfp4_quant(x, activation, "even", shuffle, pad)
    _assert_fp4_close(q, s, q_ref, s_ref, f"{activation} {layout}")
    if layout != "plain":
        rows = _padded(s, m, 3, shuffle)
        _equal(rows[:m, :3].contiguous(), native.act_mul_and_mxfp4_quant(x, activation)[1], "the plain scales")
        assert rows[m:].eq(127).all() and rows[:, 3:].eq(127).all()


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_act_mul_and_mxfp4_quant_dtypes_and_modes(dtype):
    x = make_rows(5, 4 * 66, dtype, scale=3.0)
    for mode in ("even", "rceil"):
        (q, s), (q_ref, s_ref) = tri.act_mul_and_mxfp4_quant(x, "silu", mode), \
            native.act_mul_and_mxfp4_quant(x, "silu", mode)
        _assert_fp4_close(q, s, q_ref, s_ref, mode)


def _rms_inputs(m, n, dtype, n2=48):
    x = make_rows(m, n, dtype, strided=True, scale=3.0)
    w = (torch.rand(n, device=DEVICE) + 0.5).to(dtype)
    x2 = make_rows(m, n2, dtype, strided=True)
    w2 = (torch.rand(n2, device=DEVICE) + 0.5).to(dtype)
    return x, w, x2, w2, make_rows(m, n, dtype, strided=True)


def _assert_rms4(got, want, dtype, name, m, n, layout="plain"):
    (q, s), *rest = got
    (q_ref, s_ref), *rest_ref = want
    _assert_fp4_close(q, s, q_ref, s_ref, name)
    if layout != "plain":
        g = -(-n // 32)
        rows = _padded(s, m, g, layout == "shuffled")
        assert rows[m:].eq(127).all() and rows[:, g:].eq(127).all(), f"{name}: padding"
    for i, (a, b) in enumerate(zip(rest, rest_ref)):
        assert (a is None) == (b is None), f"{name}: output {i + 1}"
        if a is not None:
            assert_close(a, b, dtype=dtype, name=f"{name}: output {i + 1}")


@pytest.mark.parametrize("options", ["plain", "res1, x2, out1, shuffled", "padded"])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("m, n", RMS_SHAPES)
def test_fused_rms_mxfp4_quant(m, n, dtype, options):
    x, w, x2, w2, r = _rms_inputs(m, n, dtype)
    if options == "plain":
        args = (x, w, 1e-6)
    elif options == "padded":
        args = (x, w, 1e-6, None, None, 0.0, None, False, True)
    else:
        args = (x, w, 1e-6, x2, w2, 1e-5, r, True, False, True)
    before = [t.clone() for t in (x, w, x2, w2, r)]
    layout = "shuffled" if "shuffled" in options else options
    _assert_rms4(fused_mxfp4_quant.fused_rms_mxfp4_quant(*args), native.fused_rms_mxfp4_quant(*args), dtype,
                 f"{m}x{n} {options}", m, n, layout)
    assert all(torch.equal(t, b) for t, b in zip((x, w, x2, w2, r), before))


_LOOP_1 = tri.MxQuantLaunchConfig(1, 64, 1, ROW_LOOP=True)
_LOOP_2 = tri.MxQuantLaunchConfig(2, 128, 2, ROW_LOOP=True)


# The padded and shuffled scales take 256 rows (a program a row with BLOCK_M 1: 131 s of the
# interpreter for the two cases): their padding is checked on 2-row programs, whose chunks of
# 128 also end past the row (200 columns) in padding columns.
@pytest.mark.parametrize("options, cfg", [(o, c) for o in ("plain", "res1, x2, out1", "mxfp8") for c in (_LOOP_1, _LOOP_2)]
                         + [(o, _LOOP_2) for o in ("res1, x2, out1, shuffled", "padded")], ids=str)
def test_fused_rms_row_loop(options, cfg, monkeypatch):
    """The norm's rows in chunks (the sum of squares, then each chunk read again and
    quantized) give the reference's results: a partial last chunk, a residual, the
    unquantized outputs, padded and shuffled scales (their padding columns past the row's
    chunks), MXFP8."""
    m, n = 5, 200
    x, w, x2, w2, r = _rms_inputs(m, n, torch.bfloat16)
    monkeypatch.setattr(tri, "mx_quant_launch_config", lambda *a: cfg)  # every launch here is an RMSNorm's
    fast_launch.reset()  # no launch plan recorded with another config
    try:
        if options == "mxfp8":
            got = fused_mxfp8_quant.fused_rms_mxfp8_quant(x, w, 1e-6)
            want = native.fused_rms_mxfp8_quant(x, w, 1e-6)
            assert torch.equal(got[1], want[1]), "scales"
            _assert_codes(got[0], want[0], "values")
            return
        args = {"plain": (x, w, 1e-6), "padded": (x, w, 1e-6, None, None, 0.0, None, False, True),
                "res1, x2, out1": (x, w, 1e-6, x2, w2, 1e-5, r, False, False, True)}.get(
            options, (x, w, 1e-6, x2, w2, 1e-5, r, True, False, True))
        layout = "shuffled" if "shuffled" in options else "padded" if options == "padded" else "plain"
        _assert_rms4(fused_mxfp4_quant.fused_rms_mxfp4_quant(*args), native.fused_rms_mxfp4_quant(*args),
                     torch.bfloat16, f"row loop {options}", m, n, layout)
    finally:
        fast_launch.reset()


def test_fused_rms_mxfp4_quant_sglang_call():
    """SGLang's add + norm call: ``(x, weight, eps, None, None, None, residual)``."""
    x, w, _, _, r = _rms_inputs(4, 256, torch.bfloat16)
    got = tri.fused_rms_mxfp4_quant(x, w, 1e-6, None, None, None, r)
    assert got[1] is None and got[2] is None and got[3] is not None
    _assert_rms4(got, native.fused_rms_mxfp4_quant(x, w, 1e-6, None, None, None, r), torch.bfloat16, "sglang",
                 4, 256)


@pytest.mark.parametrize("n1, n2", [(5, 24), (3, 16), (2, 64), (4, 50)])
def test_fused_flatten_quant(n1, n2):
    """The blocks run over the flattened row whatever N2 (aiter's MXFP4 kernel writes each
    segment at a power-of-2 stride of at least 32 and restarts its blocks per segment: wrong
    for every N2 but those powers of 2); leading dims of any strides, read without a copy."""
    heads_first = torch.randn(n1, 6, n2, device=DEVICE).bfloat16().transpose(0, 1)  # (6, n1, n2), segments apart
    flat = torch.randn(6, n1, n2, device=DEVICE).bfloat16()  # contiguous segments: read as plain rows
    for layout, x in (("segmented", heads_first), ("contiguous", flat)):
        for got, want in zip(fused_mxfp4_quant.fused_flatten_mxfp4_quant(x), native.fused_flatten_mxfp4_quant(x)):
            _equal(got, want, f"mxfp4 {layout} {n1}x{n2}")
        _equal(*[q.contiguous() for q in (tri.fused_flatten_mxfp4_quant(x)[0], tri.dynamic_mxfp4_quant(
            x.reshape(6, n1 * n2))[0])], f"{layout}: as its flattened rows")
    _skip_unstorable(torch.float8_e4m3fn)
    for layout, x in (("segmented", heads_first), ("contiguous", flat)):
        for got, want in zip(fused_mxfp8_quant.fused_flatten_mxfp8_quant(x), native.fused_flatten_mxfp8_quant(x)):
            _equal(got, want, f"mxfp8 {layout} {n1}x{n2}")


@pytest.mark.parametrize("qdtype", [None, *FP8], ids=str)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("m, n", RMS_SHAPES[1:])
def test_fused_rms_mxfp8_quant(m, n, dtype, qdtype):
    _skip_unstorable(qdtype or tri.get_fp8_e4m3_dtype(DEVICE))
    x, w, *_ = _rms_inputs(m, n, dtype)
    y = None if qdtype is None else torch.empty((m, n), dtype=qdtype, device=DEVICE)
    scale = None if qdtype is None else torch.empty((m, -(-n // 32)), dtype=torch.uint8, device=DEVICE)
    got = fused_mxfp8_quant.fused_rms_mxfp8_quant(x, w, 1e-6, y, scale)
    want = native.fused_rms_mxfp8_quant(x, w, 1e-6, None if y is None else torch.empty_like(y))
    assert y is None or (got[0] is y and got[1] is scale)
    apart = _near_scales(got[1], want[1], "scales")
    if apart.any():  # those blocks decoded: within a step of the larger scale's top value
        cols = apart.repeat_interleave(32, -1)[:, :n]
        g, r = native.mxfp8_dequant(*got), native.mxfp8_dequant(*want)
        assert ((g - r).abs()[cols] <= (g.abs() + r.abs())[cols] / 4 + 1e-30).all()
        got, want = (got[0][~cols.any(-1)], None), (want[0][~cols.any(-1)], None)
    _assert_codes(got[0], want[0], "values")


# ---------------------------------------------------------------------------
# NaN, inf and the edges


def test_nan_stays_in_its_block_or_row():
    x = make_rows(4, 128, torch.float32, scale=3.0)
    xn = x.clone()
    xn[2, 40] = float("nan")
    for name, fn in (("mxfp4", tri.dynamic_mxfp4_quant), ("nvfp4", tri.dynamic_nvfp4_quant))[:2 if NV_SCALE in
                                                                                             SUPPORTED else 1]:
        (q0, s0), (q1, s1) = fn(x), fn(xn)
        blk = 40 // (32 if name == "mxfp4" else 16)
        nan_scale = s1[2, blk].view(torch.uint8).item() == 0xFF if name == "mxfp4" else s1[2, blk].float().isnan()
        assert nan_scale, f"{name}: the NaN block's scale"
        width = 16 if name == "mxfp4" else 8
        assert q1[2, blk * width:(blk + 1) * width].eq(0).all(), f"{name}: the NaN block's codes"
        keep = torch.ones_like(s0, dtype=torch.bool)
        keep[2, blk] = False
        assert torch.equal(s0[keep].view(torch.uint8), s1[keep].view(torch.uint8))
        decoded = native.mxfp4_dequant(q1, s1) if name == "mxfp4" else native.nvfp4_dequant(q1, s1)
        width = 32 if name == "mxfp4" else 16
        assert decoded[2].isnan().sum() == width and decoded[2, blk * width:(blk + 1) * width].isnan().all()
    y1, s1 = tri.dynamic_mxfp8_quant(xn, None, torch.float8_e5m2)
    assert s1[2, 1].item() == 0xFF and y1[2, 32:64].float().isnan().all() and not y1[2, :32].float().isnan().any()
    w = torch.ones(128, device=DEVICE)
    (q0, s0), *_ = tri.fused_rms_mxfp4_quant(x, w, 1e-6)
    (q1, s1), *_ = tri.fused_rms_mxfp4_quant(xn, w, 1e-6)
    assert s1[2].eq(0xFF).all() and q1[2].eq(0).all()
    keep = [0, 1, 3]
    assert torch.equal(s0[keep], s1[keep]) and torch.equal(q0[keep], q1[keep])


def test_inf_saturates_under_the_largest_scale():
    x = torch.ones(2, 64, device=DEVICE)
    x[1, 4], x[1, 5] = float("inf"), -float("inf")
    x[1, 6], x[1, 7] = 3.0e38, 2.0 ** 126  # finite values under the scale 2^127: 1.76 and 0.5
    q, s = tri.dynamic_mxfp4_quant(x)
    assert s[1, 0].item() == 254 and s[0, 0].item() == 125 and s[1, 1].item() == 125
    assert q[1, 2].item() == (0x7 | (0xF << 4))  # +inf: +6 (low nibble), -inf: -6 (high)
    assert q[1, 3].item() == (0x4 | (0x1 << 4))  # 2.0 and 0.5: scaled by 2^-127 exactly, not 2^-126
    assert q[1, 0].item() == 0  # 1 / 2^127 rounds to 0
    assert torch.equal(q, native.dynamic_mxfp4_quant(x)[0])


@pytest.mark.skipif(not ON_GPU, reason="offsets past 2^31 need more memory than a CPU test may take")
def test_offsets_past_2_31():
    m, n = (1 << 31) // 16384 + 64, 16384
    x = torch.randn(m, n, device=DEVICE, dtype=torch.bfloat16)
    q, s = tri.dynamic_mxfp4_quant(x)
    tail = slice(m - 64, m)
    q_ref, s_ref = native.dynamic_mxfp4_quant(x[tail])
    _equal(q[tail], q_ref, "codes past 2^31")
    _equal(s[tail].contiguous(), s_ref.contiguous(), "scales past 2^31")


def _bad_calls():
    x = make_rows(4, 64, torch.bfloat16)
    w = torch.ones(64, device=DEVICE, dtype=torch.bfloat16)
    return [
        (lambda: tri.dynamic_mxfp4_quant(x[0]), ValueError, "dynamic_mxfp4_quant: x must be 2-D"),
        (lambda: tri.dynamic_mxfp4_quant(x[:, :63]), ValueError, "dynamic_mxfp4_quant: x last dim must be even"),
        (lambda: tri.dynamic_mxfp4_quant(x.int()), TypeError, "dynamic_mxfp4_quant: x must be"),
        (lambda: tri.dynamic_mxfp4_quant(x, "nearest"), ValueError, "dynamic_mxfp4_quant: scaling_mode must be one"),
        (lambda: tri.dynamic_mxfp4_quant(x.t()), ValueError, "dynamic_mxfp4_quant: x must have unit stride"),
        (lambda: tri.dynamic_mxfp8_quant(x, quant_dtype=torch.int8), TypeError,
         "dynamic_mxfp8_quant: quant_dtype must be one of"),
        (lambda: tri.dynamic_mxfp8_quant(x, torch.empty(4, 3, dtype=torch.uint8, device=DEVICE)), ValueError,
         r"dynamic_mxfp8_quant: scale must have shape \(4, 2\)"),
        (lambda: tri.dynamic_mxfp8_quant(x, torch.empty(4, 2, device=DEVICE)), TypeError,
         "dynamic_mxfp8_quant: scale must be uint8"),
        (lambda: tri.dynamic_nvfp4_quant(x, torch.ones(2, device=DEVICE)), ValueError,
         "dynamic_nvfp4_quant: global_scale must be one float32 element"),
        (lambda: tri.act_mul_and_mxfp4_quant(x[:, :62], "silu"), ValueError,
         "act_mul_and_mxfp4_quant: x last dim must be a multiple of 4"),
        (lambda: tri.act_mul_and_mxfp4_quant(x, "swish"), ValueError, "act_mul_and_mxfp4_quant: activation"),
        (lambda: tri.act_mul_and_mxfp4_quant(x, "silu", shuffle=2), TypeError, "act_mul_and_mxfp4_quant: shuffle"),
        (lambda: tri.fused_rms_mxfp4_quant(x, w[:3], 1e-6), ValueError,
         r"fused_rms_mxfp4_quant: x1_weight must have shape \(64,\)"),
        (lambda: tri.fused_rms_mxfp4_quant(x, w, -1.0), ValueError, "fused_rms_mxfp4_quant: x1_epsilon"),
        (lambda: tri.fused_rms_mxfp4_quant(x, w, 1e-6, x), ValueError, "fused_rms_mxfp4_quant: x2 needs x2_weight"),
        (lambda: tri.fused_rms_mxfp4_quant(x, w, 1e-6, res1=x[:2]), ValueError,
         r"fused_rms_mxfp4_quant: res1 must have shape \(4, 64\)"),
        (lambda: tri.fused_rms_mxfp4_quant(x, w, 1e-6, inargs="gluon"), ValueError,
         "fused_rms_mxfp4_quant: inargs='gluon'"),
        (lambda: tri.fused_rms_mxfp4_quant(make_rows(2, 16386), torch.ones(16386, device=DEVICE), 1e-6),
         ValueError, "up to 16384 columns"),
        (lambda: tri.fused_flatten_mxfp4_quant(x), ValueError, "fused_flatten_mxfp4_quant: x must be 3-D"),
        (lambda: tri.fused_flatten_mxfp4_quant(make_rows(3, 3, lead=(4,))), ValueError,
         "fused_flatten_mxfp4_quant: x N1 \\* N2 must be even"),
        (lambda: tri.fused_rms_mxfp8_quant(x, w, 1e-6, torch.empty(4, 64, device=DEVICE)), TypeError,
         "fused_rms_mxfp8_quant: y must be an fp8 dtype"),
        (lambda: tri.fused_flatten_mxfp8_quant(x.unsqueeze(1), torch.float16), TypeError,
         "fused_flatten_mxfp8_quant: quant_dtype must be one of"),
        (lambda: tri.dynamic_mxfp4_quant(x.float().requires_grad_()), ValueError,
         "x requires grad, but dynamic_mxfp4_quant has no gradient"),
    ]


@pytest.mark.parametrize("i", range(23))
def test_bad_arguments_raise(i):
    call, error, match = _bad_calls()[i]
    with pytest.raises(error, match=match):
        call()


def test_a_pinned_launch_config_is_checked():
    """An RMSNorm launch holds whole rows: a pinned config narrower than the row is refused."""
    x, w, *_ = _rms_inputs(3, 256, torch.float32)
    q, s = torch.empty(3, 128, dtype=torch.uint8, device=DEVICE), torch.empty(3, 8, dtype=torch.uint8, device=DEVICE)
    args = (x, q, s, "rms", "mxfp4", 256, "even", "", False, 3, 8, w, None, None, None, None, None, None, None,
            1e-6, 0.0)
    with pytest.raises(ValueError, match="whole 256-column row"):
        tri._launch_mx_quant(*args, tri.MxQuantLaunchConfig(1, 128, 1))
    tri._launch_mx_quant(*args, tri.MxQuantLaunchConfig(2, 256, 1))
    (q_ref, s_ref), *_ = native.fused_rms_mxfp4_quant(x, w, 1e-6)
    _assert_fp4_close(q, s, q_ref, s_ref, "pinned")


@pytest.mark.parametrize("fmt, producer", [("mxfp4", "plain"), ("nvfp4", "plain"), ("mxfp8", "plain"),
                                           ("mxfp4", "act"), ("mxfp8", "flatten")])
def test_grid_orders_agree(fmt, producer):
    """The one-axis grid (a row block's column blocks in turn; MXFP8's on NVIDIA) and the
    two-axis one (row blocks first) write the same bits, over an odd width, a partial last
    column block and rows past a tile."""
    m, n = 5, 200
    x = make_rows(m, 2 * n if producer == "act" else n, torch.bfloat16, strided=True, scale=3.0)
    if producer == "flatten":  # segments of 40 columns, heads-first in memory
        x = make_rows(5, m * 40, torch.bfloat16).reshape(5, m, 40).transpose(0, 1)
    group = 16 if fmt == "nvfp4" else 32

    def launch(cfg):
        q = torch.full((m, n // 2 if fmt != "mxfp8" else n), 0x5A, dtype=torch.uint8, device=DEVICE)
        s = torch.full((m, -(-n // group)), 0xA5, dtype=torch.uint8, device=DEVICE)
        if fmt == "nvfp4":
            s = s.view(torch.float8_e4m3fn)
        tri._launch_mx_quant(x, q.view(torch.float8_e4m3fn) if fmt == "mxfp8" else q, s, producer, fmt, n, "even",
                             "silu", False, m, s.shape[1], None, None, None, None, None, None, None, None, 1e-6, 0.0,
                             cfg)
        return q, s.view(torch.uint8)

    want = launch(tri.MxQuantLaunchConfig(2, 64, 1))
    for cfg in (tri.MxQuantLaunchConfig(2, 64, 1, ROW_MAJOR=True), tri.MxQuantLaunchConfig(4, 128, 2, ROW_MAJOR=True)):
        got = launch(cfg)
        assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1]), cfg
    q_ref, s_ref = {"plain": lambda: getattr(native, f"dynamic_{fmt}_quant")(x),
                    "act": lambda: native.act_mul_and_mxfp4_quant(x, "silu"),
                    "flatten": lambda: native.fused_flatten_mxfp8_quant(x)}[producer]()
    assert torch.equal(want[1], s_ref.view(torch.uint8)), "scales"


def test_aiter_paths_and_registration():
    assert tri_quant.dynamic_mxfp4_quant is tri.dynamic_mxfp4_quant
    assert tri_quant.dynamic_nvfp4_quant is tri.dynamic_nvfp4_quant
    assert tri_act.act_mul_and_mxfp4_quant is tri.act_mul_and_mxfp4_quant
    for name in tri.__all__[:8]:
        assert hasattr(torch.ops.aiter_lite, name), name


def test_compiles_whole(monkeypatch):
    monkeypatch.undo()  # the traced allocations are the graph's, not poisoned ones
    x, w, x2, w2, r = _rms_inputs(5, 96, torch.bfloat16)

    def f(x, w, x2, w2, r):
        (q, s), out1, out2, out_res1 = tri.fused_rms_mxfp4_quant(x, w, 1e-6, x2, w2, 1e-5, r, True, False, True)
        return q, s, out1, out2, out_res1, *tri.dynamic_mxfp4_quant(x)

    torch._dynamo.reset()
    got = torch.compile(f, backend=COMPILE_BACKEND, fullgraph=True)(x, w, x2, w2, r)
    for a, b in zip(got, f(x, w, x2, w2, r)):
        assert torch.equal(a, b)
