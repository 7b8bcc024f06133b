"""A fused QKV projection split, per-head RMSNorm of Q and K, RoPE and the paged KV-cache
write in one launch (aiter's ``fused_qkv_split_qk_norm_rope_cache``, its name, argument
order and return value; vLLM's Triton qk-norm + RoPE + KV-cache fusion calls it for
Qwen3-Next / Qwen3.5 with the attention-output gate).

As aiter's, the norm's weight is an offset: ``x * rstd * (1 + w)`` (Gemma / Qwen3-Next
style; zero weights normalize without a weight), the normalized value rounded to qkv's
dtype before RoPE. Where aiter is limited this does more, and checks it:

* any even head dim (aiter: powers of two), any block size, fp16 / fp32 / fp8 caches;
* every argument checked, with a clear error (aiter: asserts);
* RoPE in fp32 with one rounding (aiter: the products in the input's dtype); a position
  outside the table gives NaN in that token's rotated channels (aiter: reads past it);
* fp8 caches saturate, scaled by ``x * (1 / scale)`` as the quant ops (aiter: inf);
* ``slot_mapping`` may be shorter than the tokens (CUDA-graph padding writes nothing).
"""

from __future__ import annotations

import functools

import torch
import triton

from aiter_lite.ops.triton._triton_kernels.fusions.fused_qkv_split_qk_norm_rope_cache import (
    _qkv_norm_rope_cache_kernel,
)
from aiter_lite.ops.triton.fusions._common import (
    block_shift,
    CACHE_DTYPES,
    check_out_dtype,
    check_rope_and_slots,
    check_scale,
    check_slots,
    fp8_range,
    max_offset,
    soft_round,
)
from aiter_lite.ops.triton.fusions.fused_qkv_split_qk_rope import head_counts, qkv_rope_tables
from aiter_lite.ops.triton.normalization.norm import check_eps
from aiter_lite.ops.triton.rope.rope import RopeLaunchConfig, rope_launch_config
from aiter_lite.spec.device import device_profile
from aiter_lite.utils.checks import (
    check_bool,
    check_choice,
    check_float_tensor,
    check_int,
    check_same_device,
    check_triton_device,
    check_unit_last_stride,
)
from aiter_lite.utils.fast_launch import launch
from aiter_lite.utils.launch import cdiv, halve_until_filled, next_power_of_2
from aiter_lite.utils.launcher import launcher
from aiter_lite.utils.logger import debug_on, log_call
from aiter_lite.utils.registry import public_op

__all__ = ["fused_qkv_split_qk_norm_rope_cache", "infer_rope_cache_triton_block_t"]


def infer_rope_cache_triton_block_t(T: int, device: torch.device) -> int:
    """aiter's token tile for ``fused_qkv_split_qk_norm_rope_cache``:
    ``next_power_of_2(ceil(T / (2 * SMs)))``, capped at 32 (this project's launch picks its
    own tiles, the RoPE kernels'; the function stays for code that calls it)."""
    op = "infer_rope_cache_triton_block_t"
    T = check_int(op, "T", T, 0)
    device = torch.device(device)
    if device.type != "cuda":
        raise ValueError(f"{op}: device must be a CUDA / HIP device, got {device}")
    sms = torch.cuda.get_device_properties(device.index if device.index is not None
                                           else torch.cuda.current_device()).multi_processor_count
    return max(1, min(triton.next_power_of_2(cdiv(T, 2 * max(sms, 1))), 32))


@functools.lru_cache(maxsize=1024)  # host work of every unplanned launch, as rope_launch_config's
def _kv_tile(n_tokens: int, kvh: int, cfg: RopeLaunchConfig, profile) -> tuple[int, int]:
    """Heads and tokens of a K / V program: the KV heads (up to BLOCK_H) and BLOCK_T tokens
    times the heads they leave of a Q tile, halved (down to BLOCK_T) until the KV programs
    alone number two an SM.

    Measured on an H200 (16 / 2 heads of 256, bf16, flash cache): a K / V program of 8 head
    slots held 2 heads, a quarter of its lanes working; 4 tokens x 2 heads took T = 16384
    from 183.3 to 172.8 us (83.3 -> 88.4% of copy), 65536 from 720.7 to 678.5, and 32 / 8
    heads of 128 (8 of 16 slots) from 189.5 to 183.8. At decode (T = 1 / 16, graphs) 4 tokens
    x 2 heads cost 0.4 us, hence the halving, and 1 token x 2 heads on 4 warps 0.35 us (each
    head's sum of squares across two warps), hence Q's tile where the KV tile would hold
    fewer token-heads than warps."""
    block_hk = min(cfg.BLOCK_H, next_power_of_2(kvh))
    block_tk = cfg.BLOCK_T * (cfg.BLOCK_H // block_hk)
    block_tk = halve_until_filled(block_tk, lambda t: cdiv(n_tokens, t) * cdiv(kvh, block_hk), profile, cfg.BLOCK_T)
    if block_tk * block_hk < cfg.num_warps:  # a head's reduction would span warps (shared memory): Q's tile
        return cfg.BLOCK_H, cfg.BLOCK_T
    return block_hk, block_tk


@launcher(mutates=("q", "gate", "k", "v", "key_cache", "value_cache"))
def _launch_qkv_norm_rope_cache(qkv: torch.Tensor, q_weight: torch.Tensor, k_weight: torch.Tensor,
                                q: torch.Tensor, gate: torch.Tensor | None, k: torch.Tensor, v: torch.Tensor,
                                key_cache: torch.Tensor, value_cache: torch.Tensor, slot_mapping: torch.Tensor,
                                pos: torch.Tensor, off: torch.Tensor | None, cos: torch.Tensor, sin: torch.Tensor,
                                k_scale: torch.Tensor | None, v_scale: torch.Tensor | None, geometry: list[int],
                                eps: float, flags: list[bool], config: RopeLaunchConfig | None = None) -> None:
    """qkv's rows split into q (+ gate), k, v, q and k normalized and rotated, k and v into
    the caches. ``geometry``: table rows and strides, HALF, the Q head stride and gate
    offset in qkv's row, the cache's slots and block size, then each cache's (block,
    offset, head, channel) strides. Tiles as the RoPE + KV-cache kernel's (``rope_launch_config``)."""
    n_rows, stride_r, stride_f, half, sq_h, gate_off, n_cache_slots, block_size, *strides = geometry
    is_neox, reuse = flags
    n_tokens, qh, d = q.shape
    kvh = k.shape[1]
    if n_tokens == 0:
        return
    profile = device_profile(q.device)
    cfg = config or rope_launch_config(n_tokens, qh, kvh, d, profile)
    rest = d - 2 * half
    block_hk, block_tk = _kv_tile(n_tokens, kvh, cfg, profile)
    grid = (cdiv(n_tokens, block_tk) * ((block_tk // cfg.BLOCK_T) * cdiv(qh, cfg.BLOCK_H) + cdiv(kvh, block_hk)),)
    c_min, c_max = fp8_range(key_cache.dtype)
    launch(
        _qkv_norm_rope_cache_kernel, grid,
        qkv, q_weight, k_weight, q, q if gate is None else gate, k, v, key_cache, value_cache, slot_mapping,
        pos, pos if off is None else off, cos, sin, key_cache if k_scale is None else k_scale,
        key_cache if v_scale is None else v_scale, qkv.stride(0), sq_h, gate_off,
        qh * d * (2 if gate is not None else 1), *strides, stride_r, stride_f,
        n_tokens, slot_mapping.shape[0], n_cache_slots, block_size, n_rows, qh, kvh, d, eps, c_min, c_max,
        HAS_OFFSETS=off is not None, IS_NEOX=is_neox, REUSE=reuse, GATED=gate is not None,
        HAS_K_SCALE=k_scale is not None, HAS_V_SCALE=v_scale is not None,
        K_FP8=key_cache.dtype.itemsize == 1, V_FP8=value_cache.dtype.itemsize == 1,
        SOFT_ROUND=soft_round(key_cache.dtype), HALF=half, BLOCK_HALF=next_power_of_2(half),
        BLOCK_REST=next_power_of_2(rest) if rest > 0 else 0, BLOCK_D=next_power_of_2(d), BLOCK_T=cfg.BLOCK_T,
        BLOCK_H=cfg.BLOCK_H, BLOCK_TK=block_tk, BLOCK_HK=block_hk,
        INT64=max(max_offset(qkv, q, gate, k, v), n_tokens * qh * d) >= 2**31,
        num_warps=cfg.num_warps, **block_shift(block_size),
    )


def _check_weight(op: str, name: str, w, head_dim: int, qkv: torch.Tensor) -> torch.Tensor:
    check_float_tensor(op, name, w)
    check_same_device(op, name, w, "qkv", qkv)
    if tuple(w.shape) != (head_dim,):
        raise ValueError(f"{op}: {name} must be (head_dim,) = ({head_dim},), got shape {tuple(w.shape)}")
    return w.contiguous()


def _check_caches(op: str, key_cache, value_cache, layout: str, kvh: int, head_dim: int,
                  qkv: torch.Tensor) -> tuple[int, int, list[int]]:
    """(cache slots, block size, each cache's (block, offset, head, channel) strides)."""
    for name, c in (("key_cache", key_cache), ("value_cache", value_cache)):
        if not isinstance(c, torch.Tensor):
            raise TypeError(f"{op}: {name} must be a torch.Tensor, got {type(c).__name__}")
        check_same_device(op, name, c, "qkv", qkv)
        check_out_dtype(op, name, c.dtype, c.device, CACHE_DTYPES)
        if c.dim() != 4:
            raise ValueError(f"{op}: {name} must be 4-D ({'[num_blocks, kvh, block_size, head_dim]' if layout == 'HND' else '[num_blocks, block_size, kvh, head_dim]'} "
                             f"for kv_cache_layout={layout!r}), got shape {tuple(c.shape)}")
    if tuple(value_cache.shape) != tuple(key_cache.shape) or value_cache.dtype != key_cache.dtype:
        raise ValueError(f"{op}: value_cache must have key_cache's shape {tuple(key_cache.shape)} and dtype "
                         f"{key_cache.dtype}, got {tuple(value_cache.shape)} {value_cache.dtype}")
    nb, a, b, d = key_cache.shape
    heads, block_size = (a, b) if layout == "HND" else (b, a)
    if heads != kvh or d != head_dim:
        want = f"[num_blocks, {kvh}, block_size, {head_dim}]" if layout == "HND" else \
            f"[num_blocks, block_size, {kvh}, {head_dim}]"
        raise ValueError(f"{op}: key_cache must be {want} for kv_cache_layout={layout!r}, got {tuple(key_cache.shape)}")
    strides = []
    for c in (key_cache, value_cache):
        s = c.stride()
        strides += [s[0], s[2], s[1], s[3]] if layout == "HND" else [s[0], s[1], s[2], s[3]]
    return nb * block_size, block_size, strides


@public_op(mutates=("key_cache", "value_cache"), unless=check_rope_and_slots,
           no_grad="it writes a KV cache and its rotated copies (no backward yet)")
def fused_qkv_split_qk_norm_rope_cache(qkv: torch.Tensor, q_weight: torch.Tensor, k_weight: torch.Tensor,
                                       cos: torch.Tensor, sin: torch.Tensor, positions: torch.Tensor,
                                       key_cache: torch.Tensor, value_cache: torch.Tensor,
                                       slot_mapping: torch.Tensor, qh: int, kvh: int, head_dim: int,
                                       is_neox: bool = True, offsets: torch.Tensor | None = None,
                                       reuse_freqs_front_part: bool = True, attn_output_gate: bool = False,
                                       k_scale: torch.Tensor | None = None, v_scale: torch.Tensor | None = None,
                                       eps: float = 1e-05, gated_qkv_layout: str = "interleaved",
                                       kv_cache_layout: str = "HND") -> tuple[torch.Tensor, ...]:
    """(q, k, v), or with ``attn_output_gate`` (q, gate, k, v), each (T, heads, head_dim) in
    qkv's dtype, from ``qkv`` (T, (qh [* 2 with gates] + 2 kvh) * head_dim): q and k
    RMS-normalized per head (``x * rstd * (1 + weight)``, rounded to qkv's dtype), then
    rotated at ``positions`` (+ ``offsets``) over their first R = F * (2 if
    reuse_freqs_front_part else 1) channels (NEOX halves or GPTJ pairs); k / k_scale and
    v / v_scale written at ``slot_mapping`` (negative: skipped) into the paged caches
    (``kv_cache_layout`` "HND": [blocks, kvh, block_size, head_dim]; "NHD": [blocks,
    block_size, kvh, head_dim]). Gates: per head after its q (``gated_qkv_layout``
    "interleaved") or all after all q ("blocked")."""
    op = "fused_qkv_split_qk_norm_rope_cache"
    check_float_tensor(op, "qkv", qkv)
    check_triton_device(op, "qkv", qkv)
    qh, kvh, head_dim = head_counts(op, qh, kvh, head_dim)
    gated = check_bool(op, "attn_output_gate", attn_output_gate)
    blocked = check_choice(op, "gated_qkv_layout", gated_qkv_layout, ("interleaved", "blocked")) == "blocked"
    if not isinstance(kv_cache_layout, str):
        raise TypeError(f"{op}: kv_cache_layout must be 'HND' or 'NHD', got {type(kv_cache_layout).__name__}")
    layout = check_choice(op, "kv_cache_layout", kv_cache_layout.upper(), ("HND", "NHD"))
    width = (qh * (2 if gated else 1) + 2 * kvh) * head_dim
    if qkv.dim() != 2 or qkv.shape[1] != width:
        what = "(qh * 2 + 2 * kvh) * head_dim" if gated else "(qh + 2 * kvh) * head_dim"
        raise ValueError(f"{op}: qkv must be 2-D (tokens, {what}) = (T, {width}), got shape {tuple(qkv.shape)}")
    check_unit_last_stride(op, "qkv", qkv)
    q_weight = _check_weight(op, "q_weight", q_weight, head_dim, qkv)
    k_weight = _check_weight(op, "k_weight", k_weight, head_dim, qkv)
    is_neox = check_bool(op, "is_neox", is_neox)
    reuse = check_bool(op, "reuse_freqs_front_part", reuse_freqs_front_part)
    eps = check_eps(op, "eps", eps)
    tab, r, pos, off = qkv_rope_tables(op, qkv, cos, sin, positions, offsets, reuse, head_dim)
    n_tokens = qkv.shape[0]
    n_cache_slots, block_size, strides = _check_caches(op, key_cache, value_cache, layout, kvh, head_dim, qkv)
    slot_mapping = check_slots(op, slot_mapping, n_tokens, n_cache_slots, qkv, "qkv")
    check_scale(op, "k_scale", k_scale, qkv, "qkv")
    check_scale(op, "v_scale", v_scale, qkv, "qkv")
    if debug_on():
        log_call(op, qkv=qkv, q_weight=q_weight, k_weight=k_weight, cos=tab.cos, sin=tab.sin, positions=pos,
                 key_cache=key_cache, value_cache=value_cache, slot_mapping=slot_mapping, qh=qh, kvh=kvh,
                 head_dim=head_dim, is_neox=is_neox, offsets=off, reuse_freqs_front_part=reuse,
                 attn_output_gate=gated, k_scale=k_scale, v_scale=v_scale, eps=eps,
                 gated_qkv_layout=gated_qkv_layout, kv_cache_layout=layout)
    new = lambda heads: torch.empty((n_tokens, heads, head_dim), dtype=qkv.dtype, device=qkv.device)  # noqa: E731
    q, k, v = new(qh), new(kvh), new(kvh)
    gate = new(qh) if gated else None
    sq_h = head_dim if blocked or not gated else 2 * head_dim
    gate_off = qh * head_dim if blocked else head_dim
    _launch_qkv_norm_rope_cache(qkv, q_weight, k_weight, q, gate, k, v, key_cache, value_cache, slot_mapping, pos,
                                off, tab.cos, tab.sin, k_scale, v_scale,
                                [tab.rows, tab.stride_r, tab.stride_f, r // 2, sq_h, gate_off, n_cache_slots,
                                 block_size, *strides], eps, [is_neox, reuse])
    return (q, gate, k, v) if gated else (q, k, v)
