"""softmax / log_softmax (aiter_lite.ops.triton.softmax) against torch in fp32: every
dtype, row lengths across the in-register and looped paths, edge rows (-inf, NaN,
+inf), strided rows, any dim; outputs poisoned so an unwritten element fails."""

import pytest
import torch

import aiter_lite.ops.triton.softmax as sm_mod
from aiter_lite.ops.native import softmax as native
from aiter_lite.ops.triton import softmax as tri
from aiter_lite.spec.device import INTERPRETER, PROFILES
from op_tests.triton_tests.test_activation import assert_each_tensor_refused_on_meta
from op_tests.utils import DEVICE, DTYPES, ON_GPU, assert_close, by_device, make_rows

OPS = ["softmax", "log_softmax"]
# across the in-register tiles (to 16384), both split segment widths (4096 to 131072,
# 8192 beyond) and the vocab sizes; the looped path on the GPU past half the SMs' worth
# of segments (the edge-row test's 600001 columns, 74 segments, on a 132-SM GPU)
WIDTHS = by_device([1, 7, 127, 1000, 4097],
                   [1, 7, 127, 1000, 4097, 16384, 16385, 32000, 32769, 65536, 128256, 131072, 131073,
                    151936, 201088, 262144, 300001])
ROWS = by_device([0, 1, 3, 37], [0, 1, 3, 37, 300])
INF, NAN = float("inf"), float("nan")


@pytest.fixture(autouse=True)
def _poison_outputs(monkeypatch):
    real = sm_mod._new_out
    monkeypatch.setattr(sm_mod, "_new_out", lambda x: real(x).fill_(NAN))


def _tol(dtype, op):
    """One rounding of the output (bf16 / fp16), a few fp32 ulps of the fp32 math."""
    if dtype == torch.float32:
        return dict(atol=1e-6 if op == "softmax" else 1e-5, rtol=1e-5)
    eps = torch.finfo(dtype).eps
    return dict(atol=1e-6 if op == "softmax" else eps, rtol=eps)


def _check(op, x, dim=-1):
    got = getattr(tri, op)(x, dim)
    want = getattr(torch, op)(x.double(), dim)
    assert got.dtype == x.dtype and got.shape == x.shape
    assert_close(got, want, dtype=x.dtype, name=f"{op} {tuple(x.shape)}", **_tol(x.dtype, op))
    return got


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n", WIDTHS)
@pytest.mark.parametrize("m", ROWS)
def test_softmax(op, dtype, n, m):
    x = make_rows(m, n, dtype, scale=4.0)
    got = _check(op, x)
    if op == "softmax" and m:  # every row sums to 1 within the output's rounding
        sums = got.double().sum(-1)
        assert (sums - 1).abs().max() <= 2 * torch.finfo(dtype).eps + 1e-6, sums


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("n", by_device([5, 300], [5, 300, 70000, 200001, 600001]))
def test_edge_rows_match_torch(op, n):
    x = torch.randn(8, n, device=DEVICE)
    x[0] = -INF                      # all -inf: NaN
    x[1, n // 2] = NAN               # a NaN: the row NaN
    x[2, 0] = INF                    # +inf: the row NaN
    x[3, ::2] = -INF                 # some -inf: 0 there (log: -inf)
    x[4] = 3.0                       # all equal: 1 / n
    x[5, : n // 2] = -INF            # -inf over a leading part (a whole chunk of the looped path)
    x[6, -1] = -INF
    got = getattr(tri, op)(x)
    want = getattr(torch, op)(x, -1)
    assert torch.equal(got.isnan(), want.isnan())
    assert_close(got, want, dtype=torch.float32, name=op, atol=1e-6, rtol=1e-5)


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("cfg", [sm_mod.SoftmaxLaunchConfig(1, 64, 4, True),
                                 sm_mod.SoftmaxLaunchConfig(1, 64, 4, True, SEGMENT=128),
                                 sm_mod.SoftmaxLaunchConfig(1, 64, 4, True, SEGMENT=64),
                                 sm_mod.SoftmaxLaunchConfig(1, 64, 4, False, SPLIT=True)],
                         ids=["looped", "looped_segments", "looped_segment_a_chunk", "split"])
@pytest.mark.parametrize("n", [300, 320], ids=["last_part", "whole_segments"])
def test_wide_row_paths_on_small_rows(op, cfg, n, monkeypatch):
    # 64-column chunks / segments (looped: a row's 64- or 128-column segments, a program
    # each, exchanging their statistics): merged across them, edge rows included
    monkeypatch.setattr(sm_mod, "softmax_launch_config", lambda *a, **k: cfg)
    x = torch.randn(6, n, device=DEVICE) * 8
    x[1] = -INF
    x[2, :200] = -INF
    x[3, 250] = NAN
    x[4, 10] = INF
    got = getattr(tri, op)(x)
    want = getattr(torch, op)(x, -1)
    assert torch.equal(got.isnan(), want.isnan())
    assert_close(got, want, dtype=torch.float32, name=op, atol=1e-6, rtol=1e-5)


@pytest.mark.parametrize("op", OPS)
def test_strided_rows_and_ranks(op):
    x = make_rows(9, 1000, torch.bfloat16, strided=True, lead=(2,))
    _check(op, x)
    y = torch.randn(3, 50, 4, device=DEVICE, dtype=torch.float16)
    got = _check(op, y, dim=1)
    assert got.is_contiguous()
    _check(op, y, dim=0)
    assert torch.equal(getattr(tri, op)(torch.tensor(2.0, device=DEVICE)),
                       getattr(torch, op)(torch.tensor(2.0, device=DEVICE), 0))
    _check(op, torch.randn(0, 5, device=DEVICE))
    _check(op, torch.randn(5, 0, device=DEVICE))


def test_leaves_input_alone():
    x = torch.randn(4, 100, device=DEVICE)
    before = x.clone()
    tri.softmax(x)
    assert torch.equal(x, before)


def test_bad_arguments():
    x = torch.randn(2, 3, device=DEVICE)
    with pytest.raises(TypeError, match="softmax: x must be float32, float16 or bfloat16, got torch.int64"):
        tri.softmax(x.long())
    with pytest.raises(ValueError, match=r"log_softmax: dim must be in \[-2, 1\] for x of shape \(2, 3\), got 2"):
        tri.log_softmax(x, 2)
    with pytest.raises(TypeError, match="softmax: dim must be an int, got float"):
        tri.softmax(x, 1.0)
    with pytest.raises(TypeError, match="softmax: x must be a torch.Tensor"):
        tri.softmax([1.0, 2.0])


def test_meta_tensors_refused():
    """x on a device Triton cannot launch on: a ValueError naming the op and x, whatever the dim or rank."""
    x = torch.randn(2, 3, device=DEVICE)
    for op in (tri.softmax, tri.log_softmax):
        assert_each_tensor_refused_on_meta(op, x)
        assert_each_tensor_refused_on_meta(op, x, 0)
        assert_each_tensor_refused_on_meta(op, x[0, 0])


@pytest.mark.parametrize("profile", [INTERPRETER, *PROFILES.values()], ids=lambda p: p.name)
@pytest.mark.parametrize("n_rows", [1, 7, 300, 100000])
@pytest.mark.parametrize("n_cols", [1, 100, 2048, 16384, 32768, 32769, 262144, 1 << 20])
def test_launch_config_covers_the_row(n_rows, n_cols, profile):
    cfg = sm_mod.softmax_launch_config(n_rows, n_cols, profile)
    assert cfg.BLOCK_N & (cfg.BLOCK_N - 1) == 0 and cfg.BLOCK_M >= 1
    assert cfg.LOOPED or cfg.SPLIT or cfg.BLOCK_N >= n_cols
    assert cfg.BLOCK_M * cfg.BLOCK_N <= max(2048, cfg.BLOCK_N)
    assert cfg.num_warps <= profile.max_warps  # 1024 lanes: 16 wavefronts of 64 on AMD
    if cfg.SPLIT:  # a row's segments are resident together: half the SMs at most
        assert -(-n_cols // cfg.BLOCK_N) <= profile.sms // 2
    if cfg.LOOPED and 0 < cfg.SEGMENT < n_cols:  # the looped forward's segments likewise, whole chunks
        assert cfg.SEGMENT % cfg.BLOCK_N == 0 and -(-n_cols // cfg.SEGMENT) <= max(profile.sms // 2, 1)


def test_native_matches_torch():
    x = torch.randn(5, 77, device=DEVICE, dtype=torch.bfloat16)
    assert torch.equal(native.softmax(x), torch.softmax(x.float(), -1).bfloat16())
    assert torch.equal(native.log_softmax(x, 0), torch.log_softmax(x.float(), 0).bfloat16())


@pytest.mark.skipif(not ON_GPU, reason="needs more than 2^31 elements of device memory")
def test_int64_offsets():
    m, n = 2**31 // 4096 + 3, 4096
    try:
        x = torch.empty(m, n, device=DEVICE, dtype=torch.bfloat16)
    except torch.OutOfMemoryError:
        pytest.skip("not enough GPU memory")
    x[-3:] = torch.randn(3, n, device=DEVICE, dtype=torch.bfloat16)
    got = tri.softmax(x[-3:].clone())  # the same rows at small offsets
    big = tri.softmax(x)
    assert torch.equal(big[-3:], got)
