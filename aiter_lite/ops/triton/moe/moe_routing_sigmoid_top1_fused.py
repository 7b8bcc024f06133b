"""aiter's ``routing_sigmoid_top1`` (``aiter.ops.triton.moe.moe_routing_sigmoid_top1_fused``):
Llama 4's top-1 MoE routing from the hidden states, the router GEMM fused with the
sigmoid and the arg-max, one launch.

``routing_sigmoid_top1(x, w, topk, fused_shared_experts=False, config=None)``: ``x`` (...,
K) hidden states (flattened to M = x.numel() / K tokens, as aiter does), ``w`` (K, N) the
router weight (x's dtype: fp32, fp16 or bf16; any strides), ``topk`` 1. Returns
``(topk_ids, topk_weights)``, int32 and fp32, (M, 1), or (M, 2) with
``fused_shared_experts``: the shared expert's id N with weight 1.0 in the second column.

Per token (``aiter_lite.ops.native.moe.moe_routing_sigmoid_top1_fused`` is the same in
plain torch): the logits ``x @ w`` accumulated in fp32 (fp32 inputs multiplied in full
fp32, never TF32), the expert of the largest logit, its weight ``sigmoid(logit)``. Ties go
to the lowest expert index (aiter's ``tie_break_left``, torch.argmax's first maximum). A
NaN logit ranks above every number (torch's order, as the project's other routing ops):
the token gets the first NaN expert and a NaN weight; other tokens are unaffected.

Where aiter is wrong or limited, this does better (each has a test):

* selection is on the fp32 logits, not their sigmoids. aiter takes the arg-max of
  ``sigmoid(logits)``, where every logit above about 16.6 rounds to 1.0, so such logits tie
  and the lowest of those experts wins even where a later one's logit is larger; the two
  agree wherever the sigmoids differ. Llama 4's reference router ranks logits too (top-k
  of the router logits, then the sigmoid);
* ``config`` is honoured: aiter's wrapper overwrites it with its tuned table. Its keys are
  aiter's (``BLOCK_M``, ``BLOCK_K``, ``num_warps``, ``num_stages``, and the AMD options
  ``waves_per_eu``, ``kpack``, passed on ROCm only; ``kpack`` on gfx942 only, where it is
  not deprecated); an unknown key or an invalid value raises a ValueError. A
  :class:`RoutingSigmoidTop1LaunchConfig` pins one too;
* any number of experts up to :data:`MAX_EXPERTS` (aiter: a power of 2, ``BLOCK_N = N``);
  tokens past M are never written (aiter stores BLOCK_M rows unmasked, past the end of its
  outputs when M is not a multiple of BLOCK_M); x of any rank and strides, w of any
  strides; M = 0; a ``TypeError`` / ``ValueError`` naming the op and argument where aiter
  asserts.

No gradient (the ids have none; aiter's weights have none either): a call autograd would
record raises.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, replace
from typing import Any

import torch

from aiter_lite.ops.triton._triton_kernels.moe.moe_routing_sigmoid_top1_fused import _routing_sigmoid_top1_kernel
from aiter_lite.spec.device import INTERPRETER, DeviceProfile, device_profile
from aiter_lite.utils.checks import (
    TRITON_INTERPRET,
    check_bool,
    check_float_tensor,
    check_int,
    check_same_device,
    check_triton_device,
    rows_view,
)
from aiter_lite.utils.fast_launch import launch
from aiter_lite.utils.launch import cdiv, next_power_of_2, stream_buffer
from aiter_lite.utils.launcher import launcher
from aiter_lite.utils.logger import debug_on, log_call
from aiter_lite.utils.registry import public_op

__all__ = ["RoutingSigmoidTop1LaunchConfig", "routing_sigmoid_top1", "routing_sigmoid_top1_launch_config"]

_NO_GRAD = "routing: expert ids, and weights with no backward (aiter's have none)"
# A program holds every expert's logit of its tokens (BLOCK_M x BLOCK_N fp32 accumulators) and
# a (BLOCK_K >= 16) x BLOCK_N slice of w: 512 fp32 experts fill 32 KB of MI300X's 64 KB LDS.
MAX_EXPERTS = 512
_W_TILE_BYTES = 32768  # one w slice (BLOCK_K x BLOCK_N) a step: half of MI300X's 64 KB LDS


@dataclass(frozen=True)
class RoutingSigmoidTop1LaunchConfig:
    BLOCK_M: int  # tokens per program (>= 16: tl.dot's smallest tile)
    BLOCK_K: int  # hidden-dim slice per step
    num_warps: int
    num_stages: int
    waves_per_eu: int = 0  # AMD: occupancy hint (0: the compiler's)
    kpack: int = 1  # AMD gfx942: MFMA operand packing
    SPLIT_K: int = 1  # programs sharing a token block's hidden dim (few tokens: the GEMV spread over the GPU)


_LIMITS = {"BLOCK_M": (16, 256), "BLOCK_K": (16, 1024), "num_warps": (1, 16), "num_stages": (1, 4),
           "waves_per_eu": (0, 8), "kpack": (1, 2), "SPLIT_K": (1, 256)}
_POW2 = ("BLOCK_M", "BLOCK_K", "num_warps")


# AMD: aiter's tuned tables (configs/moe/gfx942- and gfx950-MOE_ROUTING_SIGMOID_TOPK1.json): 16
# tokens a program in 256-wide hidden slices, 4 warps, 2 stages for up to 16 experts (32 tokens
# in 128-wide slices, 8 warps from 8192 tokens), 8 warps, 1 stage beyond. The slice is narrowed
# so that a w slice stays within _W_TILE_BYTES (128 bf16 experts: 128 wide). aiter's 32-token
# tile for more than 16 experts spills on gfx942 (43 B of SGPRs at 8192 x 128 in bf16, 159
# VGPRs, scripts/check_targets.py): those keep 16 tokens a program. fp32 inputs take half the
# slice (the same bytes a stage as aiter's bf16): 256 wide spilled on gfx950 (4 B of SGPRs, 16 x
# 16 experts).
# NVIDIA, measured on the H100 (hidden 5120, 16 and 128 bf16 experts, CUDA graphs, sweeps of
# 24-90 tiles a shape). From 4096 tokens, whole hidden dims: 64 tokens x 64-wide slices, 4
# warps, 4 stages for up to 16 experts (22.7 / 60.3 us at 4096 / 16384 tokens); for more, 32 x
# 64 on 3 stages below 8192 tokens (37.4 us at 4096), 64 x 32 on 4 from there (78.5 us at 16384;
# aiter's AMD tile: 240). Fewer tokens leave most SMs idle, so the hidden dim is split (partial
# logits summed by each block's last program): up to 512 tokens 16-token blocks over up to two
# programs an SM (128 experts: 7.6-8.1 us from 1 to 128 tokens, 8.7 at 256, against 42-44
# unsplit); then 32 tokens (64 for up to 16 experts or from 2048 tokens) in up to 8 splits
# filling the SMs once (128 experts: 12.0 us at 1024, 15.7 at 2048; unsplit 22.7, 24.6);
# 128-wide slices (bf16; fp32 64), 4 warps.
# Other GPUs: aiter's tables, split alike for up to 4 token blocks an SM.
_SPLIT_MAX = 8  # splits from 512 tokens


@functools.lru_cache(maxsize=1024)
def routing_sigmoid_top1_launch_config(n_tokens: int, n_experts: int, elem_size: int,
                                       profile: DeviceProfile = INTERPRETER,
                                       hidden: int = 0) -> RoutingSigmoidTop1LaunchConfig:
    """The launch config of ``n_tokens`` tokens routed over ``n_experts`` experts, inputs of
    ``elem_size`` bytes, a hidden dim of ``hidden`` (0: unknown, no split)."""
    block_k = max(16, min(256 // elem_size, _W_TILE_BYTES // (_block_n(n_experts) * elem_size)))
    if profile.backend == "cuda" and n_tokens < 4096:
        if n_tokens <= 512:
            block_m, stages, programs = 16, 3, 2 * profile.sms
        else:
            block_m, stages, programs = 64 if n_experts <= 16 or n_tokens >= 2048 else 32, 4, profile.sms
        block_m = min(block_m, max(16, _MAX_ACC // _block_n(n_experts)))
        blocks = cdiv(n_tokens, block_m)
        split = min(cdiv(programs, blocks), cdiv(hidden, 2 * block_k), _SPLIT_MAX if n_tokens > 512 else hidden)
        return RoutingSigmoidTop1LaunchConfig(block_m, block_k, _acc_warps(block_m, n_experts), stages,
                                              SPLIT_K=max(split, 1))
    if profile.backend == "cuda":
        if n_experts <= 16:
            block_m, block_k, warps, stages = 64, 64, 4, 4
        else:
            block_m, block_k, warps, stages = (32, 64, 4, 3) if n_tokens < 8192 else (64, 32, 4, 4)
        block_m = min(block_m, max(16, _MAX_ACC // _block_n(n_experts)))
        return RoutingSigmoidTop1LaunchConfig(block_m, max(16, block_k * 2 // elem_size),
                                              max(warps, _acc_warps(block_m, n_experts)), stages)
    row_blocks = cdiv(n_tokens, 16)
    if hidden > 2 * block_k and 4 * row_blocks <= profile.sms:
        split = min(cdiv(hidden, 2 * block_k), max(cdiv(2 * profile.sms, row_blocks), 1))
        return RoutingSigmoidTop1LaunchConfig(16, block_k, 4, 2, SPLIT_K=split)
    if n_experts <= 16:
        block_m, block_k, warps, stages, waves = (32, 128, 8, 2, 2) if n_tokens >= 8192 else (16, 256, 4, 2, 3)
    else:
        block_m, block_k, warps, stages, waves = 16, 256, 8, 1, 2 if n_tokens >= 4096 else 0
    kpack = 2 if n_tokens >= (4096 if n_experts <= 16 else 2048) else 1
    block_k = max(16, min(block_k * 2 // elem_size, _W_TILE_BYTES // (_block_n(n_experts) * elem_size)))
    return RoutingSigmoidTop1LaunchConfig(block_m, block_k, min(warps, profile.max_warps), stages, waves, kpack)


_MAX_ACC = 16384  # NVIDIA: fp32 accumulators a program (tokens x padded experts); 64 x 512 on 8 warps spills


def _acc_warps(block_m: int, n_experts: int) -> int:
    """NVIDIA: 4 warps up to 64 fp32 accumulators a lane, 8 past (a 64 x 256 or 32 x 512
    accumulator on 4 warps spills on sm_90)."""
    return 4 if block_m * _block_n(n_experts) <= 8192 else 8


def _block_n(n_experts: int) -> int:
    return max(16, next_power_of_2(n_experts))


def _config(op: str, config, default: RoutingSigmoidTop1LaunchConfig,
            profile: DeviceProfile) -> RoutingSigmoidTop1LaunchConfig | None:
    """aiter's config dict (the keys it names over ``default``, the choice for this call) or a
    pinned config, checked; None for None."""
    if config is None:
        return None
    if isinstance(config, dict):
        unknown = sorted(repr(k) for k in config if k not in _LIMITS)
        if unknown:
            raise ValueError(f"{op}: config has unknown keys {', '.join(unknown)}; it takes {', '.join(_LIMITS)}")
        cfg = replace(default, **config)
    elif isinstance(config, RoutingSigmoidTop1LaunchConfig):
        cfg = config
    else:
        raise TypeError(f"{op}: config must be a dict of aiter's launch parameters or None, got "
                        f"{type(config).__name__}")
    for name, (lo, hi) in _LIMITS.items():
        value = getattr(cfg, name)
        if isinstance(value, bool) or not isinstance(value, int):
            raise ValueError(f"{op}: config's {name} must be an int, got {type(value).__name__} {value!r}")
        if not lo <= value <= hi or (name in _POW2 and value & (value - 1)):
            kind = "a power of 2 in" if name in _POW2 else "in"
            raise ValueError(f"{op}: config's {name} must be {kind} [{lo}, {hi}], got {value}")
    if cfg.num_warps > profile.max_warps:
        raise ValueError(f"{op}: config's num_warps must be at most {profile.max_warps} on {profile.name}, "
                         f"got {cfg.num_warps}")
    return cfg


def _max_offset(*tensors: torch.Tensor) -> int:
    """The largest element offset of any of ``tensors`` from its first element."""
    return max(sum((n - 1) * abs(st) for n, st in zip(t.shape, t.stride()) if n) for t in tensors)


@launcher(mutates=("ids", "weights"))
def _launch_routing_sigmoid_top1(x: torch.Tensor, w: torch.Tensor, ids: torch.Tensor, weights: torch.Tensor,
                                 shared: bool, config: RoutingSigmoidTop1LaunchConfig | None = None) -> None:
    """Route the rows of x (M, K) over the columns of w (K, N) into ids / weights (M, 1 + shared)."""
    n_tokens, hidden = x.shape
    n_experts = w.shape[1]
    if n_tokens == 0:
        return
    profile = device_profile(x.device)
    cfg = config or routing_sigmoid_top1_launch_config(n_tokens, n_experts, x.element_size(), profile, hidden)
    amd = {}
    if profile.backend == "hip":
        amd["waves_per_eu"] = cfg.waves_per_eu
        if profile.arch != "gfx950":  # deprecated there (Triton overrides it to 1, with a warning)
            amd["kpack"] = cfg.kpack
    row_blocks, block_n = cdiv(n_tokens, cfg.BLOCK_M), _block_n(n_experts)
    # whole BLOCK_K steps a split, and no split left empty
    k_split = cdiv(cdiv(hidden, cfg.SPLIT_K), cfg.BLOCK_K) * cfg.BLOCK_K if hidden else 0
    splits = cdiv(hidden, k_split) if k_split else 1
    if splits > 1:
        parts = stream_buffer("routing_top1_parts", row_blocks * splits * cfg.BLOCK_M * block_n, torch.float32,
                              x.device, zeroed=False)
        tickets = stream_buffer("routing_top1_tickets", row_blocks, torch.int32, x.device, zeroed=True)
    else:
        parts, tickets = weights, ids  # not read
    launch(
        _routing_sigmoid_top1_kernel, (row_blocks, splits),
        x, w, ids, weights, parts, tickets, *x.stride(), *w.stride(), ids.stride(0), weights.stride(0), n_tokens,
        n_experts, hidden, k_split,
        SHARED=shared, INT64=_max_offset(x, w) >= 2**31, DOT_FP32=TRITON_INTERPRET and x.dtype == torch.bfloat16,
        SPLIT_K=splits, BLOCK_M=cfg.BLOCK_M, BLOCK_N=block_n,
        BLOCK_K=cfg.BLOCK_K, num_warps=cfg.num_warps, num_stages=cfg.num_stages, **amd,
    )


@public_op(no_grad=_NO_GRAD)
def routing_sigmoid_top1(x: torch.Tensor, w: torch.Tensor, topk: int, fused_shared_experts: bool = False,
                         config: dict[str, Any] | RoutingSigmoidTop1LaunchConfig | None = None
                         ) -> tuple[torch.Tensor, torch.Tensor]:
    """Top-1 routing of the tokens of x over the experts of w (module doc): ``(topk_ids,
    topk_weights)``, int32 and fp32, (M, 1), or (M, 2) with ``fused_shared_experts``.
    ``config``: aiter's launch config dict (or a pinned config), None to choose one."""
    op = "routing_sigmoid_top1"
    check_float_tensor(op, "x", x)
    check_float_tensor(op, "w", w)
    if x.dim() == 0:
        raise ValueError(f"{op}: x must have at least 1 dim (..., hidden), got a 0-dim tensor")
    check_triton_device(op, "x", x)
    check_same_device(op, "w", w, "x", x)
    if w.dim() != 2:
        raise ValueError(f"{op}: w must be 2-D (hidden, experts), got shape {tuple(w.shape)}")
    if w.dtype != x.dtype:
        raise TypeError(f"{op}: w must have x's dtype {x.dtype}, got {w.dtype}")
    hidden, n_experts = w.shape
    if x.shape[-1] != hidden:
        raise ValueError(f"{op}: x's last dim must be w's first (hidden = {hidden}), got x of shape "
                         f"{tuple(x.shape)} for w of shape {tuple(w.shape)}")
    if not 1 <= n_experts <= MAX_EXPERTS:
        raise ValueError(f"{op}: w must have 1 to {MAX_EXPERTS} experts (columns), got shape {tuple(w.shape)}")
    check_int(op, "topk", topk, 1, 1, "(top-1 routing)")
    shared = check_bool(op, "fused_shared_experts", fused_shared_experts)
    n_tokens = math.prod(x.shape[:-1])
    profile = device_profile(x.device)
    cfg = None if config is None else _config(
        op, config, routing_sigmoid_top1_launch_config(n_tokens, n_experts, x.element_size(), profile, hidden),
        profile)
    if debug_on():
        log_call(op, x=x, w=w, topk=topk, fused_shared_experts=shared, config=cfg)
    ids = torch.empty((n_tokens, 1 + shared), dtype=torch.int32, device=x.device)
    weights = torch.empty((n_tokens, 1 + shared), dtype=torch.float32, device=x.device)
    if n_tokens:
        x2 = x if x.dim() == 2 else x.reshape(n_tokens, hidden) if x.dim() == 1 or hidden == 0 else \
            rows_view(op, "x", x, writable=False)
        _launch_routing_sigmoid_top1(x2, w, ids, weights, shared, cfg)
    return ids, weights
