"""topk (aiter_lite.ops.triton.topk) against the native reference, bit for bit, and
against torch.topk's values: every dtype, every path (one pass; the filter path with
its k = 1 form and its exact fallback; sorted in global memory) and its boundaries, k = 1 .. the row length, ties,
NaN / inf / signed zeros, largest False, sorted False, any dim and rank, strided
rows, empty inputs, bad arguments; outputs poisoned so an unwritten element fails."""

import pytest
import torch

import aiter_lite.ops.triton.topk as topk_mod
from aiter_lite.ops.native import topk as native
from aiter_lite.ops.triton.topk import TopkLaunchConfig, topk, topk_launch_config
from aiter_lite.utils.launch import cdiv
from op_tests.triton_tests.test_activation import assert_each_tensor_refused_on_meta
from op_tests.utils import DEVICE, DTYPES, ON_GPU, by_device, make_rows

NAN, INF = float("nan"), float("inf")
POISON_INDEX = -7

# (M, N, k). Rows: one pass up to 8192 columns (several rows a program when short), the
# filter path from 8193 (vocabulary sizes included), sorted in global memory for k
# above 2048 on rows past 8192. k: max extraction (<= 4), bitonic top-k, the row length.
_CPU_ROWS = [(0, 16), (1, 1), (3, 7), (5, 127), (2, 200)]
_GPU_N = (1, 7, 127, 1000, 4097, 8192, 8193, 32000, 128256, 151936, 201088, 262144)
CASES = by_device(
    # (vocabulary rows with small k take the filter path with its default config, cheaply)
    cpu=sorted({(m, n, min(k, n)) for m, n in _CPU_ROWS for k in (1, 3, 8, n)} | {(1, 32000, 1), (2, 128256, 4)}),
    gpu=sorted({(m, n, min(k, n)) for m in (0, 1, 7, 64) for n in _GPU_N for k in (1, 4, 5, 50, 64, 1024, 2049, n)}
               | {(256, 128256, k) for k in (1, 50, 1024)} | {(4, 262144, 1024), (2, 300001, 50)}),
)

# Pinned small configs, so the interpreter covers every path of long rows cheaply.
PATHS = {
    # 150 columns: 5 chunks of 32 over 3 segments, bound from 4-column groups, 16
    # candidates kept (random rows mostly fit; tie rows and NaN rows overflow them)
    "filter": (TopkLaunchConfig(1, 32, 8, False, 4, GROUP=4, CAP=16, SEGMENTS=3), 150, 7),
    # the same in one launch (a GPU: programs wait for their row's bound; the
    # interpreter runs it as the two launches), a chunk a segment
    "filter_one_launch": (TopkLaunchConfig(1, 32, 8, False, 4, GROUP=8, CAP=16, SEGMENTS=5, ONE_LAUNCH=True), 150, 5),
    # k = 1: the first launch's last program writes the largest
    "filter_first": (TopkLaunchConfig(1, 32, 1, False, 4, GROUP=8, SEGMENTS=2), 100, 1),
    # coarse groups and 8 candidates over 4 segments: random rows fit, tie rows and
    # rows of one repeated value (NaN, -inf, +inf) find their k-th key pass by pass
    "filter_exact": (TopkLaunchConfig(1, 32, 4, False, 4, GROUP=16, CAP=8, SEGMENTS=4), 200, 3),
    # 8-element sort blocks: 30 padded to 32, merged 8 -> 16 -> 32 (a mirror pass, then a
    # mirror and a half-cleaner pass)
    "sorted": (TopkLaunchConfig(16, 8, 8, False, 4, SORT=True), 30, 20),
}


@pytest.fixture(autouse=True)
def _poison_outputs(monkeypatch):
    def poisoned(shape, dtype, device):
        fill = NAN if dtype.is_floating_point else POISON_INDEX
        return torch.full(shape, fill, dtype=dtype, device=device)

    monkeypatch.setattr(topk_mod, "_new_out", poisoned)


def _bits(t: torch.Tensor) -> torch.Tensor:
    """The values' bits: compares NaN, -0.0 and +0.0 exactly."""
    return t.view(torch.int16 if t.element_size() == 2 else torch.int32)


def _assert_equal(got: torch.Tensor, want: torch.Tensor, name: str) -> None:
    if got.shape != want.shape:
        raise AssertionError(f"{name}: shape {tuple(got.shape)} != expected {tuple(want.shape)}")
    bad = got != want
    if bad.any():
        where = bad.nonzero()[:8].tolist()
        raise AssertionError(f"{name}: {int(bad.sum())} of {got.numel()} differ; first at {where}: got "
                             f"{[got[tuple(w)].item() for w in where]}, expected {[want[tuple(w)].item() for w in where]}")


def _check(x, k, dim=-1, largest=True, sorted=True, config=None):
    """Values and indices equal to the reference's bit for bit, values gathered from x at
    the indices, and torch.topk's values (its tie order is unspecified, its values not)."""
    got = topk(x, k, dim, largest, sorted, config=config)
    values, indices = got
    assert values.dtype == x.dtype and indices.dtype == torch.int64
    assert values.is_contiguous() and indices.is_contiguous()
    assert got.values is values and got.indices is indices
    want_v, want_i = native.topk(x, k, dim, largest)
    name = f"topk{tuple(x.shape)} {x.dtype} k={k} dim={dim} largest={largest}"
    _assert_equal(indices, want_i, f"{name} indices")
    _assert_equal(_bits(values), _bits(want_v), f"{name} values")
    if x.dim():  # (bits: torch's CPU gather of bfloat16 rewrites NaN payloads)
        _assert_equal(_bits(x).gather(dim, indices), _bits(values), f"{name} x.gather(dim, indices)")
    torch_v = torch.topk(x, k, dim, largest).values
    assert torch.equal(values.isnan(), torch_v.isnan()), f"{name}: NaN where torch.topk has none"
    _assert_equal(values.nan_to_num(0.5), torch_v.nan_to_num(0.5), f"{name} values vs torch.topk")
    return got


def _tie_rows(m, n, dtype, distinct=3):
    """Rows of a few distinct values: the tie rule decides most places."""
    return torch.randint(-distinct // 2, distinct - distinct // 2, (m, n), device=DEVICE).to(dtype)


def _edge_rows(n, dtype):
    """NaN, +-inf and signed zeros in every arrangement that matters."""
    x = torch.randn(8, n, device=DEVICE).to(dtype)
    x[0] = NAN
    x[1] = -INF
    x[2] = INF
    x[3, ::3] = NAN
    x[4, ::2] = -0.0
    x[4, 1::2] = 0.0
    x[5, ::4] = -INF
    x[5, 1::4] = INF
    x[5, 2::4] = NAN
    x[6, -1] = NAN
    x[7, : n // 2] = -INF
    return x


@pytest.mark.parametrize("case", CASES, ids=str)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_topk(dtype, case):
    m, n, k = case
    _check(make_rows(m, n, dtype, scale=3.0), k)


# Every path with every dtype and both orders on a GPU. On the CPU (the interpreter runs
# these grids slowly) each path once, dtypes and orders taking turns, and the exact
# path, whose passes walk the key bits, with both key widths and both orders.
_PATH_CASES = by_device(
    cpu=[(DTYPES[i % len(DTYPES)], path, i % 2 == 0) for i, path in enumerate(PATHS)]
    + [(torch.bfloat16, "filter_exact", True)],
    gpu=[(dtype, path, largest) for dtype in DTYPES for path in PATHS for largest in (True, False)],
)


@pytest.mark.parametrize("dtype, path, largest", _PATH_CASES, ids=str)
def test_long_row_paths_on_short_rows(dtype, path, largest):
    cfg, n, k = PATHS[path]
    x = torch.cat([make_rows(3, n, dtype), _tie_rows(2, n, dtype), _edge_rows(n, dtype)])
    _check(x, k, largest=largest, config=cfg)


@pytest.mark.parametrize("largest", [True, False])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_ties_go_to_the_lower_index(dtype, largest):
    n = by_device(64, 128256)
    for k in (1, 17, n):
        _check(_tie_rows(4, n, dtype, distinct=2), k, largest=largest)
    # all equal: the first k columns, in order
    indices = topk(torch.full((2, n), 1.5, device=DEVICE, dtype=dtype), 5, largest=largest).indices
    assert indices.tolist() == [list(range(5))] * 2


@pytest.mark.parametrize("largest", [True, False])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_nan_inf_and_signed_zeros(dtype, largest):
    n = by_device(37, 100003)
    x = _edge_rows(n, dtype)
    for k in (1, 5, n):
        _check(x, k, largest=largest)
    # as torch: NaN first when largest, last otherwise; -0.0 and +0.0 equal
    row = torch.tensor([[1.0, NAN, -INF, 3.0, NAN, INF, -0.0, 0.0, 3.0]], device=DEVICE, dtype=dtype)
    indices = _check(row, 9, largest=largest).indices
    want = [1, 4, 5, 3, 8, 0, 6, 7, 2] if largest else [2, 6, 7, 0, 3, 8, 5, 1, 4]
    assert indices[0].tolist() == want


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_keys_keep_every_order_of_the_dtype(dtype):
    # Neighbouring values (a few ulps apart, subnormals, the extremes) stay in order: keys
    # come from the bits, not from a rounded copy.
    info = torch.finfo(dtype)
    base = torch.tensor([1.0, -1.0, info.tiny, -info.tiny, info.max, -info.max, info.smallest_normal / 4,
                         -info.smallest_normal / 4, 0.0, -0.0], dtype=dtype)
    bits = _bits(base)
    x = torch.cat([base, (bits + 1).view(dtype), (bits - 1).view(dtype)])
    x = x[~x.isnan()].to(DEVICE)[None, :]
    _check(x, x.shape[1])
    _check(x, x.shape[1], largest=False)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_sorted_false_returns_the_same_set(dtype):
    x = make_rows(4, by_device(100, 128256), dtype)
    for k in (1, 7, 33):
        values, indices = topk(x, k, sorted=False)
        want_i = native.topk(x, k)[1]
        assert torch.equal(indices.sort(-1).values, want_i.sort(-1).values)
        _assert_equal(_bits(x).gather(-1, indices), _bits(values), "sorted=False values at their indices")


@pytest.mark.parametrize("dim", [0, 1, 2, -1, -2, -3])
def test_any_dim_of_a_3d_input(dim):
    x = make_rows(5, 33, torch.float32, lead=(6,))  # (6, 5, 33)
    _check(x, 3, dim)
    _check(x, 2, dim, largest=False)


def test_any_rank_and_layout():
    x = make_rows(3, 7, torch.bfloat16, lead=(2, 5))  # (2, 5, 3, 7)
    for dim in range(4):
        _check(x, 2, dim)
    _check(x.transpose(1, 3), 3, 2)  # dims around `dim` need three strides: gathered first
    _check(x[:, ::2, :, 1:6], 2, 1)  # sliced, every stride odd
    _check(x[0, 0, 0], 4)  # rank 1
    _check(torch.tensor(2.5, device=DEVICE), 1)  # rank 0: 0-dim outputs, as torch
    _check(torch.tensor(2.5, device=DEVICE), 0)
    _check(x.expand(2, 5, 3, 7)[:, :1].expand(2, 4, 3, 7), 3, 1)  # stride 0 along dim


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_strided_rows(dtype):
    m, n = by_device((6, 200), (300, 128256))
    x = make_rows(m, n, dtype, strided=True)
    assert not x.is_contiguous()
    _check(x, 5)
    _check(x.t(), 3, 0)  # unit-stride rows across, the selected dim strided
    _check(x, 3, config=None if ON_GPU else PATHS["filter"][0])


def test_empty_inputs():
    for shape, k, dim in [((0, 16), 4, -1), ((3, 10), 0, -1), ((3, 0), 0, 1), ((0, 0), 0, 0), ((4, 0, 5), 2, 2)]:
        x = torch.randn(shape, device=DEVICE)
        values, indices = topk(x, k, dim)
        want = torch.topk(x, k, dim)
        assert values.shape == want.values.shape and indices.shape == want.indices.shape
        assert indices.dtype == torch.int64 and values.dtype == x.dtype


@pytest.mark.skipif(not ON_GPU, reason="needs a GPU: 4 GiB input")
def test_column_offsets_past_2_31():
    # dim 0 of a (1100, 2^21 + 3) bf16 input: column offsets up to 2.3e9 elements
    x = torch.randn(1100, 2**21 + 3, device=DEVICE, dtype=torch.bfloat16)
    cols = torch.tensor([0, 1, 2**21 + 2], device=DEVICE)
    sub = x[:, cols]
    values, indices = topk(x, 50, 0)
    want_v, want_i = native.topk(sub, 50, 0)
    assert torch.equal(indices[:, cols], want_i) and torch.equal(values[:, cols], want_v)


def test_launch_config_paths():
    cfg = topk_launch_config(4096, 64, 8)  # MoE gating: rows several to a program
    assert not cfg.SORT and cfg.BLOCK_N == 64 and cfg.BLOCK_M > 1 and cfg.BLOCK_K == 8
    for n in (8193, 32000, 128256, 151936, 201088, 262144, 1 << 30):
        for m in (1, 16, 4096):
            for k in (1, 2, 50, 1024, 2048):
                cfg = topk_launch_config(m, n, k)
                assert not cfg.SORT and cfg.GROUP and cdiv(n, cfg.GROUP) >= max(k, min(4 * cfg.BLOCK_K, 2048))
                assert cfg.SEGMENTS <= cdiv(n, cfg.BLOCK_N)
                topk_mod._check_config(cfg, n, k)
        assert topk_launch_config(16, n, 2049).SORT
    for n, k in ((8192, 8192), (8192, 1), (5, 5)):
        cfg = topk_launch_config(3, n, k)
        assert cfg.BLOCK_N >= n >= k and not cfg.SORT and not cfg.GROUP


def test_pinned_config_that_cannot_progress():
    x = make_rows(2, 300, torch.float32)
    with pytest.raises(ValueError, match="does not fit a row of 300 with k = 20"):
        topk(x, 20, config=TopkLaunchConfig(1, 32, 32, False, 4, GROUP=64, CAP=64))  # groups wider than chunks
    with pytest.raises(ValueError, match="does not fit"):
        topk(x, 3, config=TopkLaunchConfig(1, 32, 4, False, 4, GROUP=4, CAP=4))  # fewer candidates than 2 * BLOCK_K


def _bad_calls():
    x = make_rows(3, 10, torch.float32)
    return [
        (TypeError, "x must be a torch.Tensor, got list", lambda: topk(x.tolist(), 2)),
        (TypeError, "x must be float32, float16 or bfloat16, got torch.int32", lambda: topk(x.to(torch.int32), 2)),
        (TypeError, "k must be an int, got float", lambda: topk(x, 2.0)),
        (TypeError, "k must be an int, got bool", lambda: topk(x, True)),
        (TypeError, "k must be an int, got Tensor", lambda: topk(x, torch.tensor([2]))),
        (ValueError, r"k must be in \[0, 10\] \(x.shape\[dim\] for dim=1 and x of shape \(3, 10\)\), got 11",
         lambda: topk(x, 11)),
        (ValueError, r"k must be in \[0, 10\] .*got -1", lambda: topk(x, -1)),
        (ValueError, r"k must be in \[0, 3\] \(x.shape\[dim\] for dim=0 ", lambda: topk(x, 4, 0)),
        (ValueError, r"k must be in \[0, 1\]", lambda: topk(torch.tensor(1.0, device=DEVICE), 2)),
        (TypeError, "dim must be an int, got float", lambda: topk(x, 2, 1.0)),
        (ValueError, r"dim must be in \[-2, 1\] for x of shape \(3, 10\), got 2", lambda: topk(x, 2, 2)),
        (ValueError, r"dim must be in \[-2, 1\] .*got -3", lambda: topk(x, 2, -3)),
        (TypeError, "largest must be a bool, got 2", lambda: topk(x, 2, largest=2)),
        (TypeError, "sorted must be a bool, got 'yes'", lambda: topk(x, 2, sorted="yes")),
    ]


@pytest.mark.parametrize("case", range(14))
def test_bad_input(case):
    err, match, call = _bad_calls()[case]
    with pytest.raises(err, match=match):
        call()


def test_meta_tensors_refused():
    """x on a device Triton cannot launch on: a ValueError naming topk and x (any dim, 0-dim too)."""
    x = make_rows(3, 10, torch.float32)
    assert_each_tensor_refused_on_meta(topk, x, 2)
    assert_each_tensor_refused_on_meta(topk, x, 2, 0)
    assert_each_tensor_refused_on_meta(topk, x[0, 0], 1)


def test_pinned_config_named():
    """A pinned config that cannot hold k is refused under topk's name and its argument's."""
    with pytest.raises(ValueError, match=r"^topk: config .* does not fit a row of 10 with k = 5"):
        topk(make_rows(3, 10, torch.float32), 5, config=TopkLaunchConfig(1, 16, 2, False, 4))


@pytest.mark.skipif(ON_GPU, reason="the Triton interpreter only")
def test_cpu_tensor_without_interpreter(monkeypatch):
    from aiter_lite.utils import checks

    monkeypatch.setattr(checks, "LAUNCH_DEVICES", {"cuda"})  # as without the interpreter
    with pytest.raises(ValueError, match="x is on the CPU; the Triton backend needs a GPU tensor"):
        topk(torch.randn(2, 8), 2)


# torch.compile(fullgraph=True): the launch is a registered custom op.
COMPILE_BACKEND = "inductor" if ON_GPU else "aot_eager"


def test_opcheck_topk_launch():
    from torch.library import opcheck

    x = make_rows(5, 40, torch.float32, lead=(3,))  # (3, 5, 40), selected along dim 1
    values = torch.empty(3, 4, 40, device=DEVICE)
    indices = torch.empty(3, 4, 40, dtype=torch.int64, device=DEVICE)
    opcheck(torch.ops.aiter_lite.launch_topk, (x, values, indices, 4, 1, True))


def test_compiled_topk():
    x = make_rows(6, 50, torch.bfloat16, lead=(2,))

    def block(x):
        top = topk(x * 2, 5)
        low = topk(x, 3, 1, largest=False)
        return top.values, top.indices, low.values + 1, low.indices

    torch._dynamo.reset()
    compiled = torch.compile(block, backend=COMPILE_BACKEND, fullgraph=True)
    for got, want in zip(compiled(x), block(x)):
        assert torch.equal(got, want)
