"""What bench_topk.py's MoE-routing cases need: the torch-ops peers (vLLM's routing
written out with torch.softmax / sigmoid, torch.topk and -inf group masks) and
router logits whose routing is unambiguous.

A benchmark checks every provider against the native reference before timing it, and
torch.topk leaves ties open while two exp / sigmoid implementations may round a
near-tie apart. :func:`routing_logits` therefore builds logits where every selection
has a clear margin: distinct experts, distinct groups, a bias too small to reorder
them. Timing does not depend on the values.
"""

from __future__ import annotations

import torch


def vllm_fused_topk(gating_output: torch.Tensor, topk: int, renormalize: bool):
    """vLLM's fused_topk in torch ops: softmax over the experts, torch.topk, renormalize."""
    scores = torch.softmax(gating_output.float(), dim=-1)
    weights, ids = torch.topk(scores, topk, dim=-1)
    if renormalize:
        weights = weights / weights.sum(dim=-1, keepdim=True)
    return weights, ids.to(torch.int32)


def vllm_biased_grouped_topk(gating_output: torch.Tensor, correction_bias: torch.Tensor, topk: int,
                             num_expert_group: int, topk_group: int, renormalize: bool,
                             routed_scaling_factor: float = 1.0):
    """vLLM's grouped_topk with e_score_correction_bias (DeepSeek-V3) in torch ops."""
    scores = gating_output.float().sigmoid()
    n_tokens, n_experts = scores.shape
    keys = scores + correction_bias.float().unsqueeze(0)
    groups = keys.view(n_tokens, num_expert_group, -1)
    group_scores = groups.topk(2, dim=-1)[0].sum(dim=-1)
    group_idx = torch.topk(group_scores, k=topk_group, dim=-1, sorted=False)[1]
    group_mask = torch.zeros_like(group_scores).scatter_(1, group_idx, 1)
    score_mask = group_mask.unsqueeze(-1).expand(n_tokens, num_expert_group, n_experts // num_expert_group)
    masked = keys.masked_fill(~score_mask.reshape(n_tokens, n_experts).bool(), float("-inf"))
    ids = torch.topk(masked, k=topk, dim=-1)[1]
    weights = scores.gather(1, ids)
    if renormalize:
        weights = weights / weights.sum(dim=-1, keepdim=True)
    return weights * routed_scaling_factor, ids.to(torch.int32)


def _distinct_values(n: int) -> torch.Tensor:
    """n distinct values, ascending, exact in bfloat16 / float16 / float32, spread over
    +-[0.5, 3): neighbours at least 2^-9 apart (640 such values exist)."""
    every = torch.arange(2**16, dtype=torch.int32).to(torch.int16).view(torch.bfloat16).float()
    pool = every[(every.abs() >= 0.5) & (every.abs() < 3)].sort().values
    if n > len(pool):
        raise SystemExit(f"routing logits: at most {len(pool)} experts, got {n}")
    return pool[torch.linspace(0, len(pool) - 1, n).round().long()]


def routing_logits(n_tokens: int, n_experts: int, n_groups: int, dtype: torch.dtype, device) -> torch.Tensor:
    """(T, E) logits, per token a permutation of E distinct values: the groups take the
    value ranges in a random order (every value of a higher group above every value of
    a lower one) and their experts the values of their range in a random order. Two
    experts' sigmoid scores then differ by at least about 1e-4 (softmax: relative), two
    groups' best-two sums by more: far above any rounding."""
    per_group = n_experts // n_groups
    values = _distinct_values(n_experts).to(device)
    level = torch.rand(n_tokens, n_groups, 1, device=device).argsort(dim=1)
    within = torch.rand(n_tokens, n_groups, per_group, device=device).argsort(dim=-1)
    return values[(level * per_group + within).reshape(n_tokens, n_experts)].to(dtype)


def small_bias(n_experts: int, device) -> torch.Tensor:
    """A correction bias under a quarter of the smallest gap between two experts'
    sigmoid scores in routing_logits: it steers nothing, so every provider agrees."""
    return (torch.rand(n_experts, device=device) - 0.5) * 4e-5
