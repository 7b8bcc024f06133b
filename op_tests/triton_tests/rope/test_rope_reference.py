"""The native RoPE reference (aiter_lite.ops.native.rope) against an independent fp64
formula built from index arithmetic, for every layout, plus gradcheck of its autograd."""

import pytest
import torch

from aiter_lite.ops.native.rope import rope as ref
from op_tests.utils import DEVICE, DTYPES, assert_close
from op_tests.utils.rope import angles, ref_rotate64

STYLES = [0, 1]
# (head dim, table width, reuse): full, half-width reused, partial (nope), odd rotary widths
DIMS = [(64, 64, False), (64, 32, True), (64, 32, False), (80, 40, True), (96, 24, False), (128, 16, True)]


def _check(got, want, dtype):
    """Within one rounding of the output dtype of the fp64 value."""
    assert got.dtype == dtype
    eps = torch.finfo(dtype).eps
    assert_close(got.double(), want, dtype=dtype, atol=4 * eps, rtol=eps, name="rope")


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("style", STYLES)
@pytest.mark.parametrize("d,f,reuse", DIMS)
@pytest.mark.parametrize("nope_first", [False, True])
def test_sbhd_freqs(dtype, style, d, f, reuse, nope_first):
    s, b, h = 5, 2, 3
    x = torch.randn(s, b, h, d, device=DEVICE, dtype=dtype)
    freqs = angles(s + 2, f).float()[:, None, None, :]
    c, sn = torch.cos(freqs.double()[:s]), torch.sin(freqs.double()[:s])
    want = ref_rotate64(x, [(c, sn)], style, reuse, nope_first)
    _check(ref.rope_fwd(x, freqs, style, reuse, nope_first), want, dtype)
    back = ref_rotate64(x, [(c, sn)], style, reuse, nope_first, backward=True)
    _check(ref.rope_bwd(x, freqs, style, reuse, nope_first), back, dtype)


@pytest.mark.parametrize("style", STYLES)
@pytest.mark.parametrize("offsets", [False, True])
def test_sbhd_cached_positions(style, offsets):
    s, b, h, d, f, rows = 4, 3, 2, 64, 32, 50
    x = torch.randn(s, b, h, d, device=DEVICE)
    a = angles(rows, f)
    cos, sin = torch.cos(a).float()[:, None, None, :], torch.sin(a).float()[:, None, None, :]
    pos = torch.randint(0, rows // 2, (s, b), device=DEVICE)
    off = torch.randint(0, rows // 2, (s, b), device=DEVICE) if offsets else None
    idx = pos + (off if offsets else 0)
    want = ref_rotate64(x, [(torch.cos(a)[idx][:, :, None], torch.sin(a)[idx][:, :, None])], style, True, False)
    got = (ref.rope_cached_positions_offsets_fwd(x, cos, sin, pos, off, style, True, False) if offsets
           else ref.rope_cached_positions_fwd(x, cos, sin, pos, style, True, False))
    _check(got, want, torch.float32)
    # without positions: token (i, b) uses row i
    want = ref_rotate64(x, [(torch.cos(a)[:s, None, None], torch.sin(a)[:s, None, None])], style, True, False)
    _check(ref.rope_cached_fwd(x, cos, sin, style, True, False), want, torch.float32)


@pytest.mark.parametrize("style", STYLES)
def test_thd_restarts_per_sequence(style):
    cu = torch.tensor([0, 3, 3, 10, 12], device=DEVICE)  # an empty sequence too
    t, h, d, f = 14, 2, 64, 64  # two tokens past the last sequence pass through
    x = torch.randn(t, h, d, device=DEVICE)
    freqs = angles(16, f).float()[:, None, None, :]
    pos = torch.tensor([0, 1, 2, 0, 1, 2, 3, 4, 5, 6, 0, 1], device=DEVICE)
    c, sn = torch.cos(freqs.double()[pos, 0]), torch.sin(freqs.double()[pos, 0])
    want = x.double().clone()
    want[:12] = ref_rotate64(x[:12], [(c, sn)], style, False, False)
    _check(ref.rope_thd_fwd(x, cu, freqs, style, False, False), want, torch.float32)


@pytest.mark.parametrize("style", STYLES)
@pytest.mark.parametrize("qh,kh", [(8, 1), (4, 4), (6, 2)])
def test_2c_q_and_k(style, qh, kh):
    t, d, f, rows = 7, 128, 32, 40
    q, k = torch.randn(t, qh, d, device=DEVICE), torch.randn(t, kh, d, device=DEVICE)
    a = angles(rows, f)
    cos, sin = torch.cos(a).float(), torch.sin(a).float()
    pos, off = torch.randint(0, 20, (t,), device=DEVICE), torch.randint(0, 20, (t,), device=DEVICE)
    tables = [(torch.cos(a)[pos + off][:, None], torch.sin(a)[pos + off][:, None])]
    oq, ok = ref.rope_cached_thd_positions_offsets_2c_fwd(q, k, cos, sin, pos, off, style, False, False)
    _check(oq, ref_rotate64(q, tables, style, False, False), torch.float32)
    _check(ok, ref_rotate64(k, tables, style, False, False), torch.float32)


@pytest.mark.parametrize("style", STYLES)
@pytest.mark.parametrize("reuse", [False, True])
def test_2d_height_then_width(style, reuse):
    b, hi, wi, h, d = 2, 3, 5, 2, 64
    f = d // 2 // (2 if reuse else 1)
    x = torch.randn(b, hi * wi, h, d, device=DEVICE)
    ah, aw = angles(hi + 1, f), angles(wi + 2, f)
    tok = torch.arange(hi * wi, device=DEVICE)
    tables = [(torch.cos(ah)[tok // wi][None, :, None], torch.sin(ah)[tok // wi][None, :, None]),
              (torch.cos(aw)[tok % wi][None, :, None], torch.sin(aw)[tok % wi][None, :, None])]
    four = lambda t: t.float()[None, :, None, :]  # noqa: E731  (1, rows, 1, F) as aiter lays them out
    got = ref.rope_fwd_2d(x, four(torch.cos(ah)), four(torch.sin(ah)), four(torch.cos(aw)), four(torch.sin(aw)),
                          hi, wi, style, reuse, False)
    _check(got, ref_rotate64(x, tables, style, reuse, False), torch.float32)


def test_inplace_keeps_the_passthrough_bits():
    x = torch.randn(3, 2, 4, 64, device=DEVICE, dtype=torch.bfloat16)
    x[0, 0, 0, 40] = float("nan")
    keep = x[..., 32:].clone()
    freqs = angles(3, 16).float()[:, None, None, :]
    want = ref.rope_fwd(x, freqs, 0, True, False)
    assert ref.rope_fwd_inplace(x, freqs, 0, True, False) is x
    assert torch.equal(x[..., 32:].view(torch.int16), keep.view(torch.int16))
    assert torch.equal(x[..., :32], want[..., :32])


def test_transpose_output_lays_out_b_s():
    x = torch.randn(5, 3, 2, 64, device=DEVICE)
    freqs = angles(5, 32).float()[:, None, None, :]
    out = ref.rope_fwd(x, freqs, 0, True, False, transpose_output=True)
    assert out.shape == x.shape and out.transpose(0, 1).is_contiguous()
    assert torch.equal(out, ref.rope_fwd(x, freqs, 0, True, False))


@pytest.mark.parametrize("style", STYLES)
@pytest.mark.parametrize("reuse,nope_first", [(False, False), (True, True)])
def test_gradcheck_fp64(style, reuse, nope_first):
    # Gradients for x and for the angles; the *_bwd op is the transpose of the forward.
    x = torch.randn(3, 2, 2, 16, dtype=torch.float64, requires_grad=True)
    freqs = angles(3, 4 if reuse else 8, device="cpu")[:, None, None, :].requires_grad_()
    torch.autograd.gradcheck(lambda x, f: ref.rope_fwd(x, f, style, reuse, nope_first), (x, freqs))
    g = torch.randn_like(x)
    (dx,) = torch.autograd.grad(ref.rope_fwd(x, freqs, style, reuse, nope_first), x, g)
    assert torch.allclose(dx, ref.rope_bwd(g, freqs.detach(), style, reuse, nope_first), atol=1e-12)


@pytest.mark.parametrize("f,reuse", [(33, False), (40, True), (0, False)])
def test_table_width_must_fit(f, reuse):
    x = torch.randn(2, 1, 1, 64, device=DEVICE)
    with pytest.raises(ValueError, match="rope_fwd: a table"):
        ref.rope_fwd(x, torch.zeros(2, 1, 1, f, device=DEVICE), 0, reuse, False)
