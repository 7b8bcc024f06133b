"""aiter's ``fused_routing_from_topk`` (``aiter.ops.triton.fusions.fused_routing_from_topk``):
the routing data ``triton_kernels.matmul_ogs`` takes, from FusedMoE's top-k weights and ids,
in one launch: ``(hist, topk_indx, gate_indx, gate_scal)``.

Where aiter places pairs by atomics (an order within an expert that changes from run to
run), this sorts them: within an expert by flat index, so the result is deterministic and
equals a stable argsort's bit for bit. One program holds every pair: up to 8192 (aiter:
4096). An expert id outside [0, n_expts_tot) (or outside ``expert_map``, or mapped past the
experts) goes to expert 0 with a NaN weight, which reaches the tokens it feeds (aiter: no
check); a pair ``expert_map`` sends below 0 goes to expert 0 with weight 0 (aiter's rule)."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from aiter_lite.ops.triton._triton_kernels.fusions.fused_routing_from_topk import _routing_from_topk_kernel
from aiter_lite.utils.checks import check_float_tensor, check_int, check_same_device, check_triton_device
from aiter_lite.utils.fast_launch import launch
from aiter_lite.utils.launch import next_power_of_2
from aiter_lite.utils.launcher import launcher
from aiter_lite.utils.logger import debug_on, log_call
from aiter_lite.utils.registry import public_op

__all__ = ["fused_routing_from_topk", "MAX_PAIRS", "RoutingLaunchConfig"]


@dataclass(frozen=True)
class RoutingLaunchConfig:
    num_warps: int  # the one program's warps

MAX_PAIRS = 8192  # tokens x top-k in one program
_MAX_EXPERTS = 65536


@launcher(mutates=("hist", "topk_indx", "gate_indx", "gate_scal"))
def _launch_routing(ids: torch.Tensor, weights: torch.Tensor, expert_map: torch.Tensor | None, hist: torch.Tensor,
                    topk_indx: torch.Tensor, gate_indx: torch.Tensor, gate_scal: torch.Tensor,
                    config: RoutingLaunchConfig | None = None) -> None:
    """One program over every pair; ``config`` pins its warps (tests, tuning)."""
    n_pairs, n_experts = ids.numel(), hist.numel()
    block_nk = max(next_power_of_2(n_pairs), 32)
    # 8 keys a lane at most (sm_90 spilled at 64 a lane on 4 warps); unmeasured
    warps = config.num_warps if config is not None else min(max(block_nk // 256, 1), 16)  # (1024 AMD lanes)
    launch(_routing_from_topk_kernel, (1,), ids, weights, expert_map, hist, topk_indx, gate_indx, gate_scal,
           n_pairs, n_experts, 0 if expert_map is None else expert_map.numel(),
           HAS_MAP=expert_map is not None, BLOCK_NK=block_nk, BLOCK_E=max(next_power_of_2(n_experts + 1), 32),
           num_warps=warps)


def _int32(op: str, name: str, t, dim: int) -> None:
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{op}: {name} must be a torch.Tensor, got {type(t).__name__}")
    if t.dtype != torch.int32:
        raise TypeError(f"{op}: {name} must be int32, got {t.dtype}")
    if t.dim() != dim:
        raise ValueError(f"{op}: {name} must be {dim}-D, got shape {tuple(t.shape)}")
    if not t.is_contiguous():
        raise ValueError(f"{op}: {name} must be contiguous, got strides {tuple(t.stride())}")


@public_op(no_grad="its outputs are routing indices and the weights in routing order (no backward)")
def fused_routing_from_topk(topk_weights: torch.Tensor, topk_ids: torch.Tensor, n_expts_tot: int,
                            expert_map: torch.Tensor | None = None
                            ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """(token, slot) pairs sorted by expert (within one by flat index ``token * K + slot``):
    ``hist`` (E,) int32 the pairs an expert gets; ``topk_indx`` (NK,) int32 the flat index at
    each sorted position; ``gate_indx`` (NK,) int32 its inverse; ``gate_scal`` (NK,) the
    weights in sorted order, topk_weights' dtype. topk_weights (T, K) float and topk_ids (T, K)
    int32, contiguous; ``expert_map``: int32 global -> local expert ids (below 0: not here)."""
    op = "fused_routing_from_topk"
    check_float_tensor(op, "topk_weights", topk_weights)
    check_triton_device(op, "topk_weights", topk_weights)
    if topk_weights.dim() != 2 or not topk_weights.is_contiguous():
        raise ValueError(f"{op}: topk_weights must be a contiguous (n_tokens, top_k) tensor, got shape "
                         f"{tuple(topk_weights.shape)} strides {tuple(topk_weights.stride())}")
    _int32(op, "topk_ids", topk_ids, 2)
    if topk_ids.shape != topk_weights.shape:
        raise ValueError(f"{op}: topk_ids must have topk_weights' shape {tuple(topk_weights.shape)}, "
                         f"got {tuple(topk_ids.shape)}")
    check_same_device(op, "topk_ids", topk_ids, "topk_weights", topk_weights)
    n_experts = check_int(op, "n_expts_tot", n_expts_tot, 1, _MAX_EXPERTS)
    if expert_map is not None:
        _int32(op, "expert_map", expert_map, 1)
        check_same_device(op, "expert_map", expert_map, "topk_weights", topk_weights)
    n_pairs = topk_ids.numel()
    if n_pairs > MAX_PAIRS:
        raise ValueError(f"{op}: topk_ids holds {n_pairs} (token, slot) pairs, more than the {MAX_PAIRS} one "
                         f"program sorts (aiter: 4096); route larger batches in parts or with a sort")
    dev = topk_weights.device
    hist = torch.empty(n_experts, dtype=torch.int32, device=dev)
    topk_indx = torch.empty(n_pairs, dtype=torch.int32, device=dev)
    gate_indx = torch.empty(n_pairs, dtype=torch.int32, device=dev)
    gate_scal = torch.empty(n_pairs, dtype=topk_weights.dtype, device=dev)
    if debug_on():
        log_call(op, topk_weights=topk_weights, topk_ids=topk_ids, n_expts_tot=n_experts, expert_map=expert_map)
    _launch_routing(topk_ids, topk_weights, expert_map, hist, topk_indx, gate_indx, gate_scal)
    return hist, topk_indx, gate_indx, gate_scal
