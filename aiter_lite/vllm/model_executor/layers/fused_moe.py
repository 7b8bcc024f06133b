"""vLLM's MoE routing helpers (``vllm.model_executor.layers.fused_moe``) on aiter_lite:
``fused_topk``, ``fused_topk_bias``, ``fused_grouped_topk`` (this project's routing kernel, one
launch), ``grouped_topk`` (vLLM's torch reference, written out) and the ``GroupedTopk`` layer.

Weights are fp32; ids int32 unless ``indices_type`` asks for another integer type (a
conversion after the kernel). ``num_expert_group`` / ``topk_group`` 0 mean no groups.
"""

from __future__ import annotations

import torch

from aiter_lite.ops.triton.moe_routing import _route_into
from aiter_lite.utils.checks import check_int
from aiter_lite.vllm import _core_ops as ops
from aiter_lite.vllm.model_executor.custom_op import CustomOp

__all__ = ["fused_topk", "fused_topk_bias", "fused_grouped_topk", "grouped_topk", "GroupedTopk"]

_SCORING = ("softmax", "sigmoid")


def _alloc(op: str, hidden_states, gating_output, topk: int):
    if not isinstance(gating_output, torch.Tensor) or gating_output.dim() != 2:
        raise ValueError(f"{op}: gating_output must be a 2-D (tokens, experts) tensor, got "
                         f"{tuple(gating_output.shape) if isinstance(gating_output, torch.Tensor) else gating_output}")
    if not isinstance(hidden_states, torch.Tensor) or hidden_states.shape[0] != gating_output.shape[0]:
        raise ValueError(f"{op}: hidden_states must have gating_output's {gating_output.shape[0]} tokens, got "
                         f"{tuple(hidden_states.shape) if isinstance(hidden_states, torch.Tensor) else hidden_states}")
    topk = check_int(op, "topk", topk, 1)
    m, dev = gating_output.shape[0], gating_output.device
    return (torch.empty(m, topk, dtype=torch.float32, device=dev), torch.empty(m, topk, dtype=torch.int32, device=dev))


def _ids(op: str, ids: torch.Tensor, indices_type) -> torch.Tensor:
    if indices_type is None or indices_type == torch.int32:
        return ids
    if not isinstance(indices_type, torch.dtype) or indices_type.is_floating_point or indices_type == torch.bool:
        raise TypeError(f"{op}: indices_type must be an integer torch.dtype or None, got {indices_type!r}")
    return ids.to(indices_type)


def _scoring(op: str, scoring_func) -> str:
    if scoring_func not in _SCORING:
        raise ValueError(f"{op}: scoring_func must be 'softmax' or 'sigmoid', got {scoring_func!r}")
    return scoring_func


def fused_topk(hidden_states: torch.Tensor, gating_output: torch.Tensor, topk: int, renormalize: bool,
               indices_type: torch.dtype | None = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(topk_weights, topk_ids, token_expert_indices) of softmax routing, as vLLM's."""
    op = "fused_topk"
    w, ids = _alloc(op, hidden_states, gating_output, topk)
    tei = torch.empty_like(ids)
    ops.topk_softmax(w, ids, tei, gating_output, renormalize)
    return w, _ids(op, ids, indices_type), tei


def fused_topk_bias(hidden_states: torch.Tensor, gating_output: torch.Tensor, e_score_correction_bias: torch.Tensor,
                    topk: int, renormalize: bool, scoring_func: str = "softmax",
                    indices_type: torch.dtype | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """(topk_weights, topk_ids): the choice by score + bias, the weights the unbiased scores."""
    op = "fused_topk_bias"
    scoring = _scoring(op, scoring_func)
    w, ids = _alloc(op, hidden_states, gating_output, topk)
    tei = torch.empty_like(ids)
    fn = ops.topk_softmax if scoring == "softmax" else ops.topk_sigmoid
    fn(w, ids, tei, gating_output, renormalize, e_score_correction_bias)
    return w, _ids(op, ids, indices_type)


def fused_grouped_topk(hidden_states: torch.Tensor, gating_output: torch.Tensor, topk: int, renormalize: bool,
                       e_score_correction_bias: torch.Tensor | None = None, num_expert_group: int = 0,
                       topk_group: int = 0, scoring_func: str = "softmax",
                       routed_scaling_factor: float = 1.0) -> tuple[torch.Tensor, torch.Tensor]:
    """(topk_weights, topk_ids) of grouped routing (DeepSeek-V2 / V3) in one launch."""
    op = "fused_grouped_topk"
    scoring = _scoring(op, scoring_func)
    w, ids = _alloc(op, hidden_states, gating_output, topk)
    groups = check_int(op, "num_expert_group", num_expert_group, 0) or 1
    keep = check_int(op, "topk_group", topk_group, 0) or groups
    _route_into(op, gating_output, w, ids, None, scoring, renormalize, groups, keep, e_score_correction_bias,
                routed_scaling_factor)
    return w, ids


def grouped_topk(hidden_states: torch.Tensor, gating_output: torch.Tensor, topk: int, renormalize: bool,
                 num_expert_group: int = 0, topk_group: int = 0, scoring_func: str = "softmax",
                 routed_scaling_factor: float = 1.0,
                 e_score_correction_bias: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """vLLM's torch reference of grouped routing: groups ranked by their best score (by the
    sum of their two best biased scores where a bias is given)."""
    op = "grouped_topk"
    scoring = _scoring(op, scoring_func)
    _alloc(op, hidden_states, gating_output, topk)
    scores = gating_output.float().softmax(-1) if scoring == "softmax" else gating_output.float().sigmoid()
    t, e = scores.shape
    groups = num_expert_group or 1
    keep = topk_group or groups
    if e_score_correction_bias is not None:
        original = scores
        scores = scores + e_score_correction_bias.float().unsqueeze(0)
        group_scores = scores.view(t, groups, -1).topk(2, dim=-1)[0].sum(dim=-1)
    else:
        original = scores
        group_scores = scores.view(t, groups, -1).max(dim=-1).values
    group_idx = torch.topk(group_scores, k=keep, dim=-1, sorted=False)[1]
    group_mask = torch.zeros_like(group_scores).scatter_(1, group_idx, 1)
    score_mask = group_mask.unsqueeze(-1).expand(t, groups, e // groups).reshape(t, -1)
    tmp = scores.masked_fill(~score_mask.bool(), float("-inf"))
    topk_ids = torch.topk(tmp, k=topk, dim=-1, sorted=False)[1]
    topk_weights = original.gather(1, topk_ids)
    if renormalize:
        topk_weights = topk_weights / topk_weights.sum(dim=-1, keepdim=True)
    if routed_scaling_factor != 1.0:
        topk_weights = topk_weights * routed_scaling_factor
    return topk_weights.to(torch.float32), topk_ids.to(torch.int32)


@CustomOp.register("grouped_topk")
class GroupedTopk(CustomOp):
    """vLLM's ``GroupedTopk(topk, renormalize, num_expert_group, topk_group, scoring_func,
    routed_scaling_factor, num_fused_shared_experts)``; forward(hidden_states, gating_output,
    e_score_correction_bias=None) -> (topk_weights, topk_ids)."""

    def __init__(self, topk: int, renormalize: bool, num_expert_group: int = 0, topk_group: int = 0,
                 scoring_func: str = "softmax", routed_scaling_factor: float = 1.0,
                 num_fused_shared_experts: int = 0, **custom_op_kwargs) -> None:
        super().__init__(**custom_op_kwargs)
        if num_fused_shared_experts:
            raise ValueError(f"GroupedTopk: num_fused_shared_experts must be 0 (fused shared experts are not "
                             f"supported), got {num_fused_shared_experts}")
        self.topk = topk
        self.renormalize = renormalize
        self.num_expert_group = num_expert_group
        self.topk_group = topk_group
        self.scoring_func = _scoring("GroupedTopk", scoring_func)
        self.routed_scaling_factor = routed_scaling_factor

    def forward_native(self, hidden_states, gating_output, e_score_correction_bias=None):
        return grouped_topk(hidden_states, gating_output, self.topk, self.renormalize, self.num_expert_group,
                            self.topk_group, self.scoring_func, self.routed_scaling_factor, e_score_correction_bias)

    def forward_cuda(self, hidden_states, gating_output, e_score_correction_bias=None):
        return fused_grouped_topk(hidden_states, gating_output, self.topk, self.renormalize, e_score_correction_bias,
                                  self.num_expert_group, self.topk_group, self.scoring_func,
                                  self.routed_scaling_factor)
