"""MoE routing data from top-k ids (aiter's ``fused_routing_from_topk``): the (token, slot)
pairs sorted by expert in one program: keys ``expert * BLOCK_NK + flat index`` sorted (a
stable counting order, so every output is deterministic and equals a stable argsort's), the
histogram of the experts, the sorted order (topk_indx), its inverse (gate_indx) and the
weights in sorted order (gate_scal)."""

import triton
import triton.language as tl


@triton.jit
def _expert_and_weight(ids_ptr, w_ptr, map_ptr, map_numel, idx, mask, n_experts, HAS_MAP: tl.constexpr):
    """The local expert of each pair and its weight (fp32): a pair the map sends below 0 goes
    to expert 0 with weight 0 (aiter's rule); an id outside the experts (or the map) to expert
    0 with a NaN weight, so what it feeds shows it."""
    g = tl.load(ids_ptr + idx, mask=mask, other=0)
    w = tl.load(w_ptr + idx, mask=mask, other=0.0).to(tl.float32)
    if HAS_MAP:
        in_map = (g >= 0) & (g < map_numel)
        e = tl.load(map_ptr + tl.where(in_map, g, 0), mask=mask & in_map, other=-1)
        dropped = in_map & (e < 0)
        bad = ~in_map | (e >= n_experts)
        w = tl.where(dropped, 0.0, w)
    else:
        e = g
        dropped = g < g  # none
        bad = (g < 0) | (g >= n_experts)
    w = tl.where(bad, float("nan"), w)
    return tl.where(dropped | bad, 0, e), w


@triton.jit
def _routing_from_topk_kernel(ids_ptr, w_ptr, map_ptr, hist_ptr, topk_indx_ptr, gate_indx_ptr, gate_scal_ptr,
                              n_pairs, n_experts, map_numel,
                              HAS_MAP: tl.constexpr, BLOCK_NK: tl.constexpr, BLOCK_E: tl.constexpr):
    i = tl.arange(0, BLOCK_NK)
    valid = i < n_pairs
    e, _ = _expert_and_weight(ids_ptr, w_ptr, map_ptr, map_numel, i, valid, n_experts, HAS_MAP)
    hist = tl.histogram(tl.where(valid, e, BLOCK_E - 1), BLOCK_E)  # padding lanes in a bin past the experts
    bins = tl.arange(0, BLOCK_E)
    tl.store(hist_ptr + bins, hist, mask=bins < n_experts)
    key = tl.where(valid, e, n_experts) * BLOCK_NK + i  # padding sorts last
    src = tl.sort(key) % BLOCK_NK  # the flat index at each expert-sorted position
    _, w = _expert_and_weight(ids_ptr, w_ptr, map_ptr, map_numel, src, valid, n_experts, HAS_MAP)
    tl.store(topk_indx_ptr + i, src, mask=valid)
    tl.store(gate_indx_ptr + src, i, mask=valid)
    tl.store(gate_scal_ptr + i, w.to(gate_scal_ptr.dtype.element_ty), mask=valid)
