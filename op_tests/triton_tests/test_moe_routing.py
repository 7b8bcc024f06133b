"""aiter_lite.ops.triton.moe_routing against the fp32 native reference and against
vLLM's routing formulas written out here (torch.topk, -inf masks of dropped groups).

The native reference fixes the tie rule (lower index first), so its ids must match
exactly; torch.topk leaves ties open, so against the formulas the test compares the
keys of the chosen experts (selection) and recomputes the weights from the chosen ids.
"""

from typing import NamedTuple

import pytest
import torch
from torch.library import opcheck

from aiter_lite.ops.native import moe_routing as ref
from aiter_lite.ops.triton import moe_routing as tri
from aiter_lite.spec.device import PROFILES
from op_tests.triton_tests.test_activation import assert_each_tensor_refused_on_meta
from op_tests.utils import DEVICE, ON_GPU, assert_close, by_device, make_rows, poisoned

EXPERTS = (8, 16, 60, 64, 128, 144, 160, 256, 384, 512)
TOKENS = by_device(cpu=(0, 1, 5, 64, 1000), gpu=(0, 1, 5, 64, 1000, 65536))
# (experts, groups, groups kept, topk): DeepSeek-V3 / R1, DeepSeek-V2, small and odd
# geometries, groups of one expert, every group kept, one group, topk = the kept experts.
GROUPED = [
    (256, 8, 4, 8), (160, 8, 3, 6), (64, 8, 4, 6), (144, 12, 2, 8), (60, 4, 2, 4), (384, 8, 4, 8),
    (512, 16, 4, 8), (16, 16, 3, 3), (128, 4, 4, 8), (128, 1, 1, 8), (8, 2, 1, 4),
]
_ids = str


class Formula(NamedTuple):
    weights: torch.Tensor
    ids: torch.Tensor
    masked: torch.Tensor  # selection keys, the dropped groups' at -inf
    keys: torch.Tensor  # selection keys (scores + bias)
    scores: torch.Tensor  # unbiased scores
    group_tie: torch.Tensor  # rows whose last kept group (nearly) ties with the first dropped one


# Keys (scores in [0, 1] plus a bias) closer than this may rank either way between the
# kernel's exp / sigmoid and torch's.
_NEAR = 2e-6


def _formula(x, topk, renormalize, num_expert_group, topk_group, scoring_func="softmax", scale=1.0, bias=None):
    """vLLM's moe_grouped_topk (with and without e_score_correction_bias; with one group,
    its fused_topk) written out, with its intermediates."""
    x = x.float()
    scores = torch.softmax(x, dim=-1) if scoring_func == "softmax" else x.sigmoid()
    n_tokens, n_experts = scores.shape
    per_group = n_experts // num_expert_group
    keys = scores if bias is None else scores + bias.float().unsqueeze(0)
    if bias is None:
        group_scores = keys.view(n_tokens, num_expert_group, per_group).max(dim=-1).values
    else:
        group_scores = keys.view(n_tokens, num_expert_group, per_group).topk(min(2, per_group), dim=-1)[0].sum(dim=-1)
    group_idx = torch.topk(group_scores, k=topk_group, dim=-1, sorted=False)[1]
    group_mask = torch.zeros_like(group_scores).scatter_(1, group_idx, 1)
    score_mask = group_mask.unsqueeze(-1).expand(n_tokens, num_expert_group, per_group).reshape(n_tokens, n_experts)
    masked = keys.masked_fill(~score_mask.bool(), float("-inf"))
    ids = torch.topk(masked, k=topk, dim=-1)[1]
    weights = scores.gather(1, ids)
    if renormalize:
        weights = weights / weights.sum(dim=-1, keepdim=True)
    ranked = group_scores.sort(dim=-1, descending=True).values
    group_tie = ranked[:, topk_group - 1] - ranked[:, min(topk_group, num_expert_group - 1)] <= _NEAR
    group_tie &= topk_group < num_expert_group
    return Formula(weights * scale, ids.to(torch.int32), masked, keys, scores, group_tie)


def _check(got, want, formula, *, renormalize, scale, name, exact=False):
    """Kernel output ``got`` against the native ``want`` and the formula's keys / scores.

    ``exact``: ids equal to the native ones in every row. Rows whose group cutoff ties
    are not compared with the formula's selection (torch.topk may keep another group
    than the lower index).
    """
    (w, ids), (w_ref, ids_ref) = got, want
    masked, keys, scores, group_tie = formula[2:]
    n_tokens, n_experts = scores.shape
    k = ids_ref.shape[1]
    assert w.dtype == torch.float32 and ids.dtype == torch.int32, (w.dtype, ids.dtype)
    assert tuple(w.shape) == tuple(ids.shape) == (n_tokens, k), (w.shape, ids.shape)
    assert w.device == ids.device == scores.device
    if n_tokens == 0:
        return
    assert int(ids.min()) >= 0 and int(ids.max()) < n_experts, f"{name}: ids out of range"
    s = ids.sort(dim=-1).values
    assert bool((s[:, 1:] != s[:, :-1]).all()), f"{name}: an expert chosen twice"
    same = (ids == ids_ref).all(dim=-1)
    if exact:
        assert bool(same.all()), f"{name}: ids differ from the reference in rows {(~same).nonzero().flatten()[:8]}"
    else:  # random fp32 inputs: a row may differ only by a near-tie the two exp / sigmoid round apart
        assert float(same.float().mean()) >= 0.99, f"{name}: ids differ in {int((~same).sum())} of {n_tokens} rows"
    top_keys = torch.topk(masked, k=k, dim=-1).values
    rows = ~group_tie
    for label, chosen in (("triton", ids), ("native", ids_ref)):
        chosen_keys = keys.gather(1, chosen.long())
        in_order = chosen_keys[:, 1:] <= chosen_keys[:, :-1] + _NEAR
        assert bool(in_order.all()), f"{name} {label}: not in selection order"
        # The chosen experts carry the formula's top-k keys.
        assert_close(chosen_keys[rows], top_keys[rows], atol=_NEAR, rtol=_NEAR, name=f"{name} {label} keys")
        w_expect = scores.gather(1, chosen.long())
        if renormalize:
            w_expect = w_expect / w_expect.sum(dim=-1, keepdim=True)
        assert_close((w if label == "triton" else w_ref), w_expect * scale, name=f"{name} {label} weights")
    assert_close(w[same], w_ref[same], name=f"{name} weights against native")


def _dtype(i):
    return (torch.float32, torch.bfloat16, torch.float16)[i % 3]


def _cases(cases, n_tokens, pick):
    """All the cases, or on the interpreter one of them (``pick``) for 1000 tokens or more."""
    return cases if ON_GPU or n_tokens < 1000 else [cases[pick % len(cases)]]


# ---------------------------------------------------------------------------
# moe_topk_softmax


@pytest.mark.parametrize("n_tokens", TOKENS, ids=_ids)
@pytest.mark.parametrize("n_experts", EXPERTS, ids=_ids)
def test_topk_softmax(n_experts, n_tokens):
    cases = [(1, False), (min(8, n_experts), True), (min(5, n_experts), False)]
    if n_experts <= 16:
        cases.append((n_experts, True))  # every expert chosen
    for i, (topk, renormalize) in _cases(list(enumerate(cases)), n_tokens, n_experts // 8):
        x = make_rows(n_tokens, n_experts, _dtype(i + n_experts), scale=2.0)
        got = tri.moe_topk_softmax(x, topk, renormalize)
        _check(got, ref.moe_topk_softmax(x, topk, renormalize), _formula(x, topk, renormalize, 1, 1),
               renormalize=renormalize, scale=1.0, name=f"moe_topk_softmax E={n_experts} k={topk} {x.dtype}",
               exact=x.dtype != torch.float32)


@pytest.mark.parametrize("topk", range(1, 9))
def test_every_topk(topk):
    # 60 experts (padded to 64), 5 groups of 12 with 3 kept for the grouped ops.
    x, bias = make_rows(5, 60, torch.bfloat16, scale=2.0), torch.randn(60, device=DEVICE) * 0.3
    for got, want, formula, scale in [
        (tri.moe_topk_softmax(x, topk, False),
         ref.moe_topk_softmax(x, topk, False), _formula(x, topk, False, 1, 1), 1.0),
        (tri.moe_grouped_topk(x, topk, 5, 3, True, "sigmoid", 2.0),
         ref.moe_grouped_topk(x, topk, 5, 3, True, "sigmoid", 2.0),
         _formula(x, topk, True, 5, 3, "sigmoid", 2.0), 2.0),
        (tri.moe_biased_grouped_topk(x, bias, topk, 5, 3, True, 2.5),
         ref.moe_biased_grouped_topk(x, bias, topk, 5, 3, True, 2.5),
         _formula(x, topk, True, 5, 3, "sigmoid", 2.5, bias), 2.5),
    ]:
        _check(got, want, formula, renormalize=scale != 1.0, scale=scale, name=f"k={topk}")


def test_topk_softmax_weights_are_the_softmax():
    x = make_rows(9, 64, torch.float32)
    w, ids = tri.moe_topk_softmax(x, 64, False)
    assert_close(w, torch.softmax(x, dim=-1).gather(1, ids.long()), name="softmax, every expert")
    assert bool((w[:, 1:] <= w[:, :-1]).all()), "weights not in descending order"
    w, _ = tri.moe_topk_softmax(x, 6, True)
    assert_close(w.sum(dim=-1), torch.ones(9, device=DEVICE), name="renormalized sums")


# ---------------------------------------------------------------------------
# moe_grouped_topk and moe_biased_grouped_topk


@pytest.mark.parametrize("n_tokens", TOKENS, ids=_ids)
@pytest.mark.parametrize("geometry", GROUPED, ids=_ids)
def test_grouped_topk(geometry, n_tokens):
    n_experts, groups, kept, topk = geometry
    cases = list(enumerate([("softmax", True, 1.0), ("sigmoid", False, 2.5)]))
    for i, (scoring, renormalize, scale) in _cases(cases, n_tokens, groups):
        x = make_rows(n_tokens, n_experts, _dtype(i + groups), scale=2.0)
        got = tri.moe_grouped_topk(x, topk, groups, kept, renormalize, scoring, scale)
        want = ref.moe_grouped_topk(x, topk, groups, kept, renormalize, scoring, scale)
        _check(got, want, _formula(x, topk, renormalize, groups, kept, scoring, scale), renormalize=renormalize,
               scale=scale, name=f"moe_grouped_topk {geometry} {scoring} {x.dtype}", exact=x.dtype != torch.float32)


@pytest.mark.parametrize("n_tokens", TOKENS, ids=_ids)
@pytest.mark.parametrize("geometry", GROUPED, ids=_ids)
def test_biased_grouped_topk(geometry, n_tokens):
    n_experts, groups, kept, topk = geometry
    cases = list(enumerate([(True, 2.5, torch.float32), (False, 1.0, torch.bfloat16)]))
    for i, (renormalize, scale, bias_dtype) in _cases(cases, n_tokens, groups + 1):
        x = make_rows(n_tokens, n_experts, _dtype(i + groups + 1), scale=2.0)
        bias = (torch.randn(n_experts, device=DEVICE) * 0.5).to(bias_dtype)
        got = tri.moe_biased_grouped_topk(x, bias, topk, groups, kept, renormalize, scale)
        want = ref.moe_biased_grouped_topk(x, bias, topk, groups, kept, renormalize, scale)
        _check(got, want, _formula(x, topk, renormalize, groups, kept, "sigmoid", scale, bias),
               renormalize=renormalize, scale=scale, name=f"moe_biased_grouped_topk {geometry} {x.dtype} {bias_dtype}")


def test_biased_selection_unbiased_weights():
    # A large bias on experts 3 and 200 wins their selection; their weights stay sigmoid(logit).
    x = make_rows(4, 256, torch.float32)
    bias = torch.zeros(256, device=DEVICE, dtype=torch.float64)
    bias[[3, 200]] = 10.0
    w, ids = tri.moe_biased_grouped_topk(x, bias, 8, 8, 4, False)
    assert bool((ids[:, :2].sort(dim=-1).values == torch.tensor([3, 200], device=DEVICE, dtype=torch.int32)).all())
    assert_close(w, torch.sigmoid(x).gather(1, ids.long()), name="unbiased weights")


def test_deepseek_v3_decode_and_prefill_mix():
    bias = torch.randn(256, device=DEVICE) * 0.1
    for n_tokens in by_device((1, 3, 257), (1, 3, 64, 257, 8192)):
        x = make_rows(n_tokens, 256, torch.bfloat16, scale=3.0)
        _check(tri.moe_biased_grouped_topk(x, bias, 8, 8, 4, True, 2.5),
               ref.moe_biased_grouped_topk(x, bias, 8, 8, 4, True, 2.5),
               _formula(x, 8, True, 8, 4, "sigmoid", 2.5, bias), renormalize=True, scale=2.5,
               name=f"deepseek-v3 T={n_tokens}", exact=True)


# ---------------------------------------------------------------------------
# ties, NaN, layouts, launch configs


@pytest.mark.parametrize("n_experts", (8, 60, 160, 256, 512), ids=_ids)
@pytest.mark.parametrize("op", ["moe_topk_softmax", "grouped_softmax", "grouped_sigmoid", "biased", "biased_bias_ties"])
def test_tie_heavy_logits(op, n_experts):
    # Logits from {0, 1, 2, 3}: many exactly equal scores and group scores, their keys
    # far apart otherwise. The lower expert / group index must win every tie.
    n_tokens = 50
    groups = 4 if n_experts % 4 == 0 and n_experts >= 16 else 2
    kept, topk = groups // 2, min(8, n_experts // 2)
    x = torch.randint(0, 4, (n_tokens, n_experts), device=DEVICE).float()
    bias = torch.zeros(n_experts, device=DEVICE)
    if op == "biased_bias_ties":  # equal logits; keys tie through a bias from {0, 0.25, 0.5}
        x = torch.zeros_like(x)
        bias = torch.randint(0, 3, (n_experts,), device=DEVICE).float() * 0.25
    if op == "moe_topk_softmax":
        got, want = tri.moe_topk_softmax(x, topk, True), ref.moe_topk_softmax(x, topk, True)
        groups = kept = 1
    elif op.startswith("grouped"):
        scoring = op.split("_")[1]
        got = tri.moe_grouped_topk(x, topk, groups, kept, True, scoring)
        want = ref.moe_grouped_topk(x, topk, groups, kept, True, scoring)
    else:
        got = tri.moe_biased_grouped_topk(x, bias, topk, groups, kept, True)
        want = ref.moe_biased_grouped_topk(x, bias, topk, groups, kept, True)
    scoring = "softmax" if op in ("moe_topk_softmax", "grouped_softmax") else "sigmoid"
    formula = _formula(x, topk, True, groups, kept, scoring, bias=bias if op.startswith("biased") else None)
    _check(got, want, formula, renormalize=True, scale=1.0, name=f"{op} E={n_experts}", exact=True)


@pytest.mark.parametrize("op", ["moe_topk_softmax", "moe_grouped_topk", "moe_biased_grouped_topk"])
def test_equal_logits_take_the_lowest_indices(op):
    # Every key equal: groups 0 .. topk_group - 1 are kept, experts 0 .. k - 1 chosen, in order.
    x = torch.full((3, 64), 0.5, device=DEVICE, dtype=torch.bfloat16)
    if op == "moe_topk_softmax":
        _, ids = tri.moe_topk_softmax(x, 8, False)
    elif op == "moe_grouped_topk":
        _, ids = tri.moe_grouped_topk(x, 8, 8, 2, False, "sigmoid")  # 2 groups of 8 kept: experts 0..15
    else:
        _, ids = tri.moe_biased_grouped_topk(x, torch.zeros(64, device=DEVICE), 12, 8, 2, False)
    k = ids.shape[1]
    assert bool((ids == torch.arange(k, device=DEVICE, dtype=torch.int32)).all()), ids


@pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")
def test_nan_logits():
    # moe_topk_softmax: a NaN makes its row's softmax NaN: experts 0..k-1, NaN weights.
    x = make_rows(6, 64, torch.float32)
    x[2, 17] = float("nan")
    x[4, 5] = float("inf")  # softmax of a row with +inf is NaN too (torch's softmax)
    w, ids = tri.moe_topk_softmax(x, 4, True)
    w_ref, ids_ref = ref.moe_topk_softmax(x, 4, True)
    assert torch.equal(ids, ids_ref)
    assert_close(w, w_ref, name="moe_topk_softmax with NaN / inf rows")
    for row in (2, 4):
        assert bool(w[row].isnan().all()) and ids[row].tolist() == [0, 1, 2, 3]
    clean = [0, 1, 3, 5]
    assert not bool(w[clean].isnan().any())
    # sigmoid: a NaN expert ranks first (its group too); renormalized, its row is NaN.
    x = make_rows(6, 256, torch.float32)
    x[1, 200] = float("nan")
    bias = torch.randn(256, device=DEVICE) * 0.1
    for renormalize in (True, False):
        w, ids = tri.moe_biased_grouped_topk(x, bias, 8, 8, 4, renormalize, 2.5)
        w_ref, ids_ref = ref.moe_biased_grouped_topk(x, bias, 8, 8, 4, renormalize, 2.5)
        assert torch.equal(ids, ids_ref) and int(ids[1, 0]) == 200
        assert_close(w, w_ref, name=f"biased with a NaN logit, renormalize={renormalize}")
        assert bool(w[1].isnan().all()) if renormalize else int(w[1].isnan().sum()) == 1
        assert not bool(w[[0, 2, 3, 4, 5]].isnan().any())
    w, ids = tri.moe_grouped_topk(x, 8, 8, 4, False, "sigmoid")
    w_ref, ids_ref = ref.moe_grouped_topk(x, 8, 8, 4, False, "sigmoid")
    assert torch.equal(ids, ids_ref) and int(ids[1, 0]) == 200
    assert_close(w, w_ref, name="grouped sigmoid with a NaN logit")


@pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")
def test_all_zero_sigmoid_scores_renormalize_to_nan():
    x = torch.full((2, 16), -200.0, device=DEVICE)  # sigmoid underflows to 0
    w, _ = tri.moe_grouped_topk(x, 2, 4, 2, True, "sigmoid")
    w_ref, _ = ref.moe_grouped_topk(x, 2, 4, 2, True, "sigmoid")
    assert bool(w.isnan().all()) and bool(w_ref.isnan().all())


@pytest.mark.parametrize("layout", ["strided_rows", "column_stride", "rows_of_a_3d_tensor"])
@pytest.mark.parametrize("dtype", (torch.float32, torch.float16, torch.bfloat16), ids=str)
def test_layouts(dtype, layout):
    n_tokens, n_experts = 37, 160
    if layout == "strided_rows":
        x = make_rows(n_tokens, n_experts, dtype, strided=True)
    elif layout == "column_stride":
        x = make_rows(n_experts, n_tokens, dtype).t()
    else:
        x = make_rows(n_tokens, 2 * n_experts, dtype).view(n_tokens, 2, n_experts)[:, 1]
    assert not x.is_contiguous()
    bias = torch.randn(2 * n_experts, device=DEVICE)[::2]  # a strided bias too
    for got, want, formula, scale in [
        (tri.moe_topk_softmax(x, 6, True), ref.moe_topk_softmax(x, 6, True), _formula(x, 6, True, 1, 1), 1.0),
        (tri.moe_grouped_topk(x, 6, 8, 3, True, "softmax", 1.5), ref.moe_grouped_topk(x, 6, 8, 3, True, "softmax", 1.5),
         _formula(x, 6, True, 8, 3, "softmax", 1.5), 1.5),
        (tri.moe_biased_grouped_topk(x, bias, 6, 8, 3, True, 2.5),
         ref.moe_biased_grouped_topk(x, bias, 6, 8, 3, True, 2.5),
         _formula(x, 6, True, 8, 3, "sigmoid", 2.5, bias), 2.5),
    ]:
        _check(got, want, formula, renormalize=True, scale=scale, name=f"{layout} {dtype}")


@pytest.mark.parametrize("block_t", (1, 4, 32))
def test_pinned_launch_configs(block_t, monkeypatch):
    # Several tokens per program with a partial last program, and one token per program.
    monkeypatch.setattr(tri, "moe_routing_launch_config",
                        lambda *a, **k: tri.MoeRoutingLaunchConfig(block_t, 2))
    x = make_rows(13, 256, torch.bfloat16)
    bias = torch.randn(256, device=DEVICE) * 0.2
    _check(tri.moe_biased_grouped_topk(x, bias, 8, 8, 4, True, 2.5),
           ref.moe_biased_grouped_topk(x, bias, 8, 8, 4, True, 2.5),
           _formula(x, 8, True, 8, 4, "sigmoid", 2.5, bias), renormalize=True, scale=2.5, name=f"BLOCK_T={block_t}")
    _check(tri.moe_topk_softmax(x[:, :60], 4, False), ref.moe_topk_softmax(x[:, :60], 4, False),
           _formula(x[:, :60], 4, False, 1, 1), renormalize=False, scale=1.0, name=f"BLOCK_T={block_t} E=60")


@pytest.mark.parametrize("geometry", [(256, 8, 4, 8, True), (60, 1, 1, 5, False), (144, 12, 2, 8, False)], ids=_ids)
def test_every_output_written(geometry):
    # The launch into NaN / -1 poisoned outputs: every element must be written.
    n_experts, groups, kept, topk, has_bias = geometry
    x = make_rows(70, n_experts, torch.float32)
    bias = torch.randn(n_experts, device=DEVICE) if has_bias else None
    w, ids = poisoned((70, topk), torch.float32), torch.full((70, topk), -1, dtype=torch.int32, device=DEVICE)
    tri._launch_moe_routing(x, bias, w, ids, None, groups, kept, has_bias, True, 2.0)
    w_ref, ids_ref = ref.moe_routing(x, topk, scoring_func="sigmoid" if has_bias else "softmax", renormalize=True,
                                     num_expert_group=groups, topk_group=kept, correction_bias=bias,
                                     routed_scaling_factor=2.0)
    assert torch.equal(ids, ids_ref)
    assert_close(w, w_ref, name="poisoned weights")


def test_launch_config():
    cfg = tri.moe_routing_launch_config(1000, 512)
    with pytest.raises(AttributeError):
        cfg.BLOCK_T = 2  # frozen
    assert cfg.BLOCK_T >= 1 and cfg.num_warps >= 1
    for profile in PROFILES.values():
        for n_tokens in (1, 8, 64):  # decode: one token per program
            assert tri.moe_routing_launch_config(n_tokens, 256, profile).BLOCK_T == 1
        big = tri.moe_routing_launch_config(65536, 256, profile)
        assert big.BLOCK_T > 1 and big.num_warps <= 8


def test_empty_batch_launches_nothing(monkeypatch):
    monkeypatch.setattr(tri, "_launch_moe_routing", lambda *a: pytest.fail("launched for 0 tokens"))
    w, ids = tri.moe_biased_grouped_topk(make_rows(0, 256, torch.bfloat16), torch.zeros(256, device=DEVICE),
                                         8, 8, 4, True)
    assert w.shape == ids.shape == (0, 8) and w.dtype == torch.float32 and ids.dtype == torch.int32


# ---------------------------------------------------------------------------
# torch.compile


def test_opcheck_and_compile():
    x = make_rows(5, 64, torch.float32)
    bias = torch.randn(64, device=DEVICE)
    w, ids = torch.empty(5, 4, device=DEVICE), torch.empty(5, 4, dtype=torch.int32, device=DEVICE)
    src = torch.empty(5, 4, dtype=torch.int32, device=DEVICE)
    opcheck(torch.ops.aiter_lite.launch_moe_routing, (x, bias, w, ids, None, 8, 2, True, True, 2.5))
    opcheck(torch.ops.aiter_lite.launch_moe_routing, (x, None, w, ids, src, 1, 1, False, False, 1.0))
    opcheck(torch.ops.aiter_lite.launch_moe_routing,
            (make_rows(5, 66, torch.float32), None, torch.empty(5, 6, device=DEVICE), ids, src, 1, 1, False, True, 1.0,
             2))
    torch._dynamo.reset()

    def route(x, bias):
        return tri.moe_biased_grouped_topk(x * 1.0, bias, 4, 8, 2, True, 2.5)

    compiled = torch.compile(route, backend="inductor" if ON_GPU else "aot_eager", fullgraph=True)
    w_c, ids_c = compiled(x, bias)
    w_e, ids_e = route(x, bias)
    assert torch.equal(ids_c, ids_e)
    assert_close(w_c, w_e, name="compiled weights")


# ---------------------------------------------------------------------------
# bad input: TypeError / ValueError naming the argument, what was expected and given


def _bad_calls():
    x = make_rows(4, 64, torch.float32)
    bias = torch.zeros(64, device=DEVICE)
    return [
        (TypeError, "gating_output must be a torch.Tensor", lambda: tri.moe_topk_softmax(x.tolist(), 2, True)),
        (TypeError, "gating_output must be float32", lambda: tri.moe_topk_softmax(x.long(), 2, True)),
        (ValueError, r"gating_output must be 2-D \(tokens, experts\), got shape \(64,\)",
         lambda: tri.moe_topk_softmax(x[0], 2, True)),
        (ValueError, r"gating_output must be 2-D .* got shape \(2, 2, 64\)",
         lambda: tri.moe_topk_softmax(x.view(2, 2, 64), 2, True)),
        (ValueError, r"1 to 4096 experts .* got shape \(4, 0\)", lambda: tri.moe_topk_softmax(x[:, :0], 1, True)),
        (ValueError, r"1 to 4096 experts .* got shape \(1, 8192\)",
         lambda: tri.moe_topk_softmax(make_rows(1, 8192), 1, True)),
        (ValueError, r"topk must be in \[1, 64\] .* got 0", lambda: tri.moe_topk_softmax(x, 0, True)),
        (ValueError, r"topk must be in \[1, 64\] .* got 65", lambda: tri.moe_topk_softmax(x, 65, True)),
        (TypeError, "topk must be an int, got float", lambda: tri.moe_topk_softmax(x, 2.0, True)),
        (TypeError, "topk must be an int, got bool", lambda: tri.moe_topk_softmax(x, True, True)),
        (TypeError, "renormalize must be a bool, got 2", lambda: tri.moe_topk_softmax(x, 2, 2)),
        (ValueError, r"num_expert_group \(3\) must divide the expert count 64",
         lambda: tri.moe_grouped_topk(x, 2, 3, 1, True)),
        (ValueError, r"num_expert_group must be in \[1, 64\] .* got 0", lambda: tri.moe_grouped_topk(x, 2, 0, 1, True)),
        (ValueError, r"topk_group must be in \[1, 8\] .* got 9", lambda: tri.moe_grouped_topk(x, 2, 8, 9, True)),
        (ValueError, r"topk_group must be in \[1, 8\] .* got 0", lambda: tri.moe_grouped_topk(x, 2, 8, 0, True)),
        (ValueError, r"topk must be in \[1, 16\] \(at most the 16 experts of the 2 kept groups\), got 17",
         lambda: tri.moe_grouped_topk(x, 17, 8, 2, True)),
        (ValueError, "scoring_func must be one of 'softmax', 'sigmoid', got 'relu'",
         lambda: tri.moe_grouped_topk(x, 2, 8, 2, True, "relu")),
        (TypeError, "routed_scaling_factor must be a real number, got str",
         lambda: tri.moe_grouped_topk(x, 2, 8, 2, True, "softmax", "2.5")),
        (ValueError, "routed_scaling_factor must be finite, got inf",
         lambda: tri.moe_biased_grouped_topk(x, bias, 2, 8, 2, True, float("inf"))),
        (TypeError, "correction_bias must be a torch.Tensor, got list",
         lambda: tri.moe_biased_grouped_topk(x, bias.tolist(), 2, 8, 2, True)),
        (TypeError, "correction_bias must be float32, float16, bfloat16 or float64, got torch.int64",
         lambda: tri.moe_biased_grouped_topk(x, bias.long(), 2, 8, 2, True)),
        (ValueError, r"correction_bias must have shape \(64,\) .* got \(63,\)",
         lambda: tri.moe_biased_grouped_topk(x, bias[:63], 2, 8, 2, True)),
        (ValueError, r"correction_bias must have shape \(64,\) .* got \(1, 64\)",
         lambda: tri.moe_biased_grouped_topk(x, bias[None], 2, 8, 2, True)),
        (ValueError, "correction_bias must be on gating_output's device",
         lambda: tri.moe_biased_grouped_topk(x, torch.zeros(64, device="meta"), 2, 8, 2, True)),
    ]


def test_meta_tensors_refused():
    """gating_output or correction_bias on a device Triton cannot launch on: a ValueError
    naming the public op and the argument, before the launch."""
    x, bias = make_rows(4, 64, torch.float32), torch.randn(64, device=DEVICE)
    assert_each_tensor_refused_on_meta(tri.moe_topk_softmax, x, 2, True)
    assert_each_tensor_refused_on_meta(tri.moe_grouped_topk, x, 2, 8, 2, True)
    assert_each_tensor_refused_on_meta(tri.moe_biased_grouped_topk, x, bias, 2, 8, 2, True)
    assert_each_tensor_refused_on_meta(tri.moe_routing, x, 2, "sigmoid", True, 8, 2, bias)


def test_expanded_and_strided_bias():
    """A bias read through its stride: a broadcast one (stride 0) and every other element of a longer one."""
    x = make_rows(5, 64, torch.float32)
    for bias in (torch.full((1,), 0.3, device=DEVICE).expand(64), torch.randn(128, device=DEVICE)[1::2]):
        got = tri.moe_biased_grouped_topk(x, bias, 4, 8, 2, True, 2.0)
        want = tri.moe_biased_grouped_topk(x, bias.contiguous(), 4, 8, 2, True, 2.0)
        assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])
        want = ref.moe_biased_grouped_topk(x, bias, 4, 8, 2, True, 2.0)
        assert torch.equal(got[1], want[1])


@pytest.mark.parametrize("case", range(len(_bad_calls())))
def test_bad_input(case):
    exc, match, call = _bad_calls()[case]
    with pytest.raises(exc, match=match):
        call()


# ---------------------------------------------------------------------------
# aiter's calling convention: the caller's outputs written, [:M] views of larger buffers


def _buffers(n_tokens: int, topk: int, extra_cols: int = 0):
    """Poisoned (weights, ids) buffers with more rows and columns than written: their [:M]
    views have a row stride of their own; what lies outside must stay as it was."""
    w = torch.full((n_tokens + 3, topk + extra_cols + 2), float("nan"), device=DEVICE)
    ids = torch.full((n_tokens + 3, topk + 5), -7, dtype=torch.int32, device=DEVICE)
    return w, ids


def _untouched(w, ids, n_tokens, cols, k):
    assert w[n_tokens:].isnan().all() and w[:, cols:].isnan().all()
    assert (ids[n_tokens:] == -7).all() and (ids[:, k:] == -7).all()


@pytest.mark.parametrize("shared", [0, 2])
@pytest.mark.parametrize("renorm", [False, True])
def test_aiter_topk_softmax(renorm, shared):
    """aiter's topk_softmax, 5 and 7 arguments: the routed experts as moe_topk_softmax over
    the columns before the shared ones, vLLM's source rows, the shared experts' sigmoid
    after the routed weights."""
    n_tokens, n_experts, k = 9, 64, 6
    x = make_rows(n_tokens, n_experts + shared, torch.bfloat16)
    w, ids = _buffers(n_tokens, k, shared)
    src = torch.full((n_tokens, k), -7, dtype=torch.int32, device=DEVICE)
    tri.topk_softmax(w[:n_tokens], ids[:n_tokens, :k], src, x, renorm, shared, "sigmoid" if shared else "")
    want_w, want_ids = ref.moe_topk_softmax(x[:, :n_experts], k, renorm)
    assert torch.equal(ids[:n_tokens, :k], want_ids)
    assert_close(w[:n_tokens, :k], want_w, atol=1e-6, rtol=1e-5)
    if shared:
        assert_close(w[:n_tokens, k:k + shared], torch.sigmoid(x[:, n_experts:].float()), atol=1e-6, rtol=1e-5)
    want_src = torch.arange(k, device=DEVICE)[None, :] * n_tokens + torch.arange(n_tokens, device=DEVICE)[:, None]
    assert torch.equal(src, want_src.int())
    _untouched(w, ids, n_tokens, k + shared, k)


def test_aiter_topk_sigmoid_and_grouped_forms():
    n_tokens, n_experts, k = 7, 64, 8
    x = make_rows(n_tokens, n_experts, torch.float32)
    bias = torch.randn(n_experts, device=DEVICE) * 0.1
    for call, want in (
        (lambda w, i: tri.topk_sigmoid(w, i, x), ref.moe_routing(x, k, scoring_func="sigmoid")),
        (lambda w, i: tri.grouped_topk(x, w, i, 8, 4, True, False, 2.0),
         ref.moe_grouped_topk(x, k, 8, 4, True, "sigmoid", 2.0)),
        (lambda w, i: tri.grouped_topk(x, w, i, 8, 3, False), ref.moe_grouped_topk(x, k, 8, 3, False)),
        (lambda w, i: tri.biased_grouped_topk(x, bias, w, i, 8, 4, True, 2.5),
         ref.moe_biased_grouped_topk(x, bias, k, 8, 4, True, 2.5)),
    ):
        w, ids = _buffers(n_tokens, k)
        assert call(w[:n_tokens], ids[:n_tokens, :k]) is None
        assert torch.equal(ids[:n_tokens, :k], want[1])
        assert_close(w[:n_tokens, :k], want[0], atol=1e-6, rtol=1e-5)
        _untouched(w, ids, n_tokens, k, k)


@pytest.mark.parametrize("call, error, match", [
    (lambda x, w, i, s: tri.topk_softmax(w, i.long(), s, x, True), TypeError, "topk_softmax: topk_indices must be"),
    (lambda x, w, i, s: tri.topk_softmax(w.half(), i, s, x, True), TypeError, "topk_softmax: topk_weights must be"),
    (lambda x, w, i, s: tri.topk_softmax(w[:3], i, s, x, True), ValueError, r"topk_softmax: topk_weights must be \(5"),
    (lambda x, w, i, s: tri.topk_softmax(w, i, s, x, True, 2), ValueError,
     "topk_softmax: shared_expert_scoring_func must be 'sigmoid'"),
    (lambda x, w, i, s: tri.topk_softmax(w, i, s, x, True, 1, "sigmoid"), ValueError,
     r"topk_softmax: topk_weights must be \(5, >= 5\)"),
    (lambda x, w, i, s: tri.topk_softmax(w, i, s.t(), x, True), ValueError, "token_expert_indices must be"),
    (lambda x, w, i, s: tri.grouped_topk(x, w, i, 3, 1, True), ValueError, "grouped_topk: num_expert_group"),
    (lambda x, w, i, s: tri.biased_grouped_topk(x, None, w, i, 4, 2, True), TypeError,
     "biased_grouped_topk: correction_bias must be"),
], ids=lambda v: v if isinstance(v, str) else "")
def test_aiter_forms_bad_arguments(call, error, match):
    x = make_rows(5, 16, torch.float32)
    w, ids = torch.empty(5, 4, device=DEVICE), torch.empty(5, 4, dtype=torch.int32, device=DEVICE)
    src = torch.empty(5, 4, dtype=torch.int32, device=DEVICE)
    with pytest.raises(error, match=match):
        call(x, w, ids, src)
