"""MoE routing in plain PyTorch (fp32 math), also the "native" backend.

Same names and argument orders as ``aiter_lite.ops.triton.moe_routing``; each returns
``(weights, ids)``: fp32 and int32, (T, topk), in selection order.

Ranking is a stable descending sort, so equal keys go to the lower index (expert or
group) and NaN ranks above every number (torch's order).
"""

from __future__ import annotations

import torch


def _ranked(keys: torch.Tensor) -> torch.Tensor:
    """Indices along the last dim from the largest key down; ties by lower index, NaN first."""
    return torch.sort(keys, dim=-1, descending=True, stable=True).indices


def moe_routing(gating_output: torch.Tensor, topk: int, scoring_func: str = "softmax",
                renormalize: bool = False, num_expert_group: int = 1, topk_group: int = 1,
                correction_bias: torch.Tensor | None = None,
                routed_scaling_factor: float = 1.0) -> tuple[torch.Tensor, torch.Tensor]:
    """The general routing every public name calls (semantics in the module docstring of
    ``aiter_lite.ops.triton.moe_routing``)."""
    x = gating_output.float()
    scores = torch.softmax(x, dim=-1) if scoring_func == "softmax" else torch.sigmoid(x)
    keys = scores if correction_bias is None else scores + correction_bias.float()
    n_tokens, n_experts = keys.shape
    if num_expert_group > 1:
        groups = keys.view(n_tokens, num_expert_group, n_experts // num_expert_group)
        if correction_bias is None:
            group_scores = groups.max(dim=-1).values
        else:
            group_scores = groups.sort(dim=-1, descending=True, stable=True).values[..., :2].sum(dim=-1)
        kept = torch.zeros_like(group_scores, dtype=torch.bool)
        kept.scatter_(1, _ranked(group_scores)[:, :topk_group], True)
        keys = keys.masked_fill(~kept.repeat_interleave(n_experts // num_expert_group, dim=1), float("-inf"))
    ids = _ranked(keys)[:, :topk]
    weights = scores.gather(1, ids)
    if renormalize:
        weights = weights / weights.sum(dim=-1, keepdim=True)
    return weights * routed_scaling_factor, ids.to(torch.int32)


def topk_softmax(gating_output: torch.Tensor, topk: int, renormalize: bool):
    return moe_routing(gating_output, topk, scoring_func="softmax", renormalize=renormalize)


def grouped_topk(gating_output: torch.Tensor, topk: int, num_expert_group: int, topk_group: int,
                 renormalize: bool, scoring_func: str = "softmax", routed_scaling_factor: float = 1.0):
    return moe_routing(gating_output, topk, scoring_func=scoring_func, renormalize=renormalize,
                       num_expert_group=num_expert_group, topk_group=topk_group,
                       routed_scaling_factor=routed_scaling_factor)


def biased_grouped_topk(gating_output: torch.Tensor, correction_bias: torch.Tensor, topk: int,
                        num_expert_group: int, topk_group: int, renormalize: bool,
                        routed_scaling_factor: float = 1.0):
    return moe_routing(gating_output, topk, scoring_func="sigmoid", renormalize=renormalize,
                       num_expert_group=num_expert_group, topk_group=topk_group,
                       correction_bias=correction_bias, routed_scaling_factor=routed_scaling_factor)
