"""fp8 / int8 quantization against the fp32 reference (aiter_lite.ops.native.quant.quant).

Scales defined by an amax equal the reference's bit for bit; quantized values are
within one step of the reference's (adjacent codes: ``x * (1 / scale)`` and
``x / scale`` can round apart). Outputs start poisoned, so an unwritten element fails.
"""

import pytest
import torch

from aiter_lite.ops.native.quant import quant as native
from aiter_lite.ops.triton import quant
from aiter_lite.ops.triton.quant.quant import QuantLaunchConfig, per_token_launch_config
from aiter_lite.spec.device import device_profile
from aiter_lite.utils import registry
from op_tests.triton_tests.test_activation import assert_each_tensor_refused_on_meta
from op_tests.utils import DEVICE, DTYPES, ON_GPU, by_device, make_rows

Q_DTYPES = (torch.float8_e4m3fn, torch.float8_e4m3fnuz, torch.float8_e5m2, torch.int8)
# (rows, width): M = 0 and 1, widths of tensor-parallel shards (1368, 1076), odd sizes,
# a width past the per-token register path (looped), several leading dims
SHAPES = by_device(
    [(0, 64), (1, 1), (1, 7), (7, 1368), (33, 1076), (5, 127), (2, 20000)],
    [(0, 64), (1, 1), (1, 7), (7, 1368), (33, 1076), (5, 127), (2, 20000), (1, 28672), (4096, 7168),
     (16384, 4096), (3, 65537), (8192, 18432)],
)
SUPPORTED = quant.supported_quant_dtypes(DEVICE)


@pytest.fixture(autouse=True)
def _storable(request):
    """A case whose qdtype this device cannot store is skipped (test_unsupported_dtype checks the error)."""
    callspec = getattr(request.node, "callspec", None)
    qdtype = callspec.params.get("qdtype") if callspec else None
    if qdtype is not None and qdtype not in SUPPORTED:
        pytest.skip(f"{qdtype} cannot be stored on this device")


def test_unsupported_dtype():
    """Every quant dtype is either supported here or refused with a ValueError naming it."""
    assert torch.int8 in SUPPORTED and torch.float8_e5m2 in SUPPORTED
    assert (torch.float8_e4m3fn in SUPPORTED) != (torch.float8_e4m3fnuz in SUPPORTED) or not ON_GPU
    x = make_rows(4, 64, torch.bfloat16)
    for qdtype in Q_DTYPES:
        q, scale = torch.empty(x.shape, dtype=qdtype, device=DEVICE), torch.ones(1, device=DEVICE)
        if qdtype in SUPPORTED:
            quant.static_per_tensor_quant_fp8_i8(q, x, scale)
            continue
        with pytest.raises(ValueError, match=str(qdtype)):
            quant.static_per_tensor_quant_fp8_i8(q, x, scale)
        with pytest.raises(ValueError, match=str(qdtype)):
            quant.per_token_group_quant_fp8(x, 64, dtype=qdtype)


def _codes(q: torch.Tensor) -> torch.Tensor:
    """Quantized values as integers in value order: int8 as is, fp8 by sign and magnitude bits."""
    if not q.dtype.is_floating_point:
        return q.short()
    b = q.view(torch.uint8).short()
    return torch.where(b >= 128, -(b & 0x7F), b & 0x7F)


def _assert_codes(got: torch.Tensor, want: torch.Tensor, name: str) -> None:
    """At most one step apart, NaN where the reference has NaN."""
    assert got.shape == want.shape and got.dtype == want.dtype, f"{name}: {got.shape} {got.dtype}"
    if want.dtype.is_floating_point:
        nan = want.float().isnan()
        assert torch.equal(got.float().isnan(), nan), f"{name}: NaN where the reference has none (or none where it has)"
        got, want = got[~nan], want[~nan]
    far = (_codes(got) - _codes(want)).abs() > 1
    if far.any():
        where = far.nonzero()[:8].flatten().tolist()
        raise AssertionError(f"{name}: {int(far.sum())} of {got.numel()} more than one step off; first at {where}: "
                             f"got {got[far][:8].float().tolist()}, expected {want[far][:8].float().tolist()}")


def _assert_scales(got: torch.Tensor, want: torch.Tensor, name: str) -> None:
    assert torch.equal(got, want), f"{name}: scales differ: got {got.flatten()[:8].tolist()}, " \
                                   f"expected {want.flatten()[:8].tolist()}"
    assert torch.isfinite(got).all() and (got > 0).all(), f"{name}: a scale is not finite and positive"


def _step(q: torch.Tensor) -> torch.Tensor:
    """One quantization step at each of q's values (the gap to the next code out, or in at the top)."""
    if not q.dtype.is_floating_point:
        return torch.ones(q.shape, device=q.device)
    mag = q.view(torch.uint8).to(torch.int32) & 0x7F

    def value(m):
        return m.clamp(0, 0x7F).to(torch.uint8).view(q.dtype).float()

    up, here, down = value(mag + 1), value(mag), value(mag - 1)
    return torch.where((mag < 0x7F) & torch.isfinite(up), up - here, here - down)


def _assert_dequant(q, s, q_ref, s_ref, name, y_rtol, row_amax=None):
    """q * s within one step of q_ref * s_ref (scales broadcast to q's shape) plus ``y_rtol``
    of the row's amax (the quantized value's own rounding); NaN only where the reference has NaN.
    ``row_amax`` is the unquantized input's, where saturation clips the dequantized one."""
    got, want = q.float() * s, q_ref.float() * s_ref
    assert torch.equal(got.isnan(), want.isnan()), f"{name}: NaN where the reference has none (or none where it has)"
    if not want.numel():
        return
    if row_amax is None:
        row_amax = want.nan_to_num().abs().amax(-1, keepdim=True)
    bad = (got - want).abs() > s_ref * _step(q_ref) * 1.001 + y_rtol * row_amax
    if bad.any():
        where = bad.nonzero()[:6].tolist()
        raise AssertionError(f"{name}: {int(bad.sum())} of {bad.numel()} dequantized values more than a step off, "
                             f"first at {where}: got {got[bad][:6].tolist()}, expected {want[bad][:6].tolist()}")


def _poisoned_q(shape, dtype):
    q = torch.empty(shape, dtype=dtype, device=DEVICE)
    q.view(torch.uint8).fill_(0x7F if dtype.is_floating_point else 0x5A)  # fp8: NaN (e4m3fn) / a large code
    return q


def _input(m, n, dtype, strided=False):
    x = make_rows(m, n, dtype, strided=strided, scale=3.0)
    if m > 1:
        x[m // 2].zero_()  # an all-zero row: the scale's floor
    return x


@pytest.mark.parametrize("strided", [False, True])
@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("qdtype", Q_DTYPES, ids=str)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_per_token(dtype, qdtype, shape, strided):
    m, n = shape
    x = _input(m, n, dtype, strided)
    q, s = _poisoned_q((m, n), qdtype), torch.full((m, 1), float("nan"), device=DEVICE)
    got = quant.dynamic_per_token_quant_fp8_i8(q, x, s)
    assert got[0] is q and got[1] is s
    q_ref, s_ref = native.dynamic_per_token_quant_fp8_i8(torch.empty_like(q), x, torch.empty_like(s))
    _assert_scales(s, s_ref, "per-token scale")
    _assert_codes(q, q_ref, "per-token")
    if m > 1:  # the zero row: zeros and the floor 1 / (q_max * 512)
        assert (q[m // 2].float() == 0).all()
        assert s[m // 2].item() == pytest.approx(1 / (quant.quant_range(qdtype)[1] * 512))


@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("qdtype", Q_DTYPES, ids=str)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_per_tensor(dtype, qdtype, shape):
    m, n = shape
    x = _input(m, n, dtype, strided=True)
    scale_ref = torch.empty(1, device=DEVICE)
    q_ref, _ = native.dynamic_per_tensor_quant_fp8_i8(torch.empty((m, n), dtype=qdtype, device=DEVICE), x, scale_ref)
    # dynamic: whatever the scale held before (aiter needs it zeroed), twice the same bits
    runs = []
    for prior in (float("nan"), 1e30, -5.0):
        q, s = _poisoned_q((m, n), qdtype), torch.full((1,), prior, device=DEVICE)
        quant.dynamic_per_tensor_quant_fp8_i8(q, x, s)
        _assert_scales(s, scale_ref, "per-tensor scale")
        _assert_codes(q, q_ref, "dynamic per-tensor")
        runs.append(q.view(torch.uint8))
    assert all(torch.equal(r, runs[0]) for r in runs), "dynamic per-tensor is not deterministic"
    # static, with the reference's scale
    q = _poisoned_q((m, n), qdtype)
    assert quant.static_per_tensor_quant_fp8_i8(q, x, scale_ref) is q
    _assert_codes(q, q_ref, "static per-tensor")


@pytest.mark.parametrize("config", [QuantLaunchConfig(2, 64, 4), QuantLaunchConfig(1, 2048, 8),
                                    QuantLaunchConfig(1, 0, 8, LOOPED=True)], ids=str)
def test_per_tensor_paths(config):
    """One launch with many small tiles, a single tile and the amax-then-static pair each
    give the reference's scale and codes, call after call (their work words left zeroed)."""
    x = _input(9, 333, torch.bfloat16, strided=True)  # 5 x 6 tiles of 2 x 64
    x[3, 5] = -50.0  # the amax in one tile only
    qdtype = SUPPORTED[0]
    scale_ref = torch.empty(1, device=DEVICE)
    q_ref, _ = native.dynamic_per_tensor_quant_fp8_i8(torch.empty(x.shape, dtype=qdtype, device=DEVICE), x, scale_ref)
    if config.BLOCK_N == 2048:
        x, q_ref = x[:1], None  # one row: one tile
        native.dynamic_per_tensor_quant_fp8_i8(torch.empty(x.shape, dtype=qdtype, device=DEVICE), x, scale_ref)
    for _ in range(3):
        q, s = _poisoned_q(x.shape, qdtype), torch.full((1,), float("nan"), device=DEVICE)
        quant.dynamic_per_tensor_quant_fp8_i8(q, x, s, config=config)
        _assert_scales(s, scale_ref, f"per-tensor scale {config}")
        if q_ref is not None:
            _assert_codes(q, q_ref, f"dynamic per-tensor {config}")
        else:
            _assert_codes(q, quant.static_per_tensor_quant_fp8_i8(_poisoned_q(x.shape, qdtype), x, scale_ref),
                          f"dynamic per-tensor {config}")


def test_per_tensor_launch_config():
    """Small tensors take one launch (tiles within two programs an SM), large ones two."""
    from aiter_lite.ops.triton.quant.quant import dynamic_per_tensor_launch_config as cfg
    assert not cfg(1, 4096).LOOPED and not cfg(1, 7).LOOPED
    assert cfg(4096, 7168).LOOPED
    if ON_GPU:
        sms = torch.cuda.get_device_properties(DEVICE).multi_processor_count
        c = cfg(256, 4096, device_profile(DEVICE))
        assert not c.LOOPED and c.BLOCK_M * c.BLOCK_N <= 8192 and 256 * 4096 // (c.BLOCK_M * c.BLOCK_N) <= 2 * sms


@pytest.mark.parametrize("qdtype", Q_DTYPES, ids=str)
def test_saturation_and_nan(qdtype):
    lo, hi = quant.quant_range(qdtype)
    x = make_rows(3, 300, torch.bfloat16, scale=100.0)
    x[0, :4] = torch.tensor([1e4, -1e4, float("inf"), float("-inf")])
    q = quant.static_per_tensor_quant_fp8_i8(_poisoned_q(x.shape, qdtype), x, torch.tensor([1e-3], device=DEVICE))
    big = x.float().abs() * 1e3 > hi
    assert big.sum() > 100
    v = q.float()
    assert torch.isfinite(v).all(), "saturated values must stay finite"
    assert torch.equal(v[big], torch.where(x.float()[big] > 0, hi, lo)), "values beyond the range saturate"
    if qdtype.is_floating_point:  # NaN stays NaN in fp8
        x[1, 5] = float("nan")
        q = quant.static_per_tensor_quant_fp8_i8(_poisoned_q(x.shape, qdtype), x, torch.tensor([1.0], device=DEVICE))
        assert q[1, 5].float().isnan() and q.float().isnan().sum() == 1


def test_scale_ub():
    x = make_rows(8, 1000, torch.bfloat16, scale=3.0)
    q, s = quant.scaled_fp8_quant(x, scale_ub=torch.tensor([2.0], device=DEVICE), use_per_token_if_dynamic=True)
    q_ref, s_ref = native.scaled_fp8_quant(x, scale_ub=torch.tensor([2.0], device=DEVICE),
                                           use_per_token_if_dynamic=True)
    assert s.shape == (8, 1)
    _assert_scales(s, s_ref, "scale_ub")
    assert torch.equal(s, torch.full_like(s, 2.0 / 448.0))  # every row's amax is above 2
    _assert_codes(q, q_ref, "scale_ub")


@pytest.mark.parametrize("column_major", [False, True])
@pytest.mark.parametrize("group", [64, 128])
@pytest.mark.parametrize("shape", by_device([(0, 128), (1, 128), (5, 200), (9, 1408), (2, 4100)],
                                            [(0, 128), (1, 128), (5, 200), (33, 1408), (4096, 7168),
                                             (16384, 2048), (3, 65600)]), ids=str)
@pytest.mark.parametrize("qdtype", Q_DTYPES, ids=str)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_per_token_group(dtype, qdtype, shape, group, column_major):
    m, n = shape
    x = _input(m, n, dtype)
    if n > group:
        x[:, group:2 * group] = 0  # an all-zero group: scale eps / q_max
    q, s = quant.per_token_group_quant_fp8(x, group, dtype=qdtype, column_major_scales=column_major)
    q_ref, s_ref = native.per_token_group_quant_fp8(x, group, dtype=qdtype)
    assert s.shape == (m, -(-n // group))
    if column_major and m > 1:
        assert s.stride(0) == 1
    _assert_scales(s, s_ref, "group scale")
    _assert_codes(q, q_ref, "group")
    # the aiter-style form writes caller buffers (poisoned), a 3-D input included
    x3 = x.reshape(1, m, n)
    q3, s3 = _poisoned_q(x3.shape, qdtype), torch.full((1, m, -(-n // group)), float("nan"), device=DEVICE)
    quant.per_token_group_quant(q3, x3, s3, group)
    _assert_scales(s3[0], s_ref, "group scale (3-D)")
    _assert_codes(q3[0], q_ref, "group (3-D)")


def test_per_token_looped_config():
    """The looped per-token path pinned on short rows (several chunks, a partial last one)."""
    x = _input(5, 300, torch.bfloat16)
    for cfg in (QuantLaunchConfig(1, 64, 4, LOOPED=True), QuantLaunchConfig(2, 64, 4, LOOPED=True),
                QuantLaunchConfig(4, 512, 4)):
        q, s = _poisoned_q(x.shape, torch.float8_e4m3fn), torch.full((5,), float("nan"), device=DEVICE)
        quant.dynamic_per_token_quant_fp8_i8(q, x, s, config=cfg)
        q_ref, s_ref = native.dynamic_per_token_quant_fp8_i8(torch.empty_like(q), x, torch.empty_like(s))
        _assert_scales(s, s_ref, f"per-token {cfg}")
        _assert_codes(q, q_ref, f"per-token {cfg}")
    assert per_token_launch_config(4, 1 << 20).LOOPED


@pytest.mark.parametrize("n", [256, 300, 1000], ids=lambda n: f"n{n}")
def test_per_token_split_config(n):
    """Rows split over programs that wait for each other (pinned on short rows: whole
    segments, a partial last one, one with a single partial segment); scale_ub and a
    zero row included."""
    x = _input(6, n, torch.bfloat16)
    x[2] = 0
    ub = torch.tensor([0.5 * float(x.abs().amax())], device=DEVICE)
    cfg = QuantLaunchConfig(1, 128, 4, SPLIT=True)
    for bound in (None, ub):
        q, s = _poisoned_q(x.shape, torch.float8_e4m3fn), torch.full((6, 1), float("nan"), device=DEVICE)
        quant.dynamic_per_token_quant_fp8_i8(q, x, s, bound, config=cfg)
        q_ref, s_ref = native.dynamic_per_token_quant_fp8_i8(torch.empty_like(q), x, torch.empty_like(s), bound)
        _assert_scales(s, s_ref, f"per-token split, bound {bound}")
        _assert_codes(q, q_ref, f"per-token split, bound {bound}")


def test_per_token_split_choice(monkeypatch):
    """Split from 131072 columns and one wave of rows, while a row's segments fit the GPU at once."""
    from aiter_lite.ops.triton.quant import quant as quant_mod

    monkeypatch.setattr(quant_mod, "grid_sms", lambda device, interpreter_sms=4: 132)
    cfg = quant_mod.per_token_launch_config.__wrapped__
    assert cfg(512, 131072).SPLIT and cfg(256, 151936).SPLIT
    assert cfg(64, 131072).LOOPED and cfg(1024, 65536).LOOPED and cfg(256, 132 * 8192 + 1).LOOPED
    assert not cfg(4096, 16384).SPLIT


def test_zero_tensor():
    x = torch.zeros(4, 100, device=DEVICE, dtype=torch.bfloat16)
    for qdtype in SUPPORTED:
        q, s = quant.scaled_fp8_quant(x, dtype=qdtype)
        assert s.item() == pytest.approx(1 / (quant.quant_range(qdtype)[1] * 512)) and s.item() > 0
        assert (q.float() == 0).all()
        q, s = quant.per_token_group_quant_fp8(x, 64, dtype=qdtype)
        assert torch.isfinite(s).all() and (s > 0).all() and (q.float() == 0).all()


def test_dtypes_and_ranges():
    assert quant.quant_range(torch.float8_e4m3fn) == (-448.0, 448.0)
    assert quant.quant_range(torch.float8_e4m3fnuz) == (-240.0, 240.0)
    assert quant.quant_range(torch.float8_e5m2) == (-57344.0, 57344.0)
    assert quant.quant_range(torch.int8) == (-128.0, 127.0)
    want = torch.float8_e4m3fn
    if torch.version.hip and ON_GPU and "gfx94" in torch.cuda.get_device_properties(0).gcnArchName:
        want = torch.float8_e4m3fnuz
    assert quant.get_fp8_e4m3_dtype() == want
    q, _ = quant.scaled_fp8_quant(make_rows(2, 8, torch.float32))
    assert q.dtype == want


def test_bad_inputs():
    x = make_rows(4, 64, torch.bfloat16)
    q = torch.empty(4, 64, dtype=torch.float8_e4m3fn, device=DEVICE)
    one = torch.ones(1, device=DEVICE)
    with pytest.raises(ValueError, match="scale_in must have one element"):
        quant.static_per_tensor_quant_fp8_i8(q, x, torch.ones(2, device=DEVICE))
    with pytest.raises(TypeError, match="scale_in must be float32"):
        quant.static_per_tensor_quant_fp8_i8(q, x, one.half())
    with pytest.raises(TypeError, match="qx must be one of"):
        quant.static_per_tensor_quant_fp8_i8(x.clone(), x, one)
    with pytest.raises(ValueError, match="qx must have shape"):
        quant.static_per_tensor_quant_fp8_i8(q[:2], x, one)
    with pytest.raises(TypeError, match="x_in must be"):
        quant.static_per_tensor_quant_fp8_i8(q, x.to(torch.int32), one)
    with pytest.raises(ValueError, match="scale_out must have 4 elements"):
        quant.dynamic_per_token_quant_fp8_i8(q, x, torch.empty(3, device=DEVICE))
    with pytest.raises(ValueError, match="unit stride"):
        quant.dynamic_per_token_quant_fp8_i8(q, x.t(), torch.empty(64, device=DEVICE))
    with pytest.raises(ValueError, match="scale_ub must have one element"):
        quant.dynamic_per_token_quant_fp8_i8(q, x, torch.empty(4, device=DEVICE), torch.ones(4, device=DEVICE))
    with pytest.raises(ValueError, match="group_size must be a power of 2"):
        quant.per_token_group_quant_fp8(x, 48)
    with pytest.raises(TypeError, match="group_size must be an int"):
        quant.per_token_group_quant_fp8(x, 64.0)
    with pytest.raises(ValueError, match="scale_out must have shape"):
        quant.per_token_group_quant(q, x, torch.empty(4, 2, device=DEVICE), 64)
    with pytest.raises(ValueError, match="eps must be positive and finite"):
        quant.per_token_group_quant_fp8(x, 64, eps=0.0)
    with pytest.raises(ValueError, match="scale_ub"):
        quant.scaled_fp8_quant(x, scale=one, scale_ub=one)
    with pytest.raises(ValueError, match="use_per_token_if_dynamic"):
        quant.scaled_fp8_quant(x, scale_ub=one)
    with pytest.raises(TypeError, match="dtype must be one of"):
        quant.scaled_fp8_quant(x, dtype=torch.float16)
    with pytest.raises(ValueError, match="column_major_scales needs a 2-D x"):
        quant.per_token_group_quant_fp8(x.reshape(2, 2, 64), 64, column_major_scales=True)


# ---------------------------------------------------------------------------
# NaN and inf: visible in their own row (group), never in another


def _same(got: torch.Tensor, want: torch.Tensor) -> bool:
    """Equal values, NaN exactly where the other has NaN (fp8 NaN codes may differ)."""
    g, w = got.float(), want.float()
    return g.shape == w.shape and torch.equal(g.isnan(), w.isnan()) and torch.equal(g.nan_to_num(), w.nan_to_num())


def assert_nonfinite_isolated(run, ref, x, at, bad, r, c, group=None):
    """``run(x) -> (q, scale)`` with ``bad`` (NaN or inf) written to x at ``at``, against
    ``run`` of x itself and the reference ``ref``: the scale of row ``r`` (of its group
    holding output column ``c``) is not finite and is the reference's; that row's (group's)
    values are the reference's (NaN codes in fp8, 0 in int8, what inf * 0 gives); every
    other value and scale is bit for bit x's own."""
    q0, s0 = run(x)
    xb = x.clone()
    xb[at] = bad
    q1, s1 = run(xb)
    q_ref, s_ref = ref(xb)
    m = q1.shape[0]
    q0, q1, q_ref, s0, s1, s_ref = (t.reshape(m, -1) for t in (q0, q1, q_ref, s0, s1, s_ref))
    n = q1.shape[1]
    g = n if group is None else group
    cols, sc = slice(c // g * g, min((c // g + 1) * g, n)), (0 if group is None else c // g)
    hit_q = torch.zeros(q1.shape, dtype=torch.bool, device=q1.device)
    hit_q[r, cols] = True
    hit_s = torch.zeros(s1.shape, dtype=torch.bool, device=s1.device)
    hit_s[r, sc] = True
    assert torch.equal(q1.view(torch.uint8)[~hit_q], q0.view(torch.uint8)[~hit_q]), "a value outside the row moved"
    assert torch.equal(s1[~hit_s], s0[~hit_s]), "a scale outside the row moved"
    assert not torch.isfinite(s1[r, sc]), f"the row's scale hides the {bad}: {s1[r, sc].item()}"
    assert _same(s1[r, sc], s_ref[r, sc]), f"scale {s1[r, sc].item()}, reference {s_ref[r, sc].item()}"
    assert _same(q1[r, cols], q_ref[r, cols]), f"row values {q1[r, cols].float()[:8].tolist()}, reference " \
                                               f"{q_ref[r, cols].float()[:8].tolist()}"


BADS = {"nan": float("nan"), "inf": float("inf")}
# Tiny rows (the interpreter's time grows with the tile): several rows a program by
# default, a row in 16-wide chunks (looped) or over 16-wide programs (split).
TOKEN_CONFIGS = {"default": None, "looped": QuantLaunchConfig(1, 16, 4, LOOPED=True),
                 "split": QuantLaunchConfig(1, 16, 4, SPLIT=True)}


@pytest.mark.parametrize("path", TOKEN_CONFIGS)
@pytest.mark.parametrize("bad", BADS)
@pytest.mark.parametrize("qdtype", Q_DTYPES, ids=str)
def test_per_token_nonfinite_row(qdtype, bad, path):
    """A NaN / inf in one row of fresh random rows: that row's scale NaN / inf as the
    reference's, every other row bit for bit the clean input's."""
    cfg = TOKEN_CONFIGS[path]
    dtype = DTYPES[Q_DTYPES.index(qdtype) % len(DTYPES)]
    x = make_rows(5, 40, dtype, strided=True, scale=3.0)

    def run(x):
        q, s = _poisoned_q(x.shape, qdtype), torch.full((5, 1), float("nan"), device=DEVICE)
        return quant.dynamic_per_token_quant_fp8_i8(q, x, s, config=cfg)

    def ref(x):
        return native.dynamic_per_token_quant_fp8_i8(torch.empty(x.shape, dtype=qdtype, device=DEVICE), x,
                                                     torch.empty(5, 1, device=DEVICE))

    assert_nonfinite_isolated(run, ref, x, (2, 37), BADS[bad], 2, 37)


@pytest.mark.parametrize("bad", BADS)
@pytest.mark.parametrize("qdtype", Q_DTYPES, ids=str)
def test_scaled_fp8_quant_nonfinite_bound(qdtype, bad):
    """vLLM's per-token form with a bound: a NaN stays NaN in its row only; an inf is capped."""
    x = make_rows(4, 24, torch.bfloat16, scale=3.0)
    ub = torch.tensor([2.0], device=DEVICE)

    def run(x):
        return quant.scaled_fp8_quant(x, scale_ub=ub, use_per_token_if_dynamic=True, dtype=qdtype)

    def ref(x):
        return native.scaled_fp8_quant(x, scale_ub=ub, use_per_token_if_dynamic=True, dtype=qdtype)

    if bad == "nan":
        assert_nonfinite_isolated(run, ref, x, (3, 0), BADS[bad], 3, 0)
    else:
        x[3, 0] = BADS[bad]
        (q, s), (q_ref, s_ref) = run(x), ref(x)
        assert torch.equal(s, s_ref) and torch.isfinite(s).all() and _same(q, q_ref)


@pytest.mark.parametrize("bad", BADS)
@pytest.mark.parametrize("qdtype", Q_DTYPES, ids=str)
def test_per_token_group_nonfinite(qdtype, bad):
    """A NaN / inf in one group of one row: that group's scale only (the partial last group
    too), column-major scales."""
    dtype = DTYPES[Q_DTYPES.index(qdtype) % len(DTYPES)]
    x = make_rows(3, 40, dtype, scale=3.0)

    def run(x):
        return quant.per_token_group_quant_fp8(x, 16, dtype=qdtype, column_major_scales=True)

    def ref(x):
        return native.per_token_group_quant_fp8(x, 16, dtype=qdtype)

    assert_nonfinite_isolated(run, ref, x, (1, 20), BADS[bad], 1, 20, 16)
    assert_nonfinite_isolated(run, ref, x, (2, 39), BADS[bad], 2, 39, 16)
    if not qdtype.is_floating_point:
        assert_nonfinite_isolated(lambda x: quant.per_token_group_quant_int8(x, 16),
                                  lambda x: native.per_token_group_quant_int8(x, 16), x, (0, 3), BADS[bad], 0, 3, 16)


@pytest.mark.parametrize("config", [None, QuantLaunchConfig(2, 16, 4), QuantLaunchConfig(1, 0, 8, LOOPED=True)],
                         ids=["one-tile", "tiles", "looped"])
@pytest.mark.parametrize("bad", BADS)
@pytest.mark.parametrize("qdtype", Q_DTYPES, ids=str)
def test_per_tensor_nonfinite(qdtype, bad, config):
    """Dynamic per tensor (one launch of one tile or many, or amax then static): a NaN / inf
    anywhere makes the tensor's scale NaN / inf, as the reference's, and the values its."""
    dtype = DTYPES[Q_DTYPES.index(qdtype) % len(DTYPES)]
    x = make_rows(5, 40, dtype, strided=True, scale=3.0)
    x[3, 33] = BADS[bad]
    q, s = _poisoned_q(x.shape, qdtype), torch.full((1,), 1.0, device=DEVICE)
    quant.dynamic_per_tensor_quant_fp8_i8(q, x, s, config=config)
    q_ref, s_ref = native.dynamic_per_tensor_quant_fp8_i8(torch.empty_like(q), x, torch.empty_like(s))
    assert not torch.isfinite(s).any() and _same(s, s_ref), f"scale {s.item()}, reference {s_ref.item()}"
    assert _same(q, q_ref)
    if config is None:  # vLLM's form
        q, s = quant.scaled_fp8_quant(x, dtype=qdtype)
        assert _same(s, s_ref) and _same(q, q_ref)


@pytest.mark.parametrize("qdtype", Q_DTYPES, ids=str)
def test_static_nonfinite(qdtype):
    """A static scale: inf saturates, NaN is NaN in fp8 and 0 in int8, as the reference; nothing else moves."""
    x = make_rows(3, 24, torch.float16, scale=3.0)
    scale = torch.tensor([0.01], device=DEVICE)
    clean = quant.static_per_tensor_quant_fp8_i8(_poisoned_q(x.shape, qdtype), x, scale)
    x[1, :3] = torch.tensor([float("nan"), float("inf"), float("-inf")])
    q = quant.static_per_tensor_quant_fp8_i8(_poisoned_q(x.shape, qdtype), x, scale)
    q_ref = native.static_per_tensor_quant_fp8_i8(torch.empty_like(q), x, scale)
    assert _same(q, q_ref)
    lo, hi = quant.quant_range(qdtype)
    assert q[1, 1].float().item() == hi and q[1, 2].float().item() == lo
    assert q[1, 0].float().isnan() if qdtype.is_floating_point else q[1, 0].item() == 0
    assert torch.equal(q.view(torch.uint8)[:, 3:], clean.view(torch.uint8)[:, 3:])
    assert torch.equal(q.view(torch.uint8)[[0, 2]], clean.view(torch.uint8)[[0, 2]])
    q, _ = quant.scaled_fp8_quant(x, scale, dtype=qdtype)
    assert _same(q, q_ref)


# ---------------------------------------------------------------------------
# errors: the public op's name and its caller's argument names


def test_meta_tensors_refused():
    """Every op, every tensor argument (output buffers included) on a device Triton cannot launch on."""
    x = make_rows(4, 64, torch.bfloat16)
    q, one = torch.empty(4, 64, dtype=torch.int8, device=DEVICE), torch.ones(1, device=DEVICE)
    assert_each_tensor_refused_on_meta(quant.static_per_tensor_quant_fp8_i8, q, x, one)
    assert_each_tensor_refused_on_meta(quant.dynamic_per_tensor_quant_fp8_i8, q, x, torch.empty(1, device=DEVICE))
    assert_each_tensor_refused_on_meta(quant.dynamic_per_token_quant_fp8_i8, q, x, torch.empty(4, device=DEVICE), one)
    assert_each_tensor_refused_on_meta(quant.per_token_group_quant, q, x, torch.empty(4, 2, device=DEVICE), 32)
    assert_each_tensor_refused_on_meta(quant.scaled_fp8_quant, x, one, output=q)
    assert_each_tensor_refused_on_meta(quant.scaled_fp8_quant, x, None, one, True, q)
    assert_each_tensor_refused_on_meta(quant.per_token_group_quant_fp8, x, 32, out_q=q)
    assert_each_tensor_refused_on_meta(quant.per_token_group_quant_int8, x, 32)


def test_errors_name_the_public_op_and_argument():
    """vLLM's allocating forms report under their own names and their callers' argument names."""
    x = make_rows(4, 64, torch.bfloat16)
    one = torch.ones(1, device=DEVICE)
    cases = [
        (TypeError, r"^scaled_fp8_quant: input must be float32", lambda: quant.scaled_fp8_quant(x.int())),
        (ValueError, r"^scaled_fp8_quant: output must have shape \(4, 64\) for input \(4, 64\)",
         lambda: quant.scaled_fp8_quant(x, output=torch.empty(4, 8, dtype=torch.int8, device=DEVICE))),
        (TypeError, r"^scaled_fp8_quant: output must be a torch.Tensor", lambda: quant.scaled_fp8_quant(x, output=3)),
        (ValueError, r"^scaled_fp8_quant: scale must have one element",
         lambda: quant.scaled_fp8_quant(x, torch.ones(2, device=DEVICE))),
        (TypeError, r"^scaled_fp8_quant: use_per_token_if_dynamic must be a bool",
         lambda: quant.scaled_fp8_quant(x, use_per_token_if_dynamic="yes")),
        (TypeError, r"^per_token_group_quant_fp8: x must be float32",
         lambda: quant.per_token_group_quant_fp8(x.int(), 32)),
        (ValueError, r"^per_token_group_quant_fp8: out_q must have shape \(4, 64\) for x",
         lambda: quant.per_token_group_quant_fp8(x, 32, out_q=torch.empty(4, 8, dtype=torch.int8, device=DEVICE))),
        (ValueError, r"^per_token_group_quant_int8: group_size must be a power of 2",
         lambda: quant.per_token_group_quant_int8(x, 48)),
        (ValueError, r"^per_token_group_quant_int8: eps must be positive",
         lambda: quant.per_token_group_quant_int8(x, 32, -1.0)),
        (TypeError, r"^per_token_group_quant_int8: x must be a torch.Tensor",
         lambda: quant.per_token_group_quant_int8(x.tolist(), 32)),
        (TypeError, r"^per_token_group_quant_int8: dtype must be one of",
         lambda: quant.per_token_group_quant_int8(x, 32, dtype=torch.float16)),
        (TypeError, r"^per_token_group_quant: scale_out must be a torch.Tensor",
         lambda: quant.per_token_group_quant(torch.empty(4, 64, dtype=torch.int8, device=DEVICE), x, "s", 32)),
        (TypeError, r"^dynamic_per_tensor_quant_fp8_i8: x_in must be float32",
         lambda: quant.dynamic_per_tensor_quant_fp8_i8(torch.empty(4, 64, dtype=torch.int8, device=DEVICE), x.int(),
                                                        one)),
    ]
    for exc, match, call in cases:
        with pytest.raises(exc, match=match):
            call()


def test_scales_through_their_strides():
    """A per-token scale every other element of a longer buffer, a group scale in any
    layout: written through their strides, nothing else touched."""
    x = make_rows(4, 64, torch.bfloat16, scale=3.0)
    q = torch.empty(4, 64, dtype=torch.int8, device=DEVICE)
    buf = torch.full((8,), -1.0, device=DEVICE)
    quant.dynamic_per_token_quant_fp8_i8(q, x, buf[::2])
    _, s_ref = native.dynamic_per_token_quant_fp8_i8(torch.empty_like(q), x, torch.empty(4, device=DEVICE))
    assert torch.equal(buf[::2], s_ref) and (buf[1::2] == -1).all()
    buf = torch.full((4, 3), -1.0, device=DEVICE)
    quant.per_token_group_quant(q, x, buf[:, 1:], 32)
    _, s_ref = native.per_token_group_quant_fp8(x, 32, dtype=torch.int8)
    assert torch.equal(buf[:, 1:], s_ref) and (buf[:, 0] == -1).all()


@pytest.fixture
def _truncating(monkeypatch):
    """AITER_INT8_ROUNDING=truncate, read afresh (plans and the cached setting forgotten on
    the way in and out)."""
    from aiter_lite.utils import fast_launch

    monkeypatch.setenv("AITER_INT8_ROUNDING", "truncate")
    fast_launch.reset()
    yield
    monkeypatch.delenv("AITER_INT8_ROUNDING")
    fast_launch.reset()


def test_int8_truncates_toward_zero_where_asked(_truncating, monkeypatch):
    """aiter's int8 bits: every int8 path (static, per token, per group, a fused norm, a
    fused SwiGLU, the fused_fp8_quant forms) truncates toward zero, the native reference
    with it; about half the codes then differ from the default's nearest rounding."""
    from aiter_lite.ops.native.quant import act_quant as native_act
    from aiter_lite.ops.native.quant import fused_fp8_quant as native_ffq
    from aiter_lite.ops.native.quant import norm_quant as native_nq
    from aiter_lite.ops.triton.quant import act_quant, fused_fp8_quant, norm_quant
    from aiter_lite.envs import int8_truncates

    x = make_rows(6, 256, scale=3.0)
    w = torch.rand(256, device=DEVICE) + 0.5
    scale = torch.full((1,), 0.013, device=DEVICE)
    q = quant.static_per_tensor_quant_fp8_i8(torch.empty(6, 256, dtype=torch.int8, device=DEVICE), x, scale)
    assert torch.equal(q.float(), (x * (1.0 / scale)).clamp(-128, 127).trunc())  # the same fp32 product
    calls = [
        (lambda m: m.per_token_group_quant_int8(x, 64), quant, native),
        (lambda m: m.dynamic_per_token_quant_fp8_i8(torch.empty(6, 256, dtype=torch.int8, device=DEVICE), x,
                                                    torch.empty(6, 1, device=DEVICE)), quant, native),
        (lambda m: (m.rmsnorm2d_fwd_with_dynamicquant(out := torch.empty(6, 256, dtype=torch.int8, device=DEVICE),
                                                      x, torch.empty(6, 1, device=DEVICE), w, 1e-6), out)[1],
         norm_quant, native_nq),
        (lambda m: m.act_mul_and_fp8_quant(x, "silu", None, torch.int8), act_quant, native_act),
        (lambda m: m.fused_rms_fp8_group_quant(x, w, 1e-6, dtype_quant=torch.int8), fused_fp8_quant, native_ffq),
        (lambda m: m.fused_rms_gated_fp8_group_quant(x, w, None, x, 1e-6, out_dtype=torch.int8), fused_fp8_quant,
         native_ffq),
    ]

    def codes(result):
        return next(t for t in registry.flat_tensors(result) if t.dtype == torch.int8).int()

    for i, (call, tri_mod, ref_mod) in enumerate(calls):
        got, truncated = codes(call(tri_mod)), codes(call(ref_mod))
        monkeypatch.setenv("AITER_INT8_ROUNDING", "nearest")
        int8_truncates.cache_clear()
        nearest = codes(call(ref_mod))
        monkeypatch.setenv("AITER_INT8_ROUNDING", "truncate")
        int8_truncates.cache_clear()
        # one step apart at most where the fp32 math's order moves a value across an integer
        assert (got - truncated).abs().max() <= 1 and (got == truncated).float().mean() > 0.99, f"call {i}"
        assert (got != nearest).float().mean() > 0.2, f"call {i}: the codes round to nearest"


# ---------------------------------------------------------------------------
# asymmetric int8 (vLLM's azp form)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("m,n", [(0, 64), (1, 1), (1, 7), (7, 1368), (5, 127), (2, 20000)])
@pytest.mark.parametrize("strided", [False, True])
@pytest.mark.parametrize("looped", [False, True])
def test_dynamic_per_token_int8_azp_quant(dtype, m, n, strided, looped):
    x = (make_rows(m, n, dtype, strided=strided, scale=300.0).float() + 50).to(dtype)
    q = _poisoned_q((m, n), torch.int8)
    s = torch.full((m, 1), float("nan"), device=DEVICE)
    z = torch.full((m, 1), 77, dtype=torch.int32, device=DEVICE)
    cfg = QuantLaunchConfig(1, 256, 4, LOOPED=True) if looped else None
    got = quant.dynamic_per_token_int8_azp_quant(q, x, s, z, config=cfg)
    assert got[0] is q and got[1] is s and got[2] is z
    q_ref, s_ref, z_ref = native.dynamic_per_token_int8_azp_quant(
        torch.empty_like(q), x, torch.empty_like(s), torch.empty_like(z))
    assert torch.equal(s, s_ref) and torch.equal(z, z_ref)
    assert torch.equal(q, q_ref)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("m,n", [(0, 64), (1, 7), (7, 1368), (2, 20000)])
@pytest.mark.parametrize("azp", [-255, 0, 54])
def test_static_per_tensor_int8_azp_quant(dtype, m, n, azp):
    x = make_rows(m, n, dtype, strided=True, scale=300.0)
    scale = torch.tensor([2.1], device=DEVICE)
    zp = torch.tensor([azp], dtype=torch.int32, device=DEVICE)
    q = _poisoned_q((m, n), torch.int8)
    assert quant.static_per_tensor_int8_azp_quant(q, x, scale, zp) is q
    assert torch.equal(q, native.static_per_tensor_int8_azp_quant(torch.empty_like(q), x, scale, zp))


def test_int8_rounding_edges():
    """Symmetric int8 (static and dynamic per token): ties to even, saturation past int8 and
    past int32, inf and NaN (0), element for element equal to the reference."""
    vals = [0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 126.5, 127.5, -127.5, -128.5, 200.0, -300.0, 3.0e9, -3.0e9, 1e30,
            float("inf"), float("-inf"), float("nan"), 0.0, -0.0]
    x = torch.tensor(vals, device=DEVICE).repeat(3, 1)
    scale = torch.ones(1, device=DEVICE)
    q = _poisoned_q(tuple(x.shape), torch.int8)
    quant.static_per_tensor_quant_fp8_i8(q, x, scale)
    want = native.static_per_tensor_quant_fp8_i8(torch.empty_like(q), x, scale)
    assert torch.equal(q, want), (q[0].tolist(), want[0].tolist())
    xd = torch.tensor([[0.5, 1.5, 2.5, -2.5, 127.0, 3.0, -126.5, -1.0]], device=DEVICE).repeat(2, 1)  # scale 1
    q = _poisoned_q(tuple(xd.shape), torch.int8)
    s = torch.empty(2, 1, device=DEVICE)
    quant.dynamic_per_token_quant_fp8_i8(q, xd, s)
    q_ref, s_ref = torch.empty_like(q), torch.empty_like(s)
    native.dynamic_per_token_quant_fp8_i8(q_ref, xd, s_ref)
    assert torch.equal(s, s_ref) and torch.equal(q, q_ref), (q.tolist(), q_ref.tolist())


@pytest.mark.parametrize("azp", [-2**31, -2**22 - 5, -3, 0, 3, 2**22 + 3, 2**31 - 1])
def test_static_int8_azp_rounding_edges(azp):
    """Ties (to even before the zero point), products past 2^22 and past int32 (clamped
    first), inf and NaN (0 before the zero point), under zero points past every range the
    sum could wrap in: equal to the reference element for element."""
    ties = [0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 126.5, 127.5, -128.5, 4194303.5]
    big = [4194304.0, 4194305.0, -4194305.0, 3.0e9, -3.0e9, 1e30, -1e30, float("inf"), float("-inf"), float("nan")]
    x = torch.tensor(ties + big + [v - 4194300.0 for v in (0.0, 1.0, 2.5)], device=DEVICE).repeat(3, 1)
    q = _poisoned_q(tuple(x.shape), torch.int8)
    scale = torch.ones(1, device=DEVICE)
    zp = torch.tensor([azp], dtype=torch.int32, device=DEVICE)
    quant.static_per_tensor_int8_azp_quant(q, x, scale, zp)
    want = native.static_per_tensor_int8_azp_quant(torch.empty_like(q), x, scale, zp)
    assert torch.equal(q, want), (azp, q[0].tolist(), want[0].tolist())


def test_int8_azp_quant_nan_inf_and_refusals():
    nan = float("nan")
    # a NaN, an inf, a row of NaN only (min +inf, max -inf, as the reference's), a constant row (scale 0)
    x = torch.tensor([[1.0, nan, -3.0, 7.0], [float("inf"), 1.0, 2.0, 3.0], [nan] * 4, [5.0] * 4], device=DEVICE)
    q, s, z = quant.dynamic_per_token_int8_azp_quant(_poisoned_q((4, 4), torch.int8), x,
                                                     torch.empty(4, 1, device=DEVICE),
                                                     torch.empty(4, 1, dtype=torch.int32, device=DEVICE))
    q_ref, s_ref, z_ref = native.dynamic_per_token_int8_azp_quant(torch.empty_like(q), x, torch.empty_like(s),
                                                                  torch.empty_like(z))
    assert torch.equal(q, q_ref) and torch.equal(s, s_ref) and torch.equal(z, z_ref)
    assert q[0, 1] == z[0, 0]  # NaN: the zero point
    assert s[2, 0] == -float("inf")
    op = quant.static_per_tensor_int8_azp_quant
    one = torch.ones(1, device=DEVICE)
    azp = torch.zeros(1, dtype=torch.int32, device=DEVICE)
    with pytest.raises(TypeError, match="static_per_tensor_int8_azp_quant: qx must be int8"):
        op(torch.empty(2, 4, dtype=torch.float8_e5m2, device=DEVICE), x[:2], one, azp)
    with pytest.raises(TypeError, match="static_per_tensor_int8_azp_quant: azp_in must be int32"):
        op(torch.empty(2, 4, dtype=torch.int8, device=DEVICE), x[:2], one, one)
    with pytest.raises(ValueError, match="static_per_tensor_int8_azp_quant: azp_in must have one element"):
        op(torch.empty(2, 4, dtype=torch.int8, device=DEVICE), x[:2], one, torch.zeros(2, dtype=torch.int32))
    with pytest.raises(ValueError, match="dynamic_per_token_int8_azp_quant: scale_out must have 2 elements"):
        quant.dynamic_per_token_int8_azp_quant(torch.empty(2, 4, dtype=torch.int8, device=DEVICE), x[:2], one,
                                               torch.zeros(2, 1, dtype=torch.int32, device=DEVICE))
