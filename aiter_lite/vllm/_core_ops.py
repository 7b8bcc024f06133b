"""vLLM's layer-norm, rotary-embedding and MoE-routing ops (``vllm._custom_ops``) on this
project's kernels: vLLM's names, argument orders, defaults and out-parameters.

* ``rms_norm(out, input, weight, epsilon)`` and ``fused_add_rms_norm(input, residual,
  weight, epsilon)`` round ``x * rstd`` to the input dtype before the weight, as vLLM's
  kernels do (``casting_mode="llama"``); fused_add_rms_norm's sum is rounded to the dtype
  before its statistics. Neither records a gradient: an input that requires one raises, as
  the out-parameter forms cannot give it.
* ``rotary_embedding`` rotates ``query`` / ``key`` in place by vLLM's ``cos_sin_cache``
  (``cat(cos, sin)`` rows of ``rot_dim``; fp32, bf16 or fp16), from channel
  ``rope_dim_offset`` of each head, backwards where ``inverse``.
* ``topk_softmax`` / ``topk_sigmoid`` write the caller's ``topk_weights`` (fp32),
  ``topk_ids`` (int32) and ``token_expert_indices`` (``j * tokens + t``); a correction bias
  steers the choice only (the weights are the unbiased scores). ``grouped_topk`` returns
  ``(weights, ids)`` as vLLM's ``_moe_C`` op, ``scoring_func`` 0 (the scores as given) or 1
  (sigmoid of the logits).
"""

from __future__ import annotations

import torch

from aiter_lite.ops.triton.moe_routing import _route_into
from aiter_lite.ops.triton.normalization.norm import _launch_norm_fwd, check_input, norm_with_add, rows_view
from aiter_lite.ops.triton.rope.rope import _sbhd_cached, _two
from aiter_lite.spec.rope import RotateStyle
from aiter_lite.utils.checks import check_bool, check_int, check_real, check_same_device
from aiter_lite.utils.fast_launch import planned

__all__ = ["rms_norm", "fused_add_rms_norm", "rotary_embedding", "topk_softmax", "topk_sigmoid", "grouped_topk"]

_FLOATS = (torch.float16, torch.bfloat16, torch.float32)


def _no_grad(op: str, **tensors) -> None:
    if torch.is_grad_enabled():
        for name, t in tensors.items():
            if isinstance(t, torch.Tensor) and t.requires_grad:
                raise RuntimeError(f"{op}: {name} requires grad, but vLLM's out-parameter form records no gradient; "
                                   f"use aiter_lite.ops.triton's differentiable op")


def _check_weight(op: str, weight, input: torch.Tensor) -> None:
    if weight is None:
        return
    if not isinstance(weight, torch.Tensor):
        raise TypeError(f"{op}: weight must be a torch.Tensor or None, got {type(weight).__name__}")
    if tuple(weight.shape) != (input.shape[-1],):
        raise ValueError(f"{op}: weight must have shape ({input.shape[-1]},) (input's last dim), got "
                         f"{tuple(weight.shape)}")
    check_same_device(op, "weight", weight, "input", input)


@planned
def rms_norm(out: torch.Tensor, input: torch.Tensor, weight: torch.Tensor | None, epsilon: float) -> None:
    """vLLM's ``rms_norm``: ``out = (x * rstd).to(dtype) * weight`` over the last dim, rstd in
    fp32; ``out`` has input's shape and dtype (any row strides)."""
    op = "rms_norm"
    check_input(op, input)
    if not isinstance(out, torch.Tensor):
        raise TypeError(f"{op}: out must be a torch.Tensor, got {type(out).__name__}")
    if out.shape != input.shape or out.dtype != input.dtype:
        raise ValueError(f"{op}: out must have input's shape {tuple(input.shape)} and dtype {input.dtype}, got "
                         f"{tuple(out.shape)} {out.dtype}")
    check_same_device(op, "out", out, "input", input)
    _check_weight(op, weight, input)
    eps = check_real(op, "epsilon", epsilon, positive=True)
    _no_grad(op, input=input, weight=weight)
    x2 = rows_view(op, "input", input, writable=False)
    y2 = rows_view(op, "out", out, writable=True)
    if x2.shape[0]:
        _launch_norm_fwd(x2, y2, weight, None, eps, True, None, None, None, 0.0, None, None, casting_mode="llama")


@planned
def fused_add_rms_norm(input: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor | None,
                       epsilon: float) -> None:
    """vLLM's ``fused_add_rms_norm``, in place: ``residual = input + residual`` (in the
    dtype); ``input = (residual * rstd).to(dtype) * weight``."""
    op = "fused_add_rms_norm"
    check_input(op, input)
    _check_weight(op, weight, input)
    eps = check_real(op, "epsilon", epsilon, positive=True)
    _no_grad(op, input=input, residual=residual, weight=weight)
    norm_with_add(op, input, input, residual, residual, weight, None, eps, is_rms=True,
                  names=("input", "residual", "residual"), casting_mode="llama")


def _heads(op: str, name: str, x, t: int, head_size: int) -> torch.Tensor:
    """``x`` ([..., heads * head_size] or [..., heads, head_size], its leading dims the
    positions') as a (t, heads, head_size) view: no copy, written in place."""
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{op}: {name} must be a torch.Tensor, got {type(x).__name__}")
    if x.dtype not in _FLOATS:
        raise TypeError(f"{op}: {name} must be float16, bfloat16 or float32, got {x.dtype}")
    if x.dim() < 2 or x.shape[-1] % head_size or (t and x.numel() % (t * head_size)) or (not t and x.numel()):
        raise ValueError(f"{op}: {name} must be [num_tokens, num_heads * {head_size}] or [num_tokens, num_heads, "
                         f"{head_size}] with the positions' {t} tokens (head_size {head_size}), got shape "
                         f"{tuple(x.shape)}")
    if t == 0:
        return x.reshape(0, 1, head_size) if x.dim() else x
    if x.stride(-1) != 1:
        raise ValueError(f"{op}: {name} must have unit stride in the last dim, got strides {tuple(x.stride())}")
    try:
        return x.view(t, -1, head_size)
    except RuntimeError:
        raise ValueError(f"{op}: {name} of shape {tuple(x.shape)} and strides {tuple(x.stride())} cannot be viewed "
                         f"as (tokens, heads, {head_size}) without a copy (it is rotated in place)") from None


@planned
def rotary_embedding(positions: torch.Tensor, query: torch.Tensor, key: torch.Tensor | None, head_size: int,
                     cos_sin_cache: torch.Tensor, is_neox: bool, rope_dim_offset: int = 0,
                     inverse: bool = False) -> None:
    """vLLM's ``rotary_embedding``: query (and key) rotated in place at ``positions`` (any
    shape; query's leading dims match it), channels ``rope_dim_offset .. + rot_dim`` of each
    head, rot_dim = cos_sin_cache.shape[1]; NeoX halves or GPT-J pairs; ``inverse`` turns the
    other way (undoes a rotation)."""
    op = "rotary_embedding"
    if not isinstance(positions, torch.Tensor) or positions.dtype not in (torch.int32, torch.int64):
        raise TypeError(f"{op}: positions must be an int32 or int64 tensor, got "
                        f"{positions.dtype if isinstance(positions, torch.Tensor) else type(positions).__name__}")
    head_size = check_int(op, "head_size", head_size, 1)
    offset = check_int(op, "rope_dim_offset", rope_dim_offset, 0)
    is_neox = check_bool(op, "is_neox", is_neox)
    inverse = check_bool(op, "inverse", inverse)
    if not isinstance(cos_sin_cache, torch.Tensor) or cos_sin_cache.dtype not in _FLOATS:
        raise TypeError(f"{op}: cos_sin_cache must be a float16, bfloat16 or float32 tensor, got "
                        f"{cos_sin_cache.dtype if isinstance(cos_sin_cache, torch.Tensor) else type(cos_sin_cache)}")
    if cos_sin_cache.dim() != 2 or cos_sin_cache.shape[1] % 2 or cos_sin_cache.shape[1] == 0:
        raise ValueError(f"{op}: cos_sin_cache must be (max_position, rot_dim) with rot_dim even (cat(cos, sin)), "
                         f"got shape {tuple(cos_sin_cache.shape)}")
    rot = cos_sin_cache.shape[1]
    if offset + rot > head_size:
        raise ValueError(f"{op}: rope_dim_offset + rot_dim must be at most head_size {head_size}, got {offset} + "
                         f"{rot}")
    t = positions.numel()
    q = _heads(op, "query", query, t, head_size)
    k = None if key is None else _heads(op, "key", key, t, head_size)
    for name, x in (("query", query), ("key", key), ("cos_sin_cache", cos_sin_cache)):
        if x is not None:
            check_same_device(op, name, x, "positions", positions)
    if k is not None and k.dtype != q.dtype:
        raise TypeError(f"{op}: key must have query's dtype {q.dtype}, got {k.dtype}")
    _no_grad(op, query=query, key=key)
    if t == 0:
        return
    cos, sin = cos_sin_cache[:, :rot // 2], cos_sin_cache[:, rot // 2:]
    style = RotateStyle.NEOX if is_neox else RotateStyle.GPTJ
    pos = positions.reshape(t)
    q = q[..., offset:]
    if k is None:
        _sbhd_cached(op, q.unsqueeze(1), cos, sin, pos.view(t, 1), None, style, True, False, False, inplace=True,
                     backward=inverse, has_positions=True)
    else:
        _two(op, q, k[..., offset:], cos, sin, pos, None, style, True, False, False, inplace=True, backward=inverse)


def _bias(op: str, name: str, bias, gating_output) -> None:
    if bias is None:
        return
    if not isinstance(bias, torch.Tensor) or not bias.dtype.is_floating_point:
        raise TypeError(f"{op}: {name} must be a float tensor or None, got "
                        f"{bias.dtype if isinstance(bias, torch.Tensor) else type(bias).__name__}")
    if isinstance(gating_output, torch.Tensor) and gating_output.dim() == 2 \
            and tuple(bias.shape) != (gating_output.shape[1],):
        raise ValueError(f"{op}: {name} must have shape ({gating_output.shape[1]},) (one per expert), got "
                         f"{tuple(bias.shape)}")


def _padding(op: str, is_padding) -> None:
    if is_padding is not None:
        raise ValueError(f"{op}: is_padding is not supported (pass None); route only the real tokens' rows")


def _topk_into(op: str, scoring: str, topk_weights, topk_ids, token_expert_indices, gating_output, renormalize,
               e_score_correction_bias, routed_scaling_factor, is_padding) -> None:
    """topk_softmax's and topk_sigmoid's checks under the caller's names, then the routing launch."""
    renormalize = check_bool(op, "renormalize", renormalize)
    _bias(op, "e_score_correction_bias", e_score_correction_bias, gating_output)
    _padding(op, is_padding)
    if token_expert_indices is None:
        raise TypeError(f"{op}: token_expert_indices must be a torch.Tensor, got None")
    _route_into(op, gating_output, topk_weights, topk_ids, token_expert_indices, scoring, renormalize, 1, 1,
                e_score_correction_bias, routed_scaling_factor)


@planned
def topk_softmax(topk_weights: torch.Tensor, topk_ids: torch.Tensor, token_expert_indices: torch.Tensor,
                 gating_output: torch.Tensor, renormalize: bool = False,
                 e_score_correction_bias: torch.Tensor | None = None, is_padding: torch.Tensor | None = None) -> None:
    """vLLM's ``topk_softmax``: softmax over the experts, the ``topk_ids.shape[1]`` best (by
    softmax + bias where a bias is given) into the caller's outputs, their softmax weights
    renormalized over the chosen where ``renormalize``."""
    _topk_into("topk_softmax", "softmax", topk_weights, topk_ids, token_expert_indices, gating_output, renormalize,
               e_score_correction_bias, 1.0, is_padding)


@planned
def topk_sigmoid(topk_weights: torch.Tensor, topk_ids: torch.Tensor, token_expert_indices: torch.Tensor,
                 gating_output: torch.Tensor, renormalize: bool = False,
                 e_score_correction_bias: torch.Tensor | None = None, routed_scaling_factor: float = 1.0,
                 is_padding: torch.Tensor | None = None) -> None:
    """vLLM's ``topk_sigmoid``: as ``topk_softmax`` with ``sigmoid`` scores, the weights times
    ``routed_scaling_factor``."""
    _topk_into("topk_sigmoid", "sigmoid", topk_weights, topk_ids, token_expert_indices, gating_output, renormalize,
               e_score_correction_bias, routed_scaling_factor, is_padding)


@planned
def grouped_topk(scores: torch.Tensor, num_expert_group: int, topk_group: int, topk: int, renormalize: bool,
                 routed_scaling_factor: float, bias: torch.Tensor, scoring_func: int = 0) -> tuple:
    """vLLM's ``_moe_C.grouped_topk``: (weights fp32, ids int32), each (tokens, topk). Scores
    are ``scores`` (scoring_func 0) or their sigmoid (1); the choice adds ``bias`` (groups
    ranked by their two best biased scores, the ``topk_group`` best kept); the weights are
    the unbiased scores, renormalized where asked, times ``routed_scaling_factor``."""
    op = "grouped_topk"
    if not isinstance(scores, torch.Tensor) or scores.dim() != 2:
        raise TypeError(f"{op}: scores must be a 2-D (tokens, experts) tensor, got "
                        f"{tuple(scores.shape) if isinstance(scores, torch.Tensor) else type(scores).__name__}")
    topk = check_int(op, "topk", topk, 1)
    renormalize = check_bool(op, "renormalize", renormalize)
    if isinstance(scoring_func, bool) or scoring_func not in (0, 1):
        raise ValueError(f"{op}: scoring_func must be 0 (the scores as given) or 1 (sigmoid), got {scoring_func!r}")
    _bias(op, "bias", bias, scores)
    weights = torch.empty((scores.shape[0], topk), dtype=torch.float32, device=scores.device)
    ids = torch.empty((scores.shape[0], topk), dtype=torch.int32, device=scores.device)
    _route_into(op, scores, weights, ids, None, "sigmoid" if scoring_func else "none", renormalize,
                num_expert_group, topk_group, bias, routed_scaling_factor)
    return weights, ids
