"""The Triton RoPE ops (aiter_lite.ops.triton.rope) against an fp64 formula built from index
arithmetic: every layout, rotate style, rotary width, nope placement, positions / offsets,
in place and out of place, forward and backward, every dtype. Outputs are poisoned with
NaN, so an element the kernel does not write fails; channels outside the rotary part must
keep their bits."""

import math

import pytest
import torch

import aiter_lite.ops.triton.rope.rope as rope_mod
from aiter_lite.ops.native.rope import rope as native
from aiter_lite.ops.triton.rope import rope as tr
from aiter_lite.spec.device import device_profile
from op_tests.utils import DEVICE, DTYPES, ON_GPU, assert_close, by_device
from op_tests.utils.rope import angles, ref_rotate64

STYLES = [0, 1]
# (head dim, table width, reuse): full rotation, half-width table reused, half rotary (nope),
# widths that are not powers of 2, 25% rotary, and the wide heads
DIMS = by_device(
    [(64, 32, True), (80, 20, False), (96, 24, True)],
    [(64, 64, False), (64, 32, True), (64, 32, False), (80, 40, True), (80, 20, False), (96, 24, True),
     (128, 16, True), (128, 64, True), (192, 96, True), (192, 48, False), (256, 64, True)],
)
KINDS = ["fwd", "inplace", "bwd"]


@pytest.fixture(autouse=True)
def _poison_outputs(monkeypatch):
    """Every output the ops allocate starts as NaN."""
    real = rope_mod._new_out

    def poisoned(x, transpose_output=False):
        return real(x, transpose_output).fill_(float("nan"))

    monkeypatch.setattr(rope_mod, "_new_out", poisoned)


def _tol(dtype):
    """One rounding of the output dtype (the error of fp32 math is far below it)."""
    eps = torch.finfo(dtype).eps
    return dict(atol=max(4 * eps, 2e-6), rtol=eps)


def _bits(t):
    return t.contiguous().view({2: torch.int16, 4: torch.int32}[t.element_size()])


def _check(op, got, x, want, rot: tuple[int, int]):
    """got against the fp64 value inside the rotary channels [rot[0], rot[1]); bit-identical to x outside."""
    assert got.dtype == x.dtype and got.shape == x.shape, op
    lo, hi = rot
    assert_close(got[..., lo:hi], want[..., lo:hi], dtype=x.dtype, name=op, **_tol(x.dtype))
    for sl in (slice(0, lo), slice(hi, None)):
        assert torch.equal(_bits(got[..., sl]), _bits(x[..., sl])), f"{op}: passthrough channels changed"


def _rot(d, f, reuse, nope_first, parts=1):
    r = parts * f * (2 if reuse else 1)
    return (d - r, d) if nope_first else (0, r)


def _call(kind, name, x, *args, **kw):
    """Run the fwd / inplace / bwd form of ``name``; returns (result, the x that was rotated)."""
    if kind == "inplace":
        x = x.clone()
        out = getattr(tr, f"{name}_fwd_inplace")(x, *args, **kw)
        assert out is x
        return out, x
    return getattr(tr, f"{name}_{kind}")(x, *args, **kw), x


def _sbhd(s, b, h, d, dtype):
    return torch.randn(s, b, h, d, device=DEVICE, dtype=dtype)


# ---------------------------------------------------------------------------
# SBHD, raw angles


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("style", STYLES)
@pytest.mark.parametrize("d,f,reuse", DIMS)
@pytest.mark.parametrize("nope_first", [False, True])
@pytest.mark.parametrize("kind", KINDS)
def test_sbhd_freqs(dtype, style, d, f, reuse, nope_first, kind):
    s, b, h = by_device((5, 2, 3), (67, 3, 5))
    x = _sbhd(s, b, h, d, dtype)
    freqs = angles(s + 3, f).float()[:, None, None, :]
    orig = x.clone()
    got, _ = _call(kind, "rope", x, freqs, style, reuse, nope_first)
    c, sn = torch.cos(freqs.double()[:s]), torch.sin(freqs.double()[:s])
    want = ref_rotate64(orig, [(c, sn)], style, reuse, nope_first, backward=kind == "bwd")
    _check(f"rope_{kind}", got, orig, want, _rot(d, f, reuse, nope_first))
    assert torch.equal(x, orig)  # the input of an out-of-place op is left alone


@pytest.mark.parametrize("kind", ["fwd", "bwd"])
@pytest.mark.parametrize("style", STYLES)
def test_sbhd_transpose_output(kind, style):
    x = _sbhd(6, 3, 2, 64, torch.bfloat16)
    freqs = angles(6, 16).float()[:, None, None, :]
    got = getattr(tr, f"rope_{kind}")(x, freqs, style, True, True, True)
    assert got.shape == x.shape and got.transpose(0, 1).is_contiguous()
    assert torch.equal(got, getattr(tr, f"rope_{kind}")(x, freqs, style, True, True))


# ---------------------------------------------------------------------------
# SBHD, cached cos / sin, with positions and offsets


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("style", STYLES)
@pytest.mark.parametrize("index", ["rows", "positions", "offsets"])
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("table_dtype", by_device([torch.float32], [torch.float32, torch.bfloat16]))
def test_sbhd_cached(dtype, style, index, kind, table_dtype):
    s, b, h, d, f, rows = *by_device((4, 3, 2), (300, 4, 7)), 128, 32, 700
    reuse, nope_first = index != "positions", index == "offsets"  # half rotary with a table reused or not
    x = _sbhd(s, b, h, d, dtype)
    a = angles(rows, f)
    cos, sin = torch.cos(a).to(table_dtype), torch.sin(a).to(table_dtype)
    four = lambda t: t[:, None, None, :]  # noqa: E731  (rows, 1, 1, F), aiter's layout
    pos = torch.randint(0, rows // 2, (s, b), device=DEVICE, dtype=torch.int32)
    off = torch.randint(0, rows // 2, (s, b), device=DEVICE)
    if index == "rows":
        got, _ = _call(kind, "rope_cached", x, four(cos), four(sin), style, reuse, nope_first)
        idx = torch.arange(s, device=DEVICE)[:, None].expand(s, b)
    elif index == "positions":
        got, _ = _call(kind, "rope_cached_positions", x, four(cos), four(sin), pos, style, reuse, nope_first)
        idx = pos.long()
    else:
        got, _ = _call(kind, "rope_cached_positions_offsets", x, four(cos), four(sin), pos, off, style, reuse,
                       nope_first)
        idx = pos + off
    tables = [(cos.double()[idx][:, :, None], sin.double()[idx][:, :, None])]
    want = ref_rotate64(x, tables, style, reuse, nope_first, backward=kind == "bwd")
    _check(f"rope_cached {index} {kind}", got, x, want, _rot(d, f, reuse, nope_first))


# ---------------------------------------------------------------------------
# THD varlen, raw angles


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("style", STYLES)
@pytest.mark.parametrize("d,f,reuse", DIMS)
@pytest.mark.parametrize("kind", KINDS)
def test_thd(dtype, style, d, f, reuse, kind):
    # an empty sequence, and tokens past the last sequence (they pass through unrotated)
    lens = by_device([3, 0, 7, 2], [1, 0, 517, 64, 1000, 3])
    cu = torch.tensor([0] + lens, device=DEVICE).cumsum(0).to(torch.int32)
    t, h = int(cu[-1]) + 2, 3
    x = torch.randn(t, h, d, device=DEVICE, dtype=dtype)
    freqs = angles(max(lens) + 1, f).float()[:, None, None, :]
    nope_first = d % 3 == 0
    got, _ = _call(kind, "rope_thd", x, cu, freqs, style, reuse, nope_first)
    pos = torch.cat([torch.arange(n, device=DEVICE) for n in lens])
    want = x.double().clone()
    c, sn = torch.cos(freqs.double()[pos, 0]), torch.sin(freqs.double()[pos, 0])
    want[: len(pos)] = ref_rotate64(x[: len(pos)], [(c, sn)], style, reuse, nope_first, backward=kind == "bwd")
    _check(f"rope_thd_{kind}", got, x, want, _rot(d, f, reuse, nope_first))
    assert torch.equal(_bits(got[len(pos):]), _bits(x[len(pos):]))


# ---------------------------------------------------------------------------
# Q and K together ("2c"), cached tables, positions (+ offsets): the serving case


HEADS = by_device([(1, 1), (6, 2), (16, 1)],
                  [(1, 1), (2, 1), (4, 4), (8, 1), (6, 2), (16, 1), (32, 8), (40, 8), (7, 7), (48, 3), (64, 4)])
TOKENS = by_device([0, 1, 5], [0, 1, 5, 1000])
HEAD_DIMS = by_device([64, 80], [64, 80, 128, 192])


def _two(kind, offsets, q, k, cos, sin, pos, off, style, reuse, nope_first):
    name = "rope_cached_thd_positions_offsets_2c" if offsets else "rope_cached_thd_positions_2c"
    args = (cos, sin, pos) + ((off,) if offsets else ()) + (style, reuse, nope_first)
    if kind == "inplace":
        q, k = q.clone(), k.clone()
        oq, ok = getattr(tr, f"{name}_fwd_inplace")(q, k, *args)
        assert oq is q and ok is k
        return oq, ok
    return getattr(tr, f"{name}_{kind}")(q, k, *args)


@pytest.mark.parametrize("qh,kh", HEADS)
@pytest.mark.parametrize("t", TOKENS)
@pytest.mark.parametrize("d", HEAD_DIMS)
@pytest.mark.parametrize("style", STYLES)
@pytest.mark.parametrize("kind", KINDS)
def test_2c(qh, kh, t, d, style, kind):
    dtype = torch.bfloat16
    rows = 4096
    q = torch.randn(t, qh, d, device=DEVICE, dtype=dtype)
    k = torch.randn(t, kh, d, device=DEVICE, dtype=dtype)
    a = angles(rows, d // 2)
    cos, sin = torch.cos(a).float(), torch.sin(a).float()
    pos = torch.randint(0, rows // 2, (t,), device=DEVICE)
    off = torch.randint(0, rows // 2, (t,), device=DEVICE, dtype=torch.int32)
    offsets = t % 2 == 1
    oq, ok = _two(kind, offsets, q, k, cos, sin, pos, off, style, True, False)
    idx = pos + off if offsets else pos
    tables = [(cos.double()[idx][:, None], sin.double()[idx][:, None])]
    bwd = kind == "bwd"
    _check(f"2c {kind} q", oq, q, ref_rotate64(q, tables, style, True, False, backward=bwd), (0, d))
    _check(f"2c {kind} k", ok, k, ref_rotate64(k, tables, style, True, False, backward=bwd), (0, d))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("style", STYLES)
@pytest.mark.parametrize("d,f,reuse", DIMS)
@pytest.mark.parametrize("nope_first", [False, True])
@pytest.mark.parametrize("offsets", [False, True])
def test_2c_widths_and_dtypes(dtype, style, d, f, reuse, nope_first, offsets):
    t, qh, kh, rows = by_device(7, 300), 4, 2, 64
    q = torch.randn(t, qh, d, device=DEVICE, dtype=dtype)
    k = torch.randn(t, kh, d, device=DEVICE, dtype=dtype)
    a = angles(rows, f)
    cos, sin = torch.cos(a).to(dtype), torch.sin(a).to(dtype)  # tables in the activations' dtype
    pos = torch.randint(0, rows // 2, (t,), device=DEVICE)
    off = torch.randint(0, rows // 2, (t,), device=DEVICE)
    oq, ok = _two("inplace", offsets, q, k, cos, sin, pos, off, style, reuse, nope_first)
    idx = pos + off if offsets else pos
    tables = [(cos.double()[idx][:, None], sin.double()[idx][:, None])]
    rot = _rot(d, f, reuse, nope_first)
    _check("2c q", oq, q, ref_rotate64(q, tables, style, reuse, nope_first), rot)
    _check("2c k", ok, k, ref_rotate64(k, tables, style, reuse, nope_first), rot)


@pytest.mark.parametrize("style", STYLES)
def test_2c_inplace_on_qkv_slices(style):
    # vLLM's q and k are column slices of one qkv tensor: rows strided, v must stay untouched.
    t, qh, kh, d, rows = by_device(9, 777), 8, 2, 128, 1000
    qkv = torch.randn(t, (qh + 2 * kh) * d, device=DEVICE, dtype=torch.bfloat16)
    before = qkv.clone()
    q = qkv[:, : qh * d].view(t, qh, d)
    k = qkv[:, qh * d: (qh + kh) * d].view(t, kh, d)
    a = angles(rows, d // 2)
    cos, sin = torch.cos(a).float(), torch.sin(a).float()
    pos = torch.randint(0, rows, (t,), device=DEVICE)
    tr.rope_cached_thd_positions_2c_fwd_inplace(q, k, cos, sin, pos, style, True, False)
    tables = [(cos.double()[pos][:, None], sin.double()[pos][:, None])]
    _check("q slice", q, before[:, : qh * d].view(t, qh, d),
           ref_rotate64(before[:, : qh * d].view(t, qh, d), tables, style, True, False), (0, d))
    kb = before[:, qh * d: (qh + kh) * d].view(t, kh, d)
    _check("k slice", k, kb, ref_rotate64(kb, tables, style, True, False), (0, d))
    assert torch.equal(qkv[:, (qh + kh) * d:], before[:, (qh + kh) * d:])


# ---------------------------------------------------------------------------
# 2-D images


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("style", STYLES)
@pytest.mark.parametrize("reuse,nope_first", [(False, False), (True, False), (True, True)])
@pytest.mark.parametrize("kind", KINDS)
def test_2d(dtype, style, reuse, nope_first, kind):
    b, hi, wi, h, d = *by_device((2, 3, 5, 2), (2, 24, 40, 3)), 128
    f = (d // 4 if nope_first else d // 2) // (2 if reuse else 1)  # nope_first: half the head rotates
    x = torch.randn(b, hi * wi, h, d, device=DEVICE, dtype=dtype)
    ah, aw = angles(hi + 1, f), angles(wi + 2, f)
    four = lambda t: t.float()[None, :, None, :]  # noqa: E731  (1, rows, 1, F), aiter's layout
    tabs = (four(torch.cos(ah)), four(torch.sin(ah)), four(torch.cos(aw)), four(torch.sin(aw)), hi, wi)
    if kind == "inplace":
        got = x.clone()
        assert tr.rope_fwd_2d_inplace(got, *tabs, style, reuse, nope_first) is got
    else:
        got = getattr(tr, f"rope_{kind}_2d")(x, *tabs, style, reuse, nope_first)
    tok = torch.arange(hi * wi, device=DEVICE)
    tables = [(torch.cos(ah)[tok // wi][None, :, None], torch.sin(ah)[tok // wi][None, :, None]),
              (torch.cos(aw)[tok % wi][None, :, None], torch.sin(aw)[tok % wi][None, :, None])]
    # float32 tables, as the op was given
    tables = [(c.float().double(), s.float().double()) for c, s in tables]
    want = ref_rotate64(x, tables, style, reuse, nope_first, backward=kind == "bwd")
    _check(f"rope_2d {kind}", got, x, want, _rot(d, f, reuse, nope_first, parts=2))


def test_2d_transpose_output():
    x = torch.randn(2, 12, 2, 64, device=DEVICE, dtype=torch.float16)
    t = [torch.randn(4, 16, device=DEVICE) for _ in range(4)]
    got = tr.rope_fwd_2d(x, *t, 3, 4, 0, False, False, transpose_output=True)
    assert got.transpose(0, 1).is_contiguous()
    assert torch.equal(got, tr.rope_fwd_2d(x, *t, 3, 4, 0, False, False))


# ---------------------------------------------------------------------------
# autograd classes: a gradient for every input, equal to the native reference's autograd


def test_autograd_classes():
    s, b, h, d, f = 5, 2, 3, 64, 16
    x = torch.randn(s, b, h, d, device=DEVICE, requires_grad=True)
    freqs = angles(s, f).float()[:, None, None, :].requires_grad_()
    a = angles(s, f).float()
    cos, sin = torch.cos(a)[:, None, None].requires_grad_(), torch.sin(a)[:, None, None].requires_grad_()
    cu = torch.tensor([0, 2, 5], device=DEVICE)
    xt = torch.randn(5, h, d, device=DEVICE, requires_grad=True)
    x2 = torch.randn(b, 6, h, d, device=DEVICE, requires_grad=True)
    tabs2 = [torch.randn(3, 8, device=DEVICE, requires_grad=True) for _ in range(4)]
    cases = [
        (tr.RoPE.apply, native.rope_fwd, (x, freqs), (1, True, False)),
        (tr.RoPETHD.apply, native.rope_thd_fwd, (xt, cu, freqs), (0, True, True)),
        (tr.RoPECached.apply, native.rope_cached_fwd, (x, cos, sin), (1, True, True)),
        (tr.RoPE2D.apply, native.rope_fwd_2d, (x2, *tabs2, 2, 3), (0, False, False)),
    ]
    for fn, ref, tensors, flags in cases:
        y = fn(*tensors, *flags)
        g = torch.randn_like(y)
        inputs = [t for t in tensors if isinstance(t, torch.Tensor) and t.requires_grad]
        got = torch.autograd.grad(y, inputs, g)
        want = torch.autograd.grad(ref(*tensors, *flags), inputs, g)
        for i, (gt, wt) in enumerate(zip(got, want)):
            assert_close(gt, wt, dtype=torch.float32, atol=1e-5, rtol=1e-5, name=f"{fn.__self__.__name__} grad {i}")


def _grads_match(name, y, want_y, inputs):
    """Every gradient of ``y`` (the Triton class) equals the native reference's autograd."""
    g = torch.randn_like(y)
    got = torch.autograd.grad(y, inputs, g)
    want = torch.autograd.grad(want_y, inputs, g)
    for i, (gt, wt) in enumerate(zip(got, want)):
        assert_close(gt, wt, dtype=torch.float32, atol=1e-5, rtol=1e-5, name=f"{name} grad {i}")


@pytest.mark.parametrize("style", STYLES)
@pytest.mark.parametrize("reuse", [False, True])
@pytest.mark.parametrize("nope_first", [False, True])
def test_autograd_table_grads(style, reuse, nope_first):
    """Table gradients of every class for each rotary layout: a partial rotary part (16 of 48
    channels, two for 2-D) at either end, tables with rows no token reads, THD tokens past
    cu_seqlens[-1] (they pass through: no gradient into the table), transpose_output."""
    s, b, h, d = 4, 2, 2, 48
    f = 8 if reuse else 16
    leaf = lambda *shape: torch.randn(*shape, device=DEVICE, requires_grad=True)  # noqa: E731
    flags = (style, reuse, nope_first)
    x, freqs = leaf(s, b, h, d), leaf(s + 2, 1, 1, f)
    _grads_match("RoPE", tr.RoPE.apply(x, freqs, *flags, not nope_first), native.rope_fwd(x, freqs, *flags),
                 [x, freqs])
    xt, cu, freqs_t = leaf(7, h, d), torch.tensor([0, 2, 5], device=DEVICE), leaf(4, f)
    _grads_match("RoPETHD", tr.RoPETHD.apply(xt, cu, freqs_t, *flags), native.rope_thd_fwd(xt, cu, freqs_t, *flags),
                 [xt, freqs_t])
    cos, sin = leaf(s + 1, 1, 1, f), leaf(s + 1, 1, 1, f)
    _grads_match("RoPECached", tr.RoPECached.apply(x, cos, sin, *flags, nope_first),
                 native.rope_cached_fwd(x, cos, sin, *flags), [x, cos, sin])
    x2, tabs2 = leaf(b, 2 * 3, h, d), [leaf(1, 4, 1, f) for _ in range(4)]
    _grads_match("RoPE2D", tr.RoPE2D.apply(x2, *tabs2, 2, 3, *flags), native.rope_fwd_2d(x2, *tabs2, 2, 3, *flags),
                 [x2, *tabs2])


@pytest.mark.parametrize("style", STYLES)
@pytest.mark.parametrize("reuse", [False, True])
@pytest.mark.parametrize("nope_first", [False, True])
def test_table_grads_positions_offsets(style, reuse, nope_first):
    """The table gradient rule with rows from positions + offsets (repeated rows, rows no
    token reads), against the native positions op's autograd."""
    s, b, h, d, rows = 3, 4, 2, 40, 9
    f = 8 if reuse else 16
    x, g = torch.randn(s, b, h, d, device=DEVICE), torch.randn(s, b, h, d, device=DEVICE)
    cos, sin = (torch.randn(rows, f, device=DEVICE, requires_grad=True) for _ in range(2))
    pos = torch.randint(0, 5, (s, b), device=DEVICE)
    off = torch.randint(0, 4, (s, b), device=DEVICE)
    y = native.rope_cached_positions_offsets_fwd(x, cos, sin, pos, off, style, reuse, nope_first)
    want = torch.autograd.grad(y, [cos, sin], g)
    got = rope_mod._table_grads([True, True], x, g, [((cos, sin), pos + off)], style, reuse, nope_first)
    for name, gt, wt in zip(("cos", "sin"), got, want):
        assert_close(gt, wt, dtype=torch.float32, atol=1e-5, rtol=1e-5, name=f"d{name}")


def test_autograd_x_only_and_transpose_output():
    x = torch.randn(4, 3, 2, 32, device=DEVICE, requires_grad=True)
    freqs = angles(4, 16).float()[:, None, None, :]
    y = tr.RoPE.apply(x, freqs, 0, False, False, True)
    assert y.transpose(0, 1).is_contiguous()
    g = torch.randn_like(y)
    (dx,) = torch.autograd.grad(y, x, g)
    assert_close(dx, native.rope_bwd(g, freqs, 0, False, False), dtype=torch.float32, name="dx")


# ---------------------------------------------------------------------------
# positions outside the table, bad arguments


@pytest.mark.eager_host_checks
def test_positions_out_of_range_raise_when_checked(monkeypatch):
    x = torch.randn(3, 2, 2, 64, device=DEVICE)
    cos = sin = torch.randn(10, 1, 1, 32, device=DEVICE)
    pos = torch.tensor([[0, 1], [2, 10], [3, 4]], device=DEVICE)
    if ON_GPU:
        monkeypatch.setenv("AITER_ROPE_CHECK_POSITIONS", "1")
    with pytest.raises(ValueError, match=r"positions must lie in \[0, 10\).*from 0 to 10"):
        tr.rope_cached_positions_fwd(x, cos, sin, pos, 0, True, False)
    with pytest.raises(ValueError, match=r"positions \+ offsets must lie"):
        tr.rope_cached_thd_positions_offsets_2c_fwd(x[:, 0], x[:, 1], cos[:, 0, 0], sin[:, 0, 0], pos[:, 0],
                                                    -pos[:, 1], 0, True, False)
    freqs = torch.randn(2, 1, 1, 32, device=DEVICE)
    with pytest.raises(ValueError, match="longest sequence has 3 tokens, more than freqs' 2 rows"):
        tr.rope_thd_fwd(x[:, 0], torch.tensor([0, 3], device=DEVICE), freqs, 0, True, False)
    with pytest.raises(ValueError, match="cu_seqlens must start at 0 or more, never decrease"):
        tr.rope_thd_fwd(x[:, 0], torch.tensor([0, 2, 1], device=DEVICE), freqs, 0, True, False)


@pytest.mark.skipif(not ON_GPU, reason="indices on the CPU are always checked on the host")
def test_positions_out_of_range_give_nan_rows_unchecked():
    x = torch.randn(4, 3, 64, device=DEVICE)
    cos = sin = torch.randn(10, 32, device=DEVICE)
    pos = torch.tensor([0, 10, -1, 9], device=DEVICE)
    out, _ = tr.rope_cached_thd_positions_2c_fwd(x, x.clone(), cos, sin, pos, 0, True, False)
    assert out[[1, 2]].isnan().all() and not out[[0, 3]].isnan().any()


def test_bad_arguments():
    x = torch.randn(3, 2, 2, 64, device=DEVICE)
    cos = sin = torch.randn(8, 1, 1, 32, device=DEVICE)
    pos = torch.zeros(3, 2, dtype=torch.int64, device=DEVICE)
    bad = [
        (TypeError, "x must be float32, float16 or bfloat16", lambda: tr.rope_cached_fwd(x.long(), cos, sin, 0, True, False)),
        (ValueError, r"x must be 4-D \(s, b, h, d\)", lambda: tr.rope_cached_fwd(x[0], cos, sin, 0, True, False)),
        (ValueError, "rotate_style must be", lambda: tr.rope_cached_fwd(x, cos, sin, 2, True, False)),
        (ValueError, "rotates 128 channels", lambda: tr.rope_cached_fwd(x, torch.randn(8, 64, device=DEVICE),
                                                                   torch.randn(8, 64, device=DEVICE), 0, True, False)),
        (ValueError, "sin must have cos's shape", lambda: tr.rope_cached_fwd(x, cos, cos[:4], 0, True, False)),
        (ValueError, "fewer than x's sequence length 3", lambda: tr.rope_cached_fwd(x, cos[:2], sin[:2], 0, True, False)),
        (TypeError, "positions must be int32 or int64", lambda: tr.rope_cached_positions_fwd(x, cos, sin, pos.float(), 0, True, False)),
        (ValueError, r"positions must have shape \(3, 2\)", lambda: tr.rope_cached_positions_fwd(x, cos, sin, pos[0], 0, True, False)),
        (ValueError, "transpose_output=True needs an out-of-place op",
         lambda: tr.rope_cached_fwd_inplace(x, cos, sin, 0, True, False, True)),
        (ValueError, "transpose_output=True needs", lambda: tr.rope_cached_thd_positions_2c_fwd(
            x[:, 0], x[:, 1], cos[:, 0, 0], sin[:, 0, 0], pos[:, 0], 0, True, False, True)),
        (ValueError, "y must have x's 3 tokens", lambda: tr.rope_cached_thd_positions_2c_fwd(
            x[:, 0], x[:2, 1], cos, sin, pos[:, 0], 0, True, False)),
        (TypeError, "y must have x's dtype", lambda: tr.rope_cached_thd_positions_2c_fwd(
            x[:, 0], x[:, 1].half(), cos, sin, pos[:, 0], 0, True, False)),
        (ValueError, "img_height \\* img_width = 2 \\* 3 = 6", lambda: tr.rope_fwd_2d(
            x, cos, sin, cos, sin, 2, 3, 0, False, False)),
        (ValueError, "two rotary parts of 64 channels", lambda: tr.rope_fwd_2d(
            x.view(3, 2, 2, 64), cos, sin, cos, sin, 1, 2, 0, True, False)),
        (ValueError, "need at least img_height = 2 and img_width = 1",
         lambda: tr.rope_fwd_2d(x[:1], cos[:1], sin[:1], cos, sin, 2, 1, 0, False, False)),
        (TypeError, "nope_first must be a bool", lambda: tr.rope_cached_fwd(x, cos, sin, 0, True, "yes")),
    ]
    for exc, msg, call in bad:
        with pytest.raises(exc, match=msg):
            call()


def test_empty_and_gradless_inputs():
    cos = sin = torch.randn(8, 32, device=DEVICE)
    q, k = torch.randn(0, 4, 64, device=DEVICE), torch.randn(0, 1, 64, device=DEVICE)
    pos = torch.zeros(0, dtype=torch.int64, device=DEVICE)
    oq, ok = tr.rope_cached_thd_positions_2c_fwd(q, k, cos, sin, pos, 0, True, False)
    assert oq.shape == q.shape and ok.shape == k.shape
    x = torch.randn(3, 2, 0, 64, device=DEVICE)  # no heads
    assert tr.rope_cached_fwd(x, cos[:, None, None], sin[:, None, None], 0, True, False).shape == x.shape


# ---------------------------------------------------------------------------
# launch configuration: runtime token counts, bounded builds


@pytest.mark.parametrize("heads,heads2,d", [(32, 8, 128), (12, 2, 64), (1, 1, 80), (64, 0, 192), (7, 7, 256)])
def test_launch_config_covers_the_heads(heads, heads2, d):
    for t in (1, 5, 64, 1000, 32768):
        cfg = rope_mod.rope_launch_config(t, heads, heads2, d)
        for v in (cfg.BLOCK_T, cfg.BLOCK_H):
            assert v >= 1 and v & (v - 1) == 0
        assert cfg.BLOCK_H <= max(heads, 1) * 2
        assert cfg.BLOCK_T * cfg.BLOCK_H * triton_block(d) <= max(4096, triton_block(d))


def triton_block(d):
    return 1 << math.ceil(math.log2(d))


@pytest.mark.skipif(not ON_GPU, reason="kernel builds are cached per device (the interpreter builds nothing)")
def test_no_build_per_token_count():
    from aiter_lite.ops.triton._triton_kernels.rope.rope import _rope_kernel

    cos = sin = torch.randn(8192, 64, device=DEVICE)
    configs, builds = set(), []
    for t in list(range(1, 70, 3)) + [1000, 1001, 4097, 8191]:
        q, k = torch.randn(t, 32, 128, device=DEVICE), torch.randn(t, 8, 128, device=DEVICE)
        pos = torch.randint(0, 8192, (t,), device=DEVICE)
        tr.rope_cached_thd_positions_2c_fwd_inplace(q, k, cos, sin, pos, 0, True, False)
        configs.add(rope_mod.rope_launch_config(t, 32, 8, 128, device_profile(DEVICE)))
        builds.append(sum(len(c) for c in _rope_kernel.device_caches.values()) if hasattr(
            _rope_kernel, "device_caches") else len(_rope_kernel.cache[DEVICE.index]))
    assert builds[-1] - builds[0] <= len(configs), builds


@pytest.mark.skipif(not ON_GPU, reason="needs a tensor of more than 2^31 elements")
def test_int64_offsets():
    t, qh, d = (1 << 31) // (16 * 128) + 64, 16, 128
    try:
        q = torch.empty(t, qh, d, device=DEVICE, dtype=torch.bfloat16)
    except torch.OutOfMemoryError:
        pytest.skip("not enough GPU memory for a 4 GiB tensor")
    tail = slice(t - 40, t)
    q[tail] = torch.randn(40, qh, d, device=DEVICE, dtype=torch.bfloat16)
    k = torch.randn(t, 1, d, device=DEVICE, dtype=torch.bfloat16)
    cos = sin = torch.randn(64, 64, device=DEVICE)
    pos = torch.randint(0, 64, (t,), device=DEVICE)
    before = q[tail].clone()
    tr.rope_cached_thd_positions_2c_fwd_inplace(q, k, cos, sin, pos, 0, True, False)
    tables = [(cos.double()[pos[tail]][:, None], sin.double()[pos[tail]][:, None])]
    _check("int64 tail", q[tail], before, ref_rotate64(before, tables, 0, True, False), (0, d))
