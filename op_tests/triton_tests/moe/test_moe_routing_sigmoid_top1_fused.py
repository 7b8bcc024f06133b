"""routing_sigmoid_top1 (aiter_lite.ops.triton.moe.moe_routing_sigmoid_top1_fused) against the fp32
native reference. Small-integer inputs (aiter's test draws them too) make every logit exact
in fp32, whatever the summation order: ids are compared exactly, ties included. Every tensor
the op allocates starts poisoned (NaN weights, -7 ids)."""

import importlib
from dataclasses import replace

import pytest
import torch

import aiter_lite.ops.triton.moe.moe_routing_sigmoid_top1_fused as mod
from aiter_lite.ops.native.moe.moe_routing_sigmoid_top1_fused import routing_sigmoid_top1 as ref
from aiter_lite.ops.triton.moe.moe_routing_sigmoid_top1_fused import (
    RoutingSigmoidTop1LaunchConfig,
    routing_sigmoid_top1,
)
from aiter_lite.spec.device import device_profile
from aiter_lite.utils.fast_launch import record
from op_tests.utils import DEVICE, DTYPES, assert_close, by_device
from op_tests.utils.inputs import poison_allocations

OP = "routing_sigmoid_top1"


@pytest.fixture(autouse=True)
def _poisoned_empty(monkeypatch):
    poison_allocations(monkeypatch)
    poisoned_empty = torch.empty

    def empty(*a, **k):
        t = poisoned_empty(*a, **k)
        return t.fill_(-7) if t.dtype == torch.int32 and not torch.compiler.is_compiling() else t

    monkeypatch.setattr(torch, "empty", empty)


def _ints(*shape, dtype):
    return torch.randint(-2, 3, shape, device=DEVICE).to(dtype)


def _check(x, w, shared=False, config=None, exact=True):
    x0, w0 = x.clone(), w.clone()
    ids, weights = routing_sigmoid_top1(x, w, 1, shared, config)
    want_ids, want_w = ref(x, w, 1, shared)
    m = x.numel() // x.shape[-1] if x.shape[-1] else x.shape[:-1].numel()
    assert ids.shape == weights.shape == (m, 1 + shared) and ids.dtype == torch.int32
    assert weights.dtype == torch.float32
    if exact:
        assert torch.equal(ids, want_ids), f"ids differ at rows {(ids != want_ids).nonzero()[:6].tolist()}"
    else:  # random inputs: a near tie may go either way; the logit picked is then within rounding of the max
        logits = x.reshape(m, -1).double() @ w.double()
        picked = logits.gather(1, ids[:, :1].long())
        assert (picked >= logits.max(1, keepdim=True).values - 1e-4 * logits.abs().max()).all()
        assert torch.equal(ids[:, 1:], want_ids[:, 1:])
        want_w = torch.cat([torch.sigmoid(picked.float()), want_w[:, 1:]], 1)
    # fp32 sigmoids: a GPU's exp is a few ulp from torch's
    assert_close(weights, want_w, atol=1e-5, rtol=1e-5, name="weights")
    assert all(torch.equal(a, b) or torch.equal(a.isnan(), b.isnan()) and torch.equal(a.nan_to_num(), b.nan_to_num())
               for a, b in ((x, x0), (w, w0))), "an input was modified"
    return ids, weights


# (tokens, hidden, experts): Llama 4 Scout's 16 and Maverick's 128 experts of hidden 5120, M = 0 / 1,
# token counts off BLOCK_M, experts off a power of 2 (aiter's: powers of 2 only), the most experts.
SHAPES = by_device(
    [(0, 64, 16), (1, 5120, 16), (37, 300, 128), (17, 64, 3), (5, 20, 1), (3, 0, 5), (2, 64, mod.MAX_EXPERTS)],
    [(m, k, n) for m in (0, 1, 7, 1000, 8192, 16384) for k, n in ((5120, 16), (5120, 128), (300, 100), (64, 1))]
    + [(4096, 5120, mod.MAX_EXPERTS), (33, 7168, 256)],
)


@pytest.mark.parametrize("m,k,n", SHAPES, ids=str)
def test_against_reference(m, k, n):
    dtype = DTYPES[(m + n) % 3]
    _check(_ints(m, k, dtype=dtype), _ints(k, n, dtype=dtype), shared=(m + k) % 2 == 1)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_random_inputs(dtype):
    """Normal hidden states and a router weight scaled as trained ones are (logits of a few units)."""
    k = by_device(512, 5120)
    x = torch.randn(by_device(9, 3000), k, device=DEVICE).to(dtype)
    w = (torch.randn(k, 128, device=DEVICE) * k ** -0.5).to(dtype)
    _check(x, w, shared=True, exact=False)


def test_strides_and_ranks():
    """x: strided rows, a non-unit last stride, 3-D and 1-D; w: the transpose of an (experts,
    hidden) linear weight, strided rows."""
    dt = torch.bfloat16
    _check(_ints(9, 128, dtype=dt)[:, :100], _ints(100, 16, dtype=dt))
    _check(_ints(9, 200, dtype=dt)[:, ::2], _ints(100, 16, dtype=dt))
    _check(_ints(3, 4, 100, dtype=dt), _ints(16, 100, dtype=dt).t())
    _check(_ints(3, 4, 100, dtype=dt).transpose(0, 1), _ints(100, 40, dtype=dt)[:, ::2])
    _check(_ints(100, dtype=dt), _ints(100, 16, dtype=dt), shared=True)


def test_tie_rule():
    """Equal logits go to the lowest expert (aiter's tie_break_left). Unlike aiter, the rule
    applies to the logits, not their sigmoids: 20 and 30 both have sigmoid 1.0 in fp32, where
    aiter's arg-max of the sigmoids picks the lower expert; here (and in Llama 4's reference
    router, a top-k of the logits) the larger logit wins."""
    x = torch.eye(4, device=DEVICE)
    w = torch.zeros(4, 16, device=DEVICE)
    w[0, [3, 9]] = 2.0          # an exact tie: expert 3
    w[1, [2, 5]] = torch.tensor([20.0, 30.0], device=DEVICE)  # sigmoids equal (1.0): expert 5, not aiter's 2
    w[2] = -1.0                 # every expert equal: expert 0
    w[3, 15] = 1e30             # a huge logit: expert 15, weight 1
    ids, weights = _check(x, w)
    assert ids[:, 0].tolist() == [3, 5, 0, 15]
    assert torch.sigmoid(torch.tensor([20.0, 30.0])).tolist() == [1.0, 1.0]
    assert_close(weights[:, 0], torch.sigmoid(torch.tensor([2.0, 30.0, -1.0, 1e30], device=DEVICE)), name="weights")


def test_nan():
    """A NaN logit ranks above every number: a NaN in a token's hidden state makes its row NaN
    (expert 0, weight NaN); a NaN in an expert's column sends every token there. Other tokens
    are unaffected; the shared column stays (N, 1.0)."""
    x, w = _ints(6, 32, dtype=torch.float32), _ints(32, 16, dtype=torch.float32)
    x[2, 5] = float("nan")
    ids, weights = _check(x, w, shared=True)
    assert ids[2].tolist() == [0, 16] and weights[2, 0].isnan() and weights[2, 1] == 1.0
    assert not weights[[0, 1, 3, 4, 5]].isnan().any()
    w[7, 11] = float("nan")
    ids, weights = _check(_ints(6, 32, dtype=torch.float32), w)
    assert (ids[:, 0] == 11).all() and weights.isnan().all()


def test_config():
    """aiter's tuned configs are taken and honoured (the launch uses their block sizes); a
    partial dict fills the rest from the default choice; a pinned config too."""
    x, w = _ints(40, 300, dtype=torch.bfloat16), _ints(300, 16, dtype=torch.bfloat16)
    aiter_gfx942_n16_large = {"BLOCK_M": 16, "BLOCK_K": 256, "num_warps": 4, "num_stages": 2, "waves_per_eu": 3,
                              "kpack": 2}
    default = mod.routing_sigmoid_top1_launch_config(40, 16, 2, device_profile(DEVICE))
    for config in (aiter_gfx942_n16_large, {"BLOCK_M": 32, "BLOCK_K": 64}, {"BLOCK_K": 16},
                   RoutingSigmoidTop1LaunchConfig(64, 32, 2, 1)):
        _check(x, w, config=config)
        want = config if isinstance(config, RoutingSigmoidTop1LaunchConfig) else replace(default, **config)
        meta = record(lambda: routing_sigmoid_top1(x, w, 1, False, config))[1][0][3]
        assert (meta["BLOCK_M"], meta["BLOCK_K"], meta["num_warps"], meta["num_stages"]) == \
            (want.BLOCK_M, want.BLOCK_K, want.num_warps, want.num_stages), f"{config} not honoured: {meta}"


@pytest.mark.parametrize("m,k,n,split", [(1, 300, 16, 3), (37, 640, 100, 5), (5, 64, 3, 16), (2, 300, 128, 2)])
def test_split_k(m, k, n, split):
    """Few tokens spread the hidden dim over SPLIT_K programs: the same ids as the reference
    (exact integer logits), fresh values call after call (nothing left over from the last
    launch's partials), the row blocks' tickets left zeroed; splits past the BLOCK_K steps
    there are shrink to them."""
    from aiter_lite.utils.launch import stream_buffer

    config = {"SPLIT_K": split, "BLOCK_K": 32}
    for shared in (False, True):
        for _ in range(2):
            _check(_ints(m, k, dtype=torch.bfloat16), _ints(k, n, dtype=torch.bfloat16), shared=shared,
                   config=config)
    meta = record(lambda: routing_sigmoid_top1(_ints(m, k, dtype=torch.float32), _ints(k, n, dtype=torch.float32), 1,
                                               False, config))[1][0]
    assert meta[1] == (-(-m // meta[3]["BLOCK_M"]), min(split, -(-k // 32))), meta[1]
    tickets = stream_buffer("routing_top1_tickets", 1, torch.int32, torch.device(DEVICE), zeroed=True)
    assert tickets.eq(0).all(), "a ticket left set"


@pytest.mark.parametrize("config,exc,what", [
    ({"SPLIT_K": 0}, ValueError, "SPLIT_K must be in"),
    ({"BLOCK_N": 16}, ValueError, "unknown keys 'BLOCK_N'"),
    ({"BLOCK_M": 8}, ValueError, "BLOCK_M must be a power of 2 in"),
    ({"BLOCK_K": 100}, ValueError, "BLOCK_K must be a power of 2 in"),
    ({"num_warps": 64}, ValueError, "num_warps must be a power of 2 in"),
    ({"num_stages": 0}, ValueError, "num_stages must be in"),
    ({"kpack": 4}, ValueError, "kpack must be in"),
    ({"BLOCK_M": 16.0}, ValueError, "BLOCK_M must be an int"),
    ({"num_warps": True}, ValueError, "num_warps must be an int"),
    ("BLOCK_M=16", TypeError, "config must be a dict"),
])
def test_bad_config(config, exc, what):
    with pytest.raises(exc, match=f"{OP}: config"):
        routing_sigmoid_top1(_ints(4, 64, dtype=torch.float32), _ints(64, 16, dtype=torch.float32), 1, False, config)
    with pytest.raises(exc, match=what):
        routing_sigmoid_top1(_ints(4, 64, dtype=torch.float32), _ints(64, 16, dtype=torch.float32), 1, False, config)


def test_registered_op_and_no_grad():
    x, w = _ints(5, 64, dtype=torch.bfloat16), _ints(64, 16, dtype=torch.bfloat16)
    got = torch.ops.aiter_lite.routing_sigmoid_top1(x, w, 1, True)
    want = routing_sigmoid_top1(x, w, 1, True)
    assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])
    assert importlib.import_module("aiter_lite.ops.triton.moe_routing_sigmoid_top1_fused").routing_sigmoid_top1 \
        is routing_sigmoid_top1  # aiter's older flat module
    eager = getattr(routing_sigmoid_top1, "eager", routing_sigmoid_top1)  # the refusal is eager's (not traced)
    with pytest.raises(ValueError, match=f"{OP}: w requires grad, but {OP} has no gradient"):
        eager(x, w.float().requires_grad_().to(torch.bfloat16), 1)
    with torch.no_grad():
        routing_sigmoid_top1(x, w.float().requires_grad_().to(torch.bfloat16), 1)


def _bad_calls():
    f = lambda *s, dtype=torch.float32: torch.randn(*s, device=DEVICE, dtype=dtype)  # noqa: E731
    return [
        (ValueError, "topk", dict(topk=2)),             # aiter asserts topk == 1
        (ValueError, "topk", dict(topk=0)),
        (TypeError, "topk", dict(topk=True)),
        (TypeError, "fused_shared_experts", dict(fused_shared_experts=2)),
        (TypeError, "w", dict(w=f(64, 16, dtype=torch.bfloat16))),  # dtype differs from x's
        (TypeError, "x", dict(x=f(4, 64).to(torch.int32))),
        (TypeError, "w", dict(w=f(64, 16).double())),
        (ValueError, "w", dict(w=f(64))),
        (ValueError, "w", dict(w=f(1, 64, 16))),
        (ValueError, "x", dict(x=f(4, 63))),             # hidden differs from w's
        (ValueError, "w", dict(w=f(64, 0))),
        (ValueError, "w", dict(w=f(64, mod.MAX_EXPERTS + 1))),
        (ValueError, "x", dict(x=f(()))),
        (TypeError, "x", dict(x=None)),
    ]


@pytest.mark.parametrize("case", range(len(_bad_calls())))
def test_bad_arguments(case):
    exc, name, change = _bad_calls()[case]
    args = {"x": torch.randn(4, 64, device=DEVICE), "w": torch.randn(64, 16, device=DEVICE), "topk": 1,
            "fused_shared_experts": False, **change}
    with pytest.raises(exc, match=rf"{OP}: {name}\b"):
        routing_sigmoid_top1(**args)
