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


def moe_topk_softmax(gating_output: torch.Tensor, topk: int, renormalize: bool):
    return moe_routing(gating_output, topk, scoring_func="softmax", renormalize=renormalize)


def moe_grouped_topk(gating_output: torch.Tensor, topk: int, num_expert_group: int, topk_group: int,
                 renormalize: bool, scoring_func: str = "softmax", routed_scaling_factor: float = 1.0):
    return moe_routing(gating_output, topk, scoring_func=scoring_func, renormalize=renormalize,
                       num_expert_group=num_expert_group, topk_group=topk_group,
                       routed_scaling_factor=routed_scaling_factor)


def moe_biased_grouped_topk(gating_output: torch.Tensor, correction_bias: torch.Tensor, topk: int,
                        num_expert_group: int, topk_group: int, renormalize: bool,
                        routed_scaling_factor: float = 1.0):
    return moe_routing(gating_output, topk, scoring_func="sigmoid", renormalize=renormalize,
                       num_expert_group=num_expert_group, topk_group=topk_group,
                       correction_bias=correction_bias, routed_scaling_factor=routed_scaling_factor)


def _write(topk_weights, topk_ids, weights, ids) -> None:
    topk_weights[:, :weights.shape[1]].copy_(weights)
    topk_ids.copy_(ids)


def topk_softmax(topk_weights: torch.Tensor, topk_indices: torch.Tensor, token_expert_indices: torch.Tensor,
                 gating_output: torch.Tensor, need_renorm: bool, num_shared_experts: int = 0,
                 shared_expert_scoring_func: str = "") -> None:
    k, n_tokens = topk_indices.shape[1], gating_output.shape[0]
    n_experts = gating_output.shape[1] - num_shared_experts
    _write(topk_weights, topk_indices, *moe_topk_softmax(gating_output[:, :n_experts], k, need_renorm))
    src = torch.arange(k, device=gating_output.device)[None, :] * n_tokens + \
        torch.arange(n_tokens, device=gating_output.device)[:, None]
    token_expert_indices.copy_(src.to(torch.int32))
    if num_shared_experts:
        topk_weights[:, k:k + num_shared_experts].copy_(torch.sigmoid(gating_output[:, n_experts:].float()))


def topk_sigmoid(topk_weights: torch.Tensor, topk_indices: torch.Tensor, gating_output: torch.Tensor) -> None:
    _write(topk_weights, topk_indices, *moe_routing(gating_output, topk_indices.shape[1], scoring_func="sigmoid"))


def grouped_topk(gating_output: torch.Tensor, topk_weights: torch.Tensor, topk_ids: torch.Tensor,
                 num_expert_group: int, topk_group: int, need_renorm: bool, is_softmax: bool = True,
                 routed_scaling_factor: float = 1.0) -> None:
    _write(topk_weights, topk_ids, *moe_grouped_topk(gating_output, topk_ids.shape[1], num_expert_group, topk_group,
                                                     need_renorm, "softmax" if is_softmax else "sigmoid",
                                                     routed_scaling_factor))


def biased_grouped_topk(gating_output: torch.Tensor, correction_bias: torch.Tensor, topk_weights: torch.Tensor,
                        topk_ids: torch.Tensor, num_expert_group: int, topk_group: int, need_renorm: bool,
                        routed_scaling_factor: float = 1.0) -> None:
    _write(topk_weights, topk_ids, *moe_biased_grouped_topk(gating_output, correction_bias, topk_ids.shape[1],
                                                            num_expert_group, topk_group, need_renorm,
                                                            routed_scaling_factor))
