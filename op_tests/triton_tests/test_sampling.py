"""aiter_lite.ops.triton.sampling against its sort-based reference (aiter_lite.ops.native.sampling).

* Renormalized and masked rows equal the reference's kept sets exactly (fresh random
  rows, ties, -inf logits, every edge of k and p), values to fp32 rounding.
* Draws: the same generator state draws the reference's tokens; repeated draws of one
  row (``indices``) never leave the kept set and follow the renormalized distribution
  (a chi-square test); a bad row (NaN, negative, no mass) samples -1.
"""

from __future__ import annotations

import math

import pytest
import torch

from aiter_lite.ops.native import sampling as ref
from aiter_lite.ops.triton import sampling as smp
from op_tests.utils import DEVICE, ON_GPU, assert_close, by_device

# The interpreter's (8 "SMs"): 2100 cuts a row of 4-5 into 3 slices of 1024, the last partial and
# the slice count not a power of 2, each slice two search chunks (5000's 5 slices ran the same
# branches in twice the programs)
VOCABS = by_device([1, 7, 100, 2100], [1, 7, 1000, 128256, 151936])


def _probs(rows: int, n: int, scale: float = 3.0, dtype=torch.float32) -> torch.Tensor:
    return torch.softmax(torch.randn(rows, n, device=DEVICE) * scale, -1).to(dtype)


def _gen(seed: int) -> torch.Generator:
    return torch.Generator(device=DEVICE).manual_seed(seed)


@pytest.mark.parametrize("n", VOCABS)
@pytest.mark.parametrize("top_k", [0, 1, 5, "rows", 10**6])
def test_top_k_renorm_probs(n, top_k):
    p = _probs(4, n)
    k = torch.tensor([1, 3, n, 50], device=DEVICE) if top_k == "rows" else top_k
    got = smp.top_k_renorm_probs(p, k)
    want = ref.top_k_renorm_probs(p, k)
    assert torch.equal(got > 0, want > 0), "kept sets differ"
    assert_close(got, want, atol=1e-7, rtol=1e-5, name="renormalized")


@pytest.mark.parametrize("n", VOCABS)
@pytest.mark.parametrize("top_p", [1e-6, 0.5, 0.9, "rows", 1.0])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_top_p_renorm_probs(n, top_p, dtype):
    p = _probs(4, n, dtype=dtype)
    tp = torch.tensor([0.1, 0.5, 0.95, 1.0], device=DEVICE) if top_p == "rows" else top_p
    got = smp.top_p_renorm_probs(p, tp)
    want = ref.top_p_renorm_probs(p, tp)
    assert got.dtype == torch.float32
    _assert_top_p_sets(got > 0, want > 0, p, tp)
    rows = (got > 0).eq(want > 0).all(-1)  # rows whose boundary group flipped renormalize differently
    assert_close(got[rows], want[rows], atol=1e-7, rtol=1e-5, name="renormalized")


def _assert_top_p_sets(got: torch.Tensor, want: torch.Tensor, probs: torch.Tensor, top_p) -> None:
    """Kept sets equal, except one boundary group of a row whose mass above it is p within rounding
    (the kernel and the reference sum a row in different orders)."""
    differ = ref.kept_sets_differ(got, want, probs, top_p)
    assert differ is None, differ


def test_ties_are_kept_or_dropped_whole():
    p = torch.tensor([[0.1, 0.2, 0.2, 0.2, 0.3], [0.25, 0.25, 0.25, 0.25, 0.0]], device=DEVICE)
    # top-2 of [.1 .2 .2 .2 .3]: .3 and every .2 (tied with the 2nd largest)
    assert torch.equal(smp.top_k_renorm_probs(p, 2) > 0, torch.tensor([[0, 1, 1, 1, 1], [1, 1, 1, 1, 0]],
                                                                       device=DEVICE, dtype=torch.bool))
    # top-p 0.4: .3 alone is short of it; the .2 group joins whole
    assert torch.equal(smp.top_p_renorm_probs(p, 0.4)[0] > 0, torch.tensor([0, 1, 1, 1, 1], device=DEVICE).bool())


@pytest.mark.parametrize("n", VOCABS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_top_k_mask_logits(n, dtype):
    x = (torch.randn(5, n, device=DEVICE) * 4).to(dtype)
    x[1] = torch.randint(-3, 3, (n,), device=DEVICE).to(dtype)  # many ties
    x[2, ::3] = float("-inf")
    k = torch.tensor([1, 2, 3, n, 0], device=DEVICE)
    got = smp.top_k_mask_logits(x, k)
    assert got.dtype == dtype
    assert torch.equal(got, ref.top_k_mask_logits(x, k))


def test_bad_rows_are_visible():
    p = _probs(4, 64)
    p[0, 3] = float("nan")
    p[1, 5] = -0.5
    p[2] = 0.0
    s = smp.sampling_from_probs(p, generator=_gen(1))
    assert s[:3].tolist() == [-1, -1, -1] and 0 <= int(s[3]) < 64
    r = smp.top_k_renorm_probs(p, 4)
    assert r[0].isnan().all() and r[1].isnan().all() and r[3].isfinite().all()
    logits = torch.randn(2, 64, device=DEVICE)
    logits[0, 7] = float("nan")
    logits[1] = float("-inf")
    assert smp.sampling_from_logits(logits, generator=_gen(2)).tolist() == [-1, -1]
    assert smp.top_k_mask_logits(logits, 3)[0].isnan().all()


FILTERS = [
    ("sampling_from_probs", {}, False),
    ("top_k_sampling_from_probs", {"top_k": 7}, False),
    ("top_p_sampling_from_probs", {"top_p": 0.6}, False),
    ("min_p_sampling_from_probs", {"min_p": 0.05}, False),
    ("top_k_top_p_sampling_from_probs", {"top_k": 9, "top_p": 0.7}, False),
    ("top_k_top_p_sampling_from_logits", {"top_k": 9, "top_p": 0.7}, True),
    ("sampling_from_logits", {}, True),
]


@pytest.mark.parametrize("name, filters, logits", FILTERS, ids=[f[0] for f in FILTERS])
def test_draws_match_the_reference(name, filters, logits):
    rows, n = by_device((6, 300), (64, 32000))
    x = torch.randn(rows, n, device=DEVICE) * 3 if logits else _probs(rows, n)
    got = getattr(smp, name)(x, *filters.values(), generator=_gen(7))
    u = torch.rand(rows, device=DEVICE, generator=_gen(7))
    want = ref.sample(x, u, from_logits=logits, **filters)
    assert got.dtype == torch.int32 and torch.equal(got, want)
    again = getattr(smp, name)(x, *filters.values(), generator=_gen(7))
    assert torch.equal(got, again), "the same generator state drew different tokens"


@pytest.mark.parametrize("name, filters, logits", FILTERS[:5], ids=[f[0] for f in FILTERS[:5]])
def test_draws_stay_in_the_kept_set_and_follow_it(name, filters, logits):
    n = 40
    # The interpreter runs a program a draw in every launch, so it takes few draws: 600 unfiltered,
    # 120 min-p, and 60 where a top-k / top-p search runs (8 launches a threshold; 120 draws took
    # 50-70 s a case). Their power is kept by checking each draw against the reference's
    # inverse-CDF token for the same uniform number: a kernel that draws any one token
    # differently fails, at any count. The chi-square bound below is the statistic's 0.9999
    # quantile whatever the count (the false-positive rate stays under 1e-4); at 60 draws it
    # fails numbers that are not uniform (u^2) for 50-70% of rows (95-99% at 120): the check
    # a draw carries the kernel's defects, the chi-square the distribution's gross ones.
    searched = "top_k" in filters or "top_p" in filters
    draws = by_device(60 if searched else 120 if filters else 600, 200000)
    p = _probs(1, n, scale=1.5)
    idx = torch.zeros(draws, dtype=torch.int64, device=DEVICE)  # every draw from row 0
    s = getattr(smp, name)(p, *filters.values(), indices=idx, generator=_gen(11)).long()
    want = ref.renorm(p, **filters)[0]
    assert (s >= 0).all() and (want[s] > 0).all(), "a token outside the kept set was drawn"
    if not ON_GPU:  # the generator's numbers for these draws, each to the reference's token
        u = torch.rand(draws, device=DEVICE, generator=_gen(11))
        assert torch.equal(s, ref.sample(p.expand(draws, n), u, **filters).long()), "a draw differs from the reference's"
    counts = torch.bincount(s, minlength=n).double()
    expected = want.double() * draws
    big = expected >= 5  # tokens expected fewer than 5 times pooled into one bin (the test's approximation)
    counts = torch.cat([counts[big], counts[~big].sum().reshape(1)])
    expected = torch.cat([expected[big], expected[~big].sum().reshape(1)])
    live = expected > 0
    chi2 = float((((counts - expected) ** 2)[live] / expected[live]).sum())
    dof = int(live.sum()) - 1
    # the chi-square statistic's 0.9999 quantile is below dof + 4.5 sqrt(2 dof) + 12 for these dof
    assert chi2 < dof + 4.5 * math.sqrt(2 * max(dof, 1)) + 12, f"chi2 {chi2:.1f} with {dof} degrees of freedom"


@pytest.mark.parametrize("name", ["sampling_from_logits", "top_k_top_p_sampling_from_logits"])
@pytest.mark.parametrize("temperature", [0.7, "rows"])
def test_temperature(name, temperature):
    rows, n = 5, by_device(300, 32000)
    x = torch.randn(rows, n, device=DEVICE) * 3
    t = torch.tensor([0.5, 1.0, 2.0, 0.0, 1e-6], device=DEVICE) if temperature == "rows" else temperature
    filters = {"top_k": 20, "top_p": 0.8} if name.startswith("top_k") else {}
    got = getattr(smp, name)(x, *filters.values(), generator=_gen(5), temperature=t)
    u = torch.rand(rows, device=DEVICE, generator=_gen(5))
    assert torch.equal(got, ref.sample(x, u, from_logits=True, temperature=t, **filters))
    if temperature == "rows":  # below 1e-5: the greedy token
        assert got[3:].tolist() == x[3:].argmax(-1).tolist()


def test_seed_and_edge_parameters():
    p = _probs(3, 50)
    a = smp.top_k_sampling_from_probs(p, 50, seed=3, offset=5)
    b = smp.top_k_sampling_from_probs(p, 10**6, seed=3, offset=5)
    assert torch.equal(a, b), "k >= vocab filters nothing"
    c = smp.top_p_sampling_from_probs(p, 1.0, seed=3, offset=5)
    assert torch.equal(a, c), "p = 1 filters nothing"
    one = smp.top_k_sampling_from_probs(p, 1, seed=4)
    assert torch.equal(one.long(), p.argmax(-1)), "k = 1 draws the largest"


def test_bad_arguments():
    p = _probs(2, 10)
    with pytest.raises(ValueError, match="top_k_renorm_probs: probs must be 2-D"):
        smp.top_k_renorm_probs(p[0], 2)
    with pytest.raises(TypeError, match="top_p_renorm_probs: probs must be float32"):
        smp.top_p_renorm_probs(p.double(), 0.5)
    with pytest.raises(ValueError, match="top_k_sampling_from_probs: top_k must be a number or a tensor"):
        smp.top_k_sampling_from_probs(p, torch.tensor([1, 2, 3], device=DEVICE))
    with pytest.raises(TypeError, match="top_k must be an integer tensor"):
        smp.top_k_sampling_from_probs(p, torch.tensor([1.0, 2.0], device=DEVICE))
    with pytest.raises(ValueError, match="filter_apply_order"):
        smp.top_k_top_p_sampling_from_probs(p, 2, 0.5, filter_apply_order="p_first")
    with pytest.raises(ValueError, match="sampling_from_probs: probs hold NaN"):
        q = p.clone()
        q[0, 0] = float("nan")
        smp.sampling_from_probs(q, check_nan=True)
    with pytest.raises(ValueError, match="sampling_from_logits: temperature must be >= 0"):
        smp.sampling_from_logits(torch.randn(2, 5, device=DEVICE), temperature=-1.0)
    with pytest.raises(ValueError, match="requires grad"):
        smp.sampling_from_logits(torch.randn(2, 5, device=DEVICE, requires_grad=True))


def test_empty():
    assert smp.sampling_from_probs(torch.empty(0, 5, device=DEVICE)).shape == (0,)
    assert smp.top_k_renorm_probs(torch.empty(0, 5, device=DEVICE), 2).shape == (0, 5)


@pytest.mark.skipif(not ON_GPU, reason="plans hold compiled GPU kernels; the interpreter has none")
@pytest.mark.parametrize("case", ["top_k_top_p logits", "top_p probs", "renorm", "mask", "min_p indices"])
def test_plans_replay_the_checked_path(case, monkeypatch):
    # A serving loop's repeated call replays its 10-19 launches from a plan, over fresh work
    # buffers: each replayed call equals the checked path's on fresh values, draw for draw.
    from aiter_lite.ops.triton import sampling as smp_mod
    from aiter_lite.utils import fast_launch as fl

    if not fl.fast_launch_enabled():
        pytest.skip("launch plans are off here")
    fl.reset()
    checked = []

    def counted(*args, **meta):
        checked.append(args[0])
        fl.launch(*args, **meta)

    monkeypatch.setattr(smp_mod, "launch", counted)
    rows, n = 6, 151936
    for call in range(fl.RECORD_AT + 2):  # seen, recorded, then two calls from the plan
        logits = torch.randn(rows, n, device=DEVICE) * (2 + call)
        probs = torch.softmax(logits, -1)
        k = torch.randint(1, 200, (rows,), device=DEVICE, dtype=torch.int32)
        run = {
            "top_k_top_p logits": lambda g: smp.top_k_top_p_sampling_from_logits(
                logits.bfloat16(), k, 0.8, temperature=0.7, generator=g),
            "top_p probs": lambda g: smp.top_p_sampling_from_probs(probs, 0.9, generator=g),
            "renorm": lambda g: smp.top_p_renorm_probs(probs, 0.7),
            "mask": lambda g: smp.top_k_mask_logits(logits, k),
            "min_p indices": lambda g: smp.min_p_sampling_from_probs(
                probs, 0.05, indices=torch.tensor([5, 0, 0, 3], device=DEVICE), generator=g),
        }[case]
        before = len(checked)
        got = run(_gen(call))
        replayed = len(checked) == before
        assert replayed == (call >= fl.RECORD_AT), f"call {call + 1}: replayed {replayed}"
        with fl.plans_off():
            want = run(_gen(call))
        assert torch.equal(got, want), f"call {call + 1}: the plan's result differs from the checked path's"


def test_per_row_parameters_strided_nan_and_at_most_zero():
    # Found by the fuzz: a strided per-row top_k / top_p was read as if contiguous; a NaN
    # top_p kept everything where the reference kept the largest group alone.
    p = _probs(4, 300)
    k = torch.tensor([[3, 0], [40, 0], [1, 0], [7, 0]], device=DEVICE, dtype=torch.int32)[:, 0]  # stride 2
    assert torch.equal(smp.top_k_renorm_probs(p, k) > 0, ref.top_k_renorm_probs(p, k.contiguous()) > 0)
    tp = torch.tensor([[0.3, 9.0], [float("nan"), 9.0], [-1.0, 9.0], [0.0, 9.0]], device=DEVICE)[:, 0]
    got = smp.top_p_renorm_probs(p, tp)
    want = ref.top_p_renorm_probs(p, tp.contiguous())
    assert torch.equal(got.isnan(), want.isnan()) and got[1].isnan().all()  # a NaN top_p: its row NaN
    assert torch.equal(got[[0, 2, 3]] > 0, want[[0, 2, 3]] > 0)
    top = p.max(-1, keepdim=True).values
    assert torch.equal(got[2:] > 0, p[2:] == top[2:])  # top_p <= 0: the largest group alone
    draws = smp.top_p_sampling_from_probs(p, tp, generator=_gen(1))
    assert draws[1] == -1 and torch.equal(draws[2:].long(), p[2:].argmax(-1))


def test_aiters_calling_convention():
    # vLLM's ROCm sampler: torch.ops.aiter.top_k_top_p_sampling_from_probs(probs, None, k_tensor, k_scalar,
    # p_tensor, p_scalar, deterministic=True) and its siblings, here at aiter's module path
    from aiter_lite.ops import sampling as aiter_form

    p = _probs(4, 500)
    k = torch.tensor([3, 9, 1, 40], device=DEVICE, dtype=torch.int32)
    tp = torch.tensor([0.5, 0.9, 0.2, 1.0], device=DEVICE)
    # the draws against the reference's tokens for the default generator's numbers (the
    # flashinfer form draws them: test_draws_match_the_reference), not a second launch
    for arr, val in ((k, 0), (None, 7)):
        torch.manual_seed(5)
        got = aiter_form.top_k_top_p_sampling_from_probs(p, None, arr, val, tp, 0.0, deterministic=True)
        torch.manual_seed(5)
        assert torch.equal(got, ref.sample(p, torch.rand(4, device=DEVICE), top_k=val if arr is None else arr,
                                           top_p=tp))
        assert torch.equal(aiter_form.top_k_renorm_probs(p, arr, val),
                           smp.top_k_renorm_probs(p, val if arr is None else arr))
    torch.manual_seed(6)
    got = aiter_form.top_p_sampling_from_probs(p, None, None, 0.8)
    torch.manual_seed(6)
    assert torch.equal(got, ref.sample(p, torch.rand(4, device=DEVICE), top_p=0.8))


@pytest.mark.parametrize("k_rows", [False, True], ids=["k", "k_rows"])
@pytest.mark.parametrize("from_logits, top_p", [(True, 0.7), (False, 0.7), (False, None)],
                         ids=["top_k_top_p_logits", "top_k_top_p_probs", "top_k_probs"])
def test_top_k_survivor_lists_and_the_whole_row_path(from_logits, k_rows, top_p, monkeypatch):
    # Top-k's survivors are listed a row where they fit, and top-p and the draw run over the
    # list; a row whose survivors do not fit (ties), or whose top-k keeps everything, takes
    # the whole-row path in the same call. Both equal the reference draw for draw, and the
    # call with lists turned off.
    from aiter_lite.utils import fast_launch as fl

    rows, n = 8, by_device(300, 32000)
    x = torch.randn(rows, n, device=DEVICE) * 3
    x[1] = 0.5  # every value tied: more survivors than a list holds
    x[2] = float("-inf")
    x[2, [5, 70, 200]] = torch.tensor([1.0, 2.0, 0.5], device=DEVICE)  # fewer values with mass than k
    x[3, 17] = float("nan")
    x[5] = torch.randint(-3, 3, (n,), device=DEVICE).float()  # ties at the k-th value
    x[6] = x[6].bfloat16().float()
    # sixteen distinct values close together in eight of the bound's groups (columns 256 apart
    # share one), ties below: every value reaches the bound, so the row overflows its list
    # though its top-k are 9 of the sixteen
    x[7] = 0.25
    x[7, [c + h for c in range(8) for h in (0, 256)]] = 3.0 + 0.01 * torch.randperm(16, device=DEVICE).float()
    if not from_logits:
        x = torch.softmax(x, -1)
        x[3, 17] = float("nan")
    # int64: read as given
    k = torch.tensor([9, 9, 9, 9, n, 9, 0, 9], device=DEVICE, dtype=torch.int64) if k_rows else 9
    call = smp.top_k_top_p_sampling_from_logits if from_logits else smp.top_k_top_p_sampling_from_probs
    filters = {"top_k": k} if top_p is None else {"top_k": k, "top_p": top_p}
    if top_p is None:
        call = smp.top_k_sampling_from_probs
    with fl.plans_off():
        got = call(x, *filters.values(), generator=_gen(3))
        monkeypatch.setattr(smp, "_LIST_K", -1)
        monkeypatch.setattr(smp, "_LIST_ROWS", 0)
        whole = call(x, *filters.values(), generator=_gen(3))
    u = torch.rand(rows, device=DEVICE, generator=_gen(3))
    want = ref.sample(x, u, from_logits=from_logits, **filters)
    assert torch.equal(got, want) and torch.equal(whole, want)
    assert got[3] == -1 and got[2] in (5, 70, 200)
    # the overflowing row's threshold, draw by draw: 48 requests of it
    idx = torch.full((48,), 7, device=DEVICE, dtype=torch.int32)
    k7 = k[idx] if k_rows else k
    with fl.plans_off():
        got = call(x, k7, *list(filters.values())[1:],
                   indices=idx, generator=_gen(4))
    u = torch.rand(48, device=DEVICE, generator=_gen(4))
    want = ref.sample(x[idx.long()], u, from_logits=from_logits, **dict(filters, top_k=k7))
    assert torch.equal(got, want)
    assert len(set(got.tolist())) > 4  # (draws over the row's top-k, not one token)


def _per_row(value, rows: int, integer: bool):
    return None if value is None else torch.full((rows,), value, device=DEVICE,
                                                 dtype=torch.int32 if integer else torch.float32)


# (top-k + top-p once, from logits: through the interpreter each call sorts every row's list)
UNIFORM_FILTERS = [f for f in FILTERS if f[0] != "top_k_top_p_sampling_from_probs"]


@pytest.mark.parametrize("name, filters, logits", UNIFORM_FILTERS, ids=[f[0] for f in UNIFORM_FILTERS])
def test_from_uniform_is_the_drawing_forms_draw(name, filters, logits):
    # the registered op over the caller's numbers: the drawing form's tokens for the same
    # numbers, and the reference's
    rows, n = by_device((6, 300), (64, 32000))
    x = torch.randn(rows, n, device=DEVICE) * 3 if logits else _probs(rows, n)
    u = torch.rand(rows, device=DEVICE, generator=_gen(7))
    got = smp.sampling_from_uniform(x, u, _per_row(filters.get("top_k"), rows, True),
                                    _per_row(filters.get("top_p"), rows, False),
                                    _per_row(filters.get("min_p"), rows, False), None, None, logits)
    # (the drawing form draws the reference's tokens for the same numbers: test_draws_match_the_reference)
    assert got.dtype == torch.int32 and torch.equal(got, ref.sample(x, u, from_logits=logits, **filters))


def test_from_uniform_rows_indices_temperature_and_edge_numbers():
    rows, n, draws = 4, by_device(300, 32000), 9
    x = torch.randn(rows, n, device=DEVICE) * 3
    idx = torch.tensor([3, 0, 0, 2, 1, 3, 2, 2, 0], device=DEVICE)
    u = torch.rand(draws, device=DEVICE)
    u[:5] = torch.tensor([0.0, 1.0, 1.5, -0.5, float("nan")], device=DEVICE)  # past [0, 1): the ends
    k = torch.randint(1, 40, (draws,), device=DEVICE)
    k[0] = 0  # keeps everything
    p = torch.rand(draws, device=DEVICE) * 0.9 + 0.05
    t = torch.tensor([0.5, 1.0, 2.0, 0.0, 1e-6, 0.7, 1.3, 1.0, 0.9], device=DEVICE)
    for top_p, joint in ((None, False), (p, True)):
        got = smp.sampling_from_uniform(x, u.bfloat16(), k, top_p, None, t, idx, True, joint)
        want = ref.sampling_from_uniform(x, u.bfloat16(), k, top_p, None, t, idx, True, joint)
        assert torch.equal(got, want), joint
    assert got[3].item() == x[2].argmax().item() and got[4].item() == x[1].argmax().item()  # greedy


def test_from_uniform_bad_arguments(monkeypatch):
    monkeypatch.setenv("AITER_SAMPLING_CHECK_INDICES", "1")  # GPU indices checked on the host too
    p = _probs(2, 10)
    u = torch.rand(2, device=DEVICE)
    op = smp.sampling_from_uniform
    with pytest.raises(TypeError, match="sampling_from_uniform: uniform must be a torch.Tensor"):
        op(p, None)
    with pytest.raises(ValueError, match="sampling_from_uniform: uniform must be 1-D with one value an output row"):
        op(p, torch.rand(3, device=DEVICE))
    with pytest.raises(TypeError, match="sampling_from_uniform: uniform must be a floating-point tensor"):
        op(p, torch.zeros(2, dtype=torch.int32, device=DEVICE))
    with pytest.raises(TypeError, match="sampling_from_uniform: top_k must be a tensor of one value a row"):
        op(p, u, 5)
    with pytest.raises(ValueError, match="sampling_from_uniform: temperature applies to logits"):
        op(p, u, temperature=torch.ones(2, device=DEVICE))
    with pytest.raises(ValueError, match=r"sampling_from_uniform: indices must be rows of the batch, in \[0, 2\)"):
        op(p, torch.rand(3, device=DEVICE), indices=torch.tensor([0, 2, 1], device=DEVICE))
    with pytest.raises(ValueError, match="top_p_sampling_from_probs: indices must be rows of the batch"):
        smp.top_p_sampling_from_probs(p, 0.5, indices=torch.tensor([-1, 0], device=DEVICE))


def test_compiled_callers_get_the_launches_results():
    # Traced by torch.compile, the chain of searches came back with other thresholds (Inductor,
    # GPU). The registered forms compile whole as their registered op; a drawing form with
    # torch's default generator compiles whole as torch.rand and sampling_from_uniform, one
    # with a generator is a graph break that runs the launches as they are.
    backend = "inductor" if ON_GPU else "aot_eager"
    n = by_device(100, 300)  # the interpreter: a row one chunk of 128 (300: 512, 4x the work a launch)
    p = _probs(3, n)
    logits = torch.randn(3, n, device=DEVICE) * 3
    for name, fn, x in (("top_k_renorm_probs", lambda a: smp.top_k_renorm_probs(a, 5), p),
                        ("top_p_renorm_probs", lambda a: smp.top_p_renorm_probs(a, torch.tensor(
                            [0.5, 0.9, 0.3], device=DEVICE)), p),
                        ("top_k_mask_logits", lambda a: smp.top_k_mask_logits(a, 7), logits)):
        torch._dynamo.reset()
        got = torch.compile(fn, backend=backend, fullgraph=True)(x)
        assert torch.equal(got, fn(x)), f"{name} compiled"
    torch._dynamo.reset()
    greedy = torch.compile(lambda a: smp.top_k_top_p_sampling_from_logits(a, 5, 0.9, temperature=1e-6),
                           backend=backend)
    assert torch.equal(greedy(logits).long(), logits.argmax(-1))
    torch._dynamo.reset()
    # (top_p 1 filters nothing: top-k alone, as the eager call launches it)
    draw = torch.compile(lambda a: smp.top_k_top_p_sampling_from_logits(a, 5, 1.0), backend=backend, fullgraph=True)
    torch.manual_seed(11)
    got = draw(logits)
    assert got.dtype == torch.int32 and got.shape == (3,)
    assert (ref.renorm(logits, from_logits=True, top_k=5).gather(1, got.long()[:, None]) > 0).all()
    if not ON_GPU:  # aot_eager draws torch's eager numbers: the reference's tokens for them
        torch.manual_seed(11)
        assert torch.equal(got, ref.sample(logits, torch.rand(3, device=DEVICE), from_logits=True, top_k=5))
