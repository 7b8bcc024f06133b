"""aiter's fused_routing_from_topk (aiter_lite.ops.triton.fusions) against the native
reference (a stable argsort by expert), bit for bit: every output, with and without an
expert map (experts mapped away get weight 0), ids outside the experts (NaN weights), every
weight dtype, 0 / 1 / many tokens up to the 8192-pair limit, experts that get nothing and
experts that get everything; the outputs are a permutation and its inverse; bad arguments
raise naming the op and the argument."""

import pytest
import torch

from aiter_lite.ops.native.fusions import fused_routing_from_topk as native_op
from aiter_lite.ops.triton.fusions import fused_routing_from_topk
from aiter_lite.ops.triton.fusions.fused_routing_from_topk import MAX_PAIRS
from op_tests.utils import DEVICE, DTYPES, by_device

SHAPES = by_device(cpu=[(0, 2, 8), (1, 1, 4), (37, 4, 16), (5, 8, 256)],
                   gpu=[(0, 2, 8), (1, 1, 4), (37, 4, 16), (5, 8, 256), (512, 8, 256), (1024, 8, 384),
                        (MAX_PAIRS // 4, 4, 128)])


def _ids(t: int, k: int, e: int) -> torch.Tensor:
    return torch.stack([torch.randperm(e)[:k] for _ in range(t)]).reshape(t, k).int().to(DEVICE) if t else \
        torch.empty(0, k, dtype=torch.int32, device=DEVICE)


def _equal(got, want):
    for g, w, name in zip(got, want, ("hist", "topk_indx", "gate_indx", "gate_scal")):
        assert g.dtype == w.dtype and g.shape == w.shape, f"{name}: {g.dtype} {tuple(g.shape)}"
        same = (g == w) | (g.isnan() & w.isnan()) if g.is_floating_point() else g == w
        assert bool(same.all()), f"{name}: {int((~same).sum())} of {g.numel()} differ"


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("t, k, e", SHAPES)
def test_against_a_stable_argsort(t, k, e, dtype):
    ids = _ids(t, k, e)
    w = torch.rand(t, k, device=DEVICE).to(dtype)
    got = fused_routing_from_topk(w, ids, e)
    _equal(got, native_op(w, ids, e))
    hist, topk_indx, gate_indx, _ = got
    assert int(hist.sum()) == t * k
    if t:
        assert torch.equal(topk_indx.long()[gate_indx.long()], torch.arange(t * k, device=DEVICE))


def test_expert_map_and_ids_outside():
    t, k, e_global, e_local = 33, 4, 64, 16
    ids = _ids(t, k, e_global)
    ids[2, 1] = 70  # outside the map
    emap = torch.full((e_global,), -1, dtype=torch.int32, device=DEVICE)
    emap[16:32] = torch.arange(e_local, dtype=torch.int32, device=DEVICE)  # this rank's experts
    emap[40] = 99  # mapped past the local experts
    w = torch.rand(t, k, device=DEVICE)
    got = fused_routing_from_topk(w, ids, e_local, emap)
    _equal(got, native_op(w, ids, e_local, emap))
    scal = got[3]
    src = got[1].long()
    flat_ids = ids.reshape(-1).long()[src]
    away = (emap.long()[flat_ids.clamp(max=e_global - 1)] < 0) & (flat_ids < e_global)
    assert (scal[away] == 0).all()
    assert scal[flat_ids == 70].isnan().all()


def test_every_pair_to_one_expert_and_the_limit():
    ids = torch.full((MAX_PAIRS // 8, 8), 3, dtype=torch.int32, device=DEVICE)
    w = torch.rand(MAX_PAIRS // 8, 8, device=DEVICE)
    _equal(fused_routing_from_topk(w, ids, 8), native_op(w, ids, 8))


@pytest.mark.parametrize("i", range(8))
def test_bad_arguments_raise(i):
    w = torch.rand(4, 2, device=DEVICE)
    ids = _ids(4, 2, 8)
    calls = [
        (lambda: fused_routing_from_topk(w, ids.long(), 8), "topk_ids"),
        (lambda: fused_routing_from_topk(w, ids[:3], 8), "topk_ids"),
        (lambda: fused_routing_from_topk(w.t(), ids.t(), 8), "topk_weights"),
        (lambda: fused_routing_from_topk(w, ids, 0), "n_expts_tot"),
        (lambda: fused_routing_from_topk(w, ids, 8, torch.zeros(8, device=DEVICE)), "expert_map"),
        (lambda: fused_routing_from_topk(w.int(), ids, 8), "topk_weights"),
        (lambda: fused_routing_from_topk(torch.rand(MAX_PAIRS + 1, 1, device=DEVICE),
                                         torch.zeros(MAX_PAIRS + 1, 1, dtype=torch.int32, device=DEVICE), 8),
         "topk_ids"),
        (lambda: fused_routing_from_topk(w, ids, 8.0), "n_expts_tot"),
    ]
    call, name = calls[i]
    with pytest.raises((TypeError, ValueError), match=f"fused_routing_from_topk: {name}"):
        call()
