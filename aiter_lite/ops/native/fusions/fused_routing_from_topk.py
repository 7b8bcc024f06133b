"""aiter's ``fused_routing_from_topk`` in plain PyTorch: the pairs in a stable argsort by
expert. The reference of ``aiter_lite.ops.triton.fusions.fused_routing_from_topk``."""

from __future__ import annotations

import torch

__all__ = ["fused_routing_from_topk"]


def fused_routing_from_topk(topk_weights, topk_ids, n_expts_tot, expert_map=None):
    ids = topk_ids.reshape(-1).long()
    w = topk_weights.reshape(-1).float()
    if expert_map is not None:
        in_map = (ids >= 0) & (ids < expert_map.numel())
        e = torch.where(in_map, expert_map.long()[ids.clamp(0, max(expert_map.numel() - 1, 0))], -1)
        dropped = in_map & (e < 0)
        bad = ~in_map | (e >= n_expts_tot)
        w = torch.where(dropped, 0.0, w)
    else:
        e = ids
        dropped = torch.zeros_like(ids, dtype=torch.bool)
        bad = (ids < 0) | (ids >= n_expts_tot)
    w = torch.where(bad, float("nan"), w)
    e = torch.where(dropped | bad, 0, e)
    order = torch.argsort(e, stable=True)
    gate_indx = torch.empty_like(order)
    gate_indx[order] = torch.arange(order.numel(), device=order.device)
    # a count per expert (not bincount, whose length depends on the values: no fake of it)
    hist = torch.zeros(n_expts_tot, dtype=torch.long, device=e.device).scatter_add_(0, e, torch.ones_like(e))
    return (hist.int(), order.int(), gate_indx.int(), w[order].to(topk_weights.dtype))
