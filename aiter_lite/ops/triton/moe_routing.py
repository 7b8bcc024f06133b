"""MoE routing on the Triton backend: the experts each token goes to, and their weights.

One kernel launch a call, under two calling conventions:

* aiter's (the names vLLM and SGLang call with ``VLLM_ROCM_USE_AITER_MOE`` /
  ``SGLANG_USE_AITER``): the caller preallocates fp32 ``topk_weights`` and int32 ids (row
  strides of their own: ``[:M]`` views of persistent buffers), topk is the ids' column
  count, nothing is returned:
  ``topk_softmax(topk_weights, topk_indices, token_expert_indices, gating_output,
  need_renorm, num_shared_experts=0, shared_expert_scoring_func="")`` (vLLM's 5- and
  7-argument calls; fused shared experts scored by sigmoid after the routed weights),
  ``topk_sigmoid(topk_weights, topk_indices, gating_output)``,
  ``grouped_topk(gating_output, topk_weights, topk_ids, num_expert_group, topk_group,
  need_renorm, is_softmax=True, routed_scaling_factor=1.0)``,
  ``biased_grouped_topk(gating_output, correction_bias, topk_weights, topk_ids,
  num_expert_group, topk_group, need_renorm, routed_scaling_factor=1.0)``;
* allocating, returning ``(weights, ids)``, (T, topk) fp32 and int32, over one general
  wrapper (:func:`moe_routing`):
  ``moe_topk_softmax(gating_output, topk, renormalize)`` (Mixtral / Qwen-MoE, vLLM's
  ``fused_topk``), ``moe_grouped_topk(gating_output, topk, num_expert_group, topk_group,
  renormalize, scoring_func="softmax", routed_scaling_factor=1.0)`` (DeepSeek-V2, vLLM's
  ``grouped_topk`` without a correction bias), ``moe_biased_grouped_topk(gating_output,
  correction_bias, topk, num_expert_group, topk_group, renormalize,
  routed_scaling_factor=1.0)`` (DeepSeek-V3 / Kimi-K2, the reference ``Gate``).

``gating_output`` is (T, E) fp32 / fp16 / bf16 with any strides; math in fp32.

Semantics, per token (``aiter_lite.ops.native.moe_routing`` is the same in plain torch):

1. scores ``p = softmax(logits)`` over all E experts, or ``sigmoid(logits)``
   (the biased forms: always sigmoid);
2. selection keys ``p + correction_bias`` (the bias only steers selection);
3. groups (``num_expert_group`` > 1, ``topk_group`` < ``num_expert_group``): experts
   ``[g * E / G, (g + 1) * E / G)`` form group g; a group's score is its best key, or
   with a bias the sum of its best two keys (its one key in groups of one expert); the
   ``topk_group`` best groups are kept and the other groups' experts are never chosen
   (vLLM and DeepSeek-V3 mask them with -inf);
4. the ``topk`` best keys among the kept experts; the weights are their unbiased
   scores ``p``;
5. ``renormalize``: weights divided by their sum over the k chosen; then every weight
   is multiplied by ``routed_scaling_factor``, after renormalization and also without
   it. This is where aiter's ``biased_grouped_topk`` / ``grouped_topk`` kernels apply
   it (``w * routed_scaling_factor / sum``), where vLLM's ``grouped_topk`` does
   (``topk_weights * routed_scaling_factor`` after renormalizing) and where DeepSeek-V3's
   ``Gate`` applies ``route_scale``. Callers that scale the MoE output instead pass 1.0.

Order and ties: the k experts come out in selection order, from the largest key down
(the largest weight first where there is no bias); equal keys go to the lower expert
index, equal group scores to the lower group index (vLLM's ``topk_softmax`` CUDA kernel
breaks ties the same way; ``torch.topk`` leaves them unspecified and aiter's grouped
kernels rank tied experts by a lane-permuted order).

NaN: a NaN key ranks above every number (``torch.sort``'s order), so an expert with a
NaN logit is chosen first and its NaN weight makes every renormalized weight of that
token NaN; a NaN anywhere in a softmax row makes the whole row NaN, so that token gets
experts 0..k-1 (all keys tie) and NaN weights. Other tokens are unaffected. A
renormalization over k scores that are all 0 (sigmoid of logits below about -88)
gives NaN (0 / 0) as in vLLM; aiter's HIP kernel writes 0 there. The bias is assumed
finite.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import torch

from aiter_lite.ops.triton._triton_kernels.moe_routing import _moe_routing_kernel
from aiter_lite.spec.device import INTERPRETER, DeviceProfile, device_profile
from aiter_lite.utils.checks import (
    check_bool,
    check_choice,
    check_float_tensor,
    check_int,
    check_real,
    check_same_device,
    check_triton_device,
)
from aiter_lite.utils.fast_launch import launch
from aiter_lite.utils.launch import cdiv, next_power_of_2
from aiter_lite.utils.launcher import launcher
from aiter_lite.utils.logger import debug_on, log_call
from aiter_lite.utils.registry import public_op

# why the public ops here refuse a call autograd would record (utils.registry.public_op)
_NO_GRAD = "routing: expert ids, and weights with no backward yet"

__all__ = [
    "MoeRoutingLaunchConfig",
    "biased_grouped_topk",
    "grouped_topk",
    "moe_biased_grouped_topk",
    "moe_grouped_topk",
    "moe_routing",
    "moe_routing_launch_config",
    "moe_topk_softmax",
    "topk_sigmoid",
    "topk_softmax",
]

SCORING_FUNCS = ("softmax", "sigmoid")
# A token's padded row of experts is held in registers by one program.
MAX_EXPERTS = 4096
_BIAS_DTYPES = (torch.float32, torch.float16, torch.bfloat16, torch.float64)


# ---------------------------------------------------------------------------
# launch configuration


@dataclass(frozen=True)
class MoeRoutingLaunchConfig:
    BLOCK_T: int  # tokens per program
    num_warps: int


# First choices, not yet timed on a GPU (op_benchmarks/bench_topk.py times them):
# * a warp holds whole rows, so the k arg-max rounds reduce with warp shuffles only:
#   sm_90 code for one token of 256 experts in one warp has no barrier and no shared
#   memory, where 16 tokens x 256 experts over 8 warps (rows split across warps) has 27
#   barriers. One warp per _ROW_PER_WARP padded experts (512 on NVIDIA), at most _MAX_WARPS;
# * a program holds about _TILE elements (tokens x padded experts), 16 a lane in one
#   warp: 2 tokens of 256 experts in prefill, which ptxas builds (sm_90, grouped, biased)
#   in 127 registers without spills, against 232 for 4 tokens;
# * tokens per program halve until the grid has two programs per SM: decode runs one
#   token per program.
_TILE = 512
_PER_LANE = 16
_MAX_WARPS = 8
# Triton's interpreter (CPU tensors) pays per operation, not per element: 1000 tokens of
# 512 experts took 5.8 s in programs of 8 tokens, 0.12 s in one program of 1024.
_INTERPRETER_TILE = 1 << 16


@functools.lru_cache(maxsize=1024)
def moe_routing_launch_config(n_tokens: int, row_tile: int,
                              profile: DeviceProfile = INTERPRETER) -> MoeRoutingLaunchConfig:
    """Tokens per program and warps for ``n_tokens`` rows of ``row_tile`` (padded) experts."""
    tokens = next_power_of_2(max(n_tokens, 1))
    if profile.interpreter:
        return MoeRoutingLaunchConfig(min(max(1, _INTERPRETER_TILE // row_tile), tokens), 1)
    block_t = min(max(1, _TILE // row_tile), tokens)
    want = 2 * profile.sms
    while block_t > 1 and cdiv(n_tokens, block_t) < want:
        block_t //= 2
    warps = profile.warps_for(row_tile, _PER_LANE, lo=1, hi=_MAX_WARPS)
    return MoeRoutingLaunchConfig(block_t, warps)


# ---------------------------------------------------------------------------
# argument checks


def _check_gating(op: str, x) -> int:
    """The (T, E) logits; returns E."""
    check_float_tensor(op, "gating_output", x)
    if x.dim() != 2:
        raise ValueError(f"{op}: gating_output must be 2-D (tokens, experts), got shape {tuple(x.shape)}")
    n_experts = x.shape[1]
    if not 1 <= n_experts <= MAX_EXPERTS:
        raise ValueError(f"{op}: gating_output must have 1 to {MAX_EXPERTS} experts (dim 1), "
                         f"got shape {tuple(x.shape)}")
    check_triton_device(op, "gating_output", x)
    return n_experts


def _check_bias(op: str, bias, n_experts: int, x: torch.Tensor) -> None:
    if not isinstance(bias, torch.Tensor):
        raise TypeError(f"{op}: correction_bias must be a torch.Tensor, got {type(bias).__name__}")
    if bias.dtype not in _BIAS_DTYPES:
        raise TypeError(f"{op}: correction_bias must be float32, float16, bfloat16 or float64, got {bias.dtype}")
    if tuple(bias.shape) != (n_experts,):
        raise ValueError(f"{op}: correction_bias must have shape ({n_experts},) for gating_output of shape "
                         f"{tuple(x.shape)}, got {tuple(bias.shape)}")
    check_same_device(op, "correction_bias", bias, "gating_output", x)


# ---------------------------------------------------------------------------
# launch


@launcher(mutates=("weights", "ids", "src"))
def _launch_moe_routing(x: torch.Tensor, bias: torch.Tensor | None, weights: torch.Tensor, ids: torch.Tensor,
                        src: torch.Tensor | None, num_expert_group: int, topk_group: int, sigmoid: bool,
                        renormalize: bool, scale: float, n_shared: int = 0, identity: bool = False,
                        config: MoeRoutingLaunchConfig | None = None) -> None:
    """One kernel launch over n_tokens >= 1 rows: the topk = ids.shape[1] routed experts of
    x's first E - n_shared columns into weights / ids (and src); the n_shared last columns'
    sigmoid into weights' columns topk .. topk + n_shared. ``identity``: x holds the scores
    (neither softmax nor sigmoid taken)."""
    n_tokens, n_experts = x.shape[0], x.shape[1] - n_shared
    topk = ids.shape[1]
    grouped = topk_group < num_expert_group  # keeping every group is no limit
    n_groups = num_expert_group if grouped else 1
    group_size = n_experts // n_groups
    block_g, block_s = next_power_of_2(n_groups), next_power_of_2(group_size)
    cfg = config or moe_routing_launch_config(n_tokens, block_g * block_s, device_profile(x.device))
    launch(
        _moe_routing_kernel, (cdiv(n_tokens, cfg.BLOCK_T),),
        x, bias, weights, ids, src,
        x.stride(0), x.stride(1), 0 if bias is None else bias.stride(0), weights.stride(0), ids.stride(0),
        n_tokens, n_groups, group_size, topk, topk_group, n_shared, scale,
        SIGMOID=sigmoid, HAS_BIAS=bias is not None, GROUPED=grouped, RENORMALIZE=renormalize,
        BLOCK_T=cfg.BLOCK_T, BLOCK_G=block_g, BLOCK_S=block_s, BLOCK_K=next_power_of_2(topk),
        HAS_SRC=src is not None, HAS_SHARED=n_shared > 0, BLOCK_SH=next_power_of_2(max(n_shared, 1)),
        **({"IDENTITY": True} if identity else {}), num_warps=cfg.num_warps,
    )


def _check_groups(op: str, gating_output, n_experts: int, num_expert_group, topk_group) -> int:
    """The group geometry over ``n_experts`` routed experts; returns how many experts the kept
    groups hold (topk's bound)."""
    check_int(op, "num_expert_group", num_expert_group, 1, n_experts, "(groups of experts)")
    if n_experts % num_expert_group:
        raise ValueError(f"{op}: num_expert_group ({num_expert_group}) must divide the expert count "
                         f"{n_experts} (gating_output shape {tuple(gating_output.shape)})")
    check_int(op, "topk_group", topk_group, 1, num_expert_group, "(groups kept, at most num_expert_group)")
    return topk_group * (n_experts // num_expert_group)


def _route(op: str, gating_output, topk, scoring_func, renormalize, num_expert_group, topk_group,
           correction_bias, routed_scaling_factor) -> tuple[torch.Tensor, torch.Tensor]:
    """Checks (errors name ``op``), output allocation, one launch."""
    n_experts = _check_gating(op, gating_output)
    check_choice(op, "scoring_func", scoring_func, SCORING_FUNCS)
    kept_experts = _check_groups(op, gating_output, n_experts, num_expert_group, topk_group)
    check_int(op, "topk", topk, 1, kept_experts, "(at most the expert count)" if topk_group == num_expert_group
              else f"(at most the {kept_experts} experts of the {topk_group} kept groups)")
    renormalize = check_bool(op, "renormalize", renormalize)
    scale = check_real(op, "routed_scaling_factor", routed_scaling_factor)
    if correction_bias is not None:
        _check_bias(op, correction_bias, n_experts, gating_output)
    if debug_on():
        log_call(op, gating_output=gating_output, correction_bias=correction_bias, topk=topk,
                 scoring_func=scoring_func, renormalize=renormalize, num_expert_group=num_expert_group,
                 topk_group=topk_group, routed_scaling_factor=scale)
    n_tokens = gating_output.shape[0]
    weights = torch.empty((n_tokens, topk), dtype=torch.float32, device=gating_output.device)
    ids = torch.empty((n_tokens, topk), dtype=torch.int32, device=gating_output.device)
    if n_tokens:
        _launch_moe_routing(gating_output, correction_bias, weights, ids, None, num_expert_group, topk_group,
                            scoring_func == "sigmoid", renormalize, scale)
    return weights, ids


@public_op(no_grad=_NO_GRAD)
def moe_routing(gating_output: torch.Tensor, topk: int, scoring_func: str = "softmax",
                renormalize: bool = False, num_expert_group: int = 1, topk_group: int = 1,
                correction_bias: torch.Tensor | None = None,
                routed_scaling_factor: float = 1.0) -> tuple[torch.Tensor, torch.Tensor]:
    """``(weights, ids)`` of the ``topk`` experts of each token, as the module docstring
    says; a group's score is the sum of its best two keys when ``correction_bias`` is
    given, its best key otherwise (vLLM's ``grouped_topk``)."""
    return _route("moe_routing", gating_output, topk, scoring_func, renormalize, num_expert_group, topk_group,
                  correction_bias, routed_scaling_factor)


@public_op(no_grad=_NO_GRAD)
def moe_topk_softmax(gating_output: torch.Tensor, topk: int, renormalize: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """Softmax over the experts, the ``topk`` largest, optionally renormalized to sum to 1."""
    return _route("moe_topk_softmax", gating_output, topk, "softmax", renormalize, 1, 1, None, 1.0)


@public_op(no_grad=_NO_GRAD)
def moe_grouped_topk(gating_output: torch.Tensor, topk: int, num_expert_group: int, topk_group: int,
                 renormalize: bool, scoring_func: str = "softmax",
                 routed_scaling_factor: float = 1.0) -> tuple[torch.Tensor, torch.Tensor]:
    """Group-limited routing: the ``topk_group`` groups with the best score kept, the
    ``topk`` best experts among them."""
    return _route("moe_grouped_topk", gating_output, topk, scoring_func, renormalize, num_expert_group, topk_group,
                  None, routed_scaling_factor)


@public_op(no_grad=_NO_GRAD)
def moe_biased_grouped_topk(gating_output: torch.Tensor, correction_bias: torch.Tensor, topk: int,
                        num_expert_group: int, topk_group: int, renormalize: bool,
                        routed_scaling_factor: float = 1.0) -> tuple[torch.Tensor, torch.Tensor]:
    """DeepSeek-V3 routing: sigmoid scores, selection by score + ``correction_bias``,
    weights from the unbiased scores."""
    return _route("moe_biased_grouped_topk", gating_output, topk, "sigmoid", renormalize, num_expert_group, topk_group,
                  correction_bias, routed_scaling_factor)


# ---------------------------------------------------------------------------
# aiter's calling convention: outputs preallocated by the caller (vLLM, SGLang), no return


def _check_out(op: str, name: str, t, dtype: torch.dtype, rows: int, min_cols: int, x: torch.Tensor,
               exact: bool = False, ids: str = "") -> None:
    """An output of ``rows`` x ``min_cols`` (or more columns); ``ids``: the ids' argument
    name and shape, which give topk."""
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{op}: {name} must be a torch.Tensor, got {type(t).__name__}")
    if t.dtype != dtype:
        raise TypeError(f"{op}: {name} must be {dtype}, got {t.dtype}")
    cols_ok = t.dim() == 2 and (t.shape[1] == min_cols if exact else t.shape[1] >= min_cols)
    if t.dim() != 2 or t.shape[0] != rows or not cols_ok:
        want = f"({rows}, {min_cols})" if exact else f"({rows}, >= {min_cols})"
        raise ValueError(f"{op}: {name} must be {want} for gating_output of shape {tuple(x.shape)}{ids}, "
                         f"got {tuple(t.shape)}")
    if t.shape[1] > 1 and t.stride(1) != 1:
        raise ValueError(f"{op}: {name} must have unit stride in its last dim, got strides {tuple(t.stride())}")
    check_same_device(op, name, t, "gating_output", x)


def _route_into(op: str, gating_output, topk_weights, topk_ids, token_expert_indices, scoring_func: str,
                renormalize, num_expert_group, topk_group, correction_bias, routed_scaling_factor,
                num_shared_experts: int = 0, ids_name: str = "topk_ids") -> None:
    """The checks of ``_route`` on the routed experts (``topk`` = topk_ids' columns), then
    one launch writing the caller's outputs (row strides of their own: ``[:M]`` views of
    larger buffers). ``scoring_func``: "softmax", "sigmoid" or "none" (the inputs are the
    scores)."""
    n_total = _check_gating(op, gating_output)
    check_int(op, "num_shared_experts", num_shared_experts, 0, n_total - 1, "(at most the expert count - 1)")
    n_experts = n_total - num_shared_experts
    n_tokens = gating_output.shape[0]
    if not isinstance(topk_ids, torch.Tensor):
        raise TypeError(f"{op}: {ids_name} must be a torch.Tensor, got {type(topk_ids).__name__}")
    if topk_ids.dim() != 2:
        raise ValueError(f"{op}: {ids_name} must be a 2-D (tokens, topk) int32 tensor, got shape "
                         f"{tuple(topk_ids.shape)}")
    topk = topk_ids.shape[1]
    _check_out(op, ids_name, topk_ids, torch.int32, n_tokens, topk, gating_output, exact=True)
    _check_out(op, "topk_weights", topk_weights, torch.float32, n_tokens, topk + num_shared_experts, gating_output,
               ids=f" and {ids_name} of shape {tuple(topk_ids.shape)} (topk + num_shared_experts columns)")
    if token_expert_indices is not None:
        _check_out(op, "token_expert_indices", token_expert_indices, torch.int32, n_tokens, topk, gating_output,
                   exact=True)
        if n_tokens > 1 and token_expert_indices.stride(0) != topk:
            raise ValueError(f"{op}: token_expert_indices must be contiguous, got strides "
                             f"{tuple(token_expert_indices.stride())}")
    kept_experts = _check_groups(op, gating_output, n_experts, num_expert_group, topk_group)
    if not 1 <= topk <= kept_experts:
        raise ValueError(f"{op}: {ids_name} must have 1 to {kept_experts} columns (topk, at most the experts of the "
                         f"kept groups), got {topk}")
    renormalize = check_bool(op, "need_renorm", renormalize)
    scale = check_real(op, "routed_scaling_factor", routed_scaling_factor)
    if correction_bias is not None:
        _check_bias(op, correction_bias, n_experts, gating_output)
    if n_tokens:
        _launch_moe_routing(gating_output, correction_bias, topk_weights, topk_ids, token_expert_indices,
                            num_expert_group, topk_group, scoring_func == "sigmoid", renormalize, scale,
                            num_shared_experts, scoring_func == "none")


_SHARED_SCORING = ("", "sigmoid")


@public_op(mutates=("topk_weights", "topk_indices", "token_expert_indices"), no_grad=_NO_GRAD)
def topk_softmax(topk_weights: torch.Tensor, topk_indices: torch.Tensor, token_expert_indices: torch.Tensor,
                 gating_output: torch.Tensor, need_renorm: bool, num_shared_experts: int = 0,
                 shared_expert_scoring_func: str = "") -> None:
    """aiter's ``topk_softmax`` (vLLM's 5- and 7-argument calls): softmax over the routed
    experts, the ``topk_indices.shape[1]`` largest into ``topk_weights`` (fp32) and
    ``topk_indices`` (int32), optionally renormalized over them; ``token_expert_indices``
    (int32, contiguous) gets vLLM's source rows ``j * tokens + t``. With
    ``num_shared_experts`` S and ``shared_expert_scoring_func="sigmoid"``, gating_output's
    last S columns are the shared experts' logits: routing uses the columns before them, and
    ``topk_weights[:, topk + s]`` gets ``sigmoid`` of shared expert s's logit (the ids of
    shared experts are the caller's, as with aiter). Writes its outputs, returns None."""
    op = "topk_softmax"
    shared = check_int(op, "num_shared_experts", num_shared_experts, 0)
    scoring = check_choice(op, "shared_expert_scoring_func", shared_expert_scoring_func, _SHARED_SCORING)
    if shared and scoring != "sigmoid":
        raise ValueError(f"{op}: shared_expert_scoring_func must be 'sigmoid' with num_shared_experts "
                         f"{shared}, got {scoring!r}")
    if token_expert_indices is None:
        raise TypeError(f"{op}: token_expert_indices must be a torch.Tensor, got None")
    _route_into(op, gating_output, topk_weights, topk_indices, token_expert_indices, "softmax", need_renorm, 1, 1,
                None, 1.0, shared, ids_name="topk_indices")


@public_op(mutates=("topk_weights", "topk_indices"), no_grad=_NO_GRAD)
def topk_sigmoid(topk_weights: torch.Tensor, topk_indices: torch.Tensor, gating_output: torch.Tensor) -> None:
    """aiter's ``topk_sigmoid``: the ``topk_indices.shape[1]`` experts of largest logit,
    their ``sigmoid`` as weights (not renormalized), into the caller's outputs."""
    _route_into("topk_sigmoid", gating_output, topk_weights, topk_indices, None, "sigmoid", False, 1, 1, None, 1.0,
                ids_name="topk_indices")


@public_op(mutates=("topk_weights", "topk_ids"), no_grad=_NO_GRAD)
def grouped_topk(gating_output: torch.Tensor, topk_weights: torch.Tensor, topk_ids: torch.Tensor,
                 num_expert_group: int, topk_group: int, need_renorm: bool, is_softmax: bool = True,
                 routed_scaling_factor: float = 1.0) -> None:
    """aiter's ``grouped_topk``: ``moe_grouped_topk`` (softmax, or sigmoid scores where not
    ``is_softmax``) into the caller's ``topk_weights`` / ``topk_ids``; topk is topk_ids'
    column count."""
    op = "grouped_topk"
    scoring = "softmax" if check_bool(op, "is_softmax", is_softmax) else "sigmoid"
    _route_into(op, gating_output, topk_weights, topk_ids, None, scoring, need_renorm, num_expert_group, topk_group,
                None, routed_scaling_factor)


@public_op(mutates=("topk_weights", "topk_ids"), no_grad=_NO_GRAD)
def biased_grouped_topk(gating_output: torch.Tensor, correction_bias: torch.Tensor, topk_weights: torch.Tensor,
                        topk_ids: torch.Tensor, num_expert_group: int, topk_group: int, need_renorm: bool,
                        routed_scaling_factor: float = 1.0) -> None:
    """aiter's ``biased_grouped_topk`` (DeepSeek-V3): ``moe_biased_grouped_topk`` into the
    caller's ``topk_weights`` / ``topk_ids`` (``[:M]`` views of larger buffers included);
    topk is topk_ids' column count."""
    op = "biased_grouped_topk"
    if correction_bias is None:
        raise TypeError(f"{op}: correction_bias must be a torch.Tensor, got None")
    _route_into(op, gating_output, topk_weights, topk_ids, None, "sigmoid", need_renorm, num_expert_group,
                topk_group, correction_bias, routed_scaling_factor)
