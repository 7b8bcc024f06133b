"""RoPE fused with the paged KV-cache write, and MLA's latent-cache write (aiter's names
and argument orders). Semantics are ``aiter_lite.ops.native.fusions.fused_kv_cache``'s;
where aiter is limited this does more, and checks it:

* the classic layout's value cache also as aiter's shuffled 5-D one, ``[num_blocks, kv_heads,
  block_size // x, head_dim, x]`` (gpt-oss on gfx950), bf16 / fp16 / fp32 / fp8;
* any head dim and block size (aiter: powers of two); a partial rotary part (a table
  narrower than head_dim / 2); fp16 and fp32 caches as well as bf16 and fp8;
* ``slot_mapping`` may be shorter than the tokens (CUDA-graph padding: the tail writes
  no cache entry); ``k_out`` is written for every token, padding included;
* fp8 caches saturate (vLLM's convert; never inf), scaled by ``x * (1 / scale)`` as the
  quant ops; a slot past the cache is never written (a ValueError on the host where
  ``slot_mapping`` is there, or with ``AITER_KV_CACHE_CHECK_SLOTS=1``);
* ``cat_and_cache_mla`` also writes aiter's preshuffled MLA cache (``shuffled_kv_cache=True``),
  bf16, fp16 and fp8, in the same launch as the plain layouts (``_cat_kernel``'s SHUFFLE).

And vLLM's cache writes (``aiter_lite.vllm``'s ``reshape_and_cache(_flash)``, ``convert_fp8``):
``kv_cache_write`` (the RoPE + cache kernel with ROTATE off, values divided by the scales as
vLLM's kernels divide: DIV_SCALE) and ``convert_kv_cache`` (a cache to or from fp8).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
import math

import torch

from aiter_lite import envs
from aiter_lite.ops.triton._triton_kernels.fusions.fused_kv_cache import _cache_convert_kernel, _rope_cache_kernel
from aiter_lite.ops.triton._triton_kernels.fusions.fused_qk_concat import NO_EXTRAS, _cat_kernel
from aiter_lite.ops.triton.fusions._common import (
    block_shift,
    CACHE_DTYPES,
    check_heads,
    check_out,
    check_out_dtype,
    check_positions,
    check_scale,
    check_slots,
    fp8_range,
    max_offset,
    check_rope_and_slots,
    rope_tables,
    soft_round,
)
from aiter_lite.ops.triton.rope.rope import RopeLaunchConfig, rope_launch_config
from aiter_lite.spec.device import INTERPRETER, DeviceProfile, device_profile
from aiter_lite.spec.quant import FP8_DTYPES
from aiter_lite.utils.checks import check_bool, check_int, check_same_device
from aiter_lite.utils.fast_launch import launch
from aiter_lite.utils.launch import cdiv, fill_tile, halve_until_filled, next_power_of_2
from aiter_lite.utils.launcher import launcher
from aiter_lite.utils.logger import debug_on, log_call
from aiter_lite.utils.registry import public_op

# why the public ops here refuse a call autograd would record (utils.registry.public_op)
_NO_GRAD = "it writes a KV cache"

__all__ = ["fused_qk_rope_reshape_and_cache", "cat_and_cache_mla", "fused_qk_rope_cat_and_cache_mla",
           "fused_qk_rope_cosine_cache_llama", "kv_cache_write", "convert_kv_cache"]


def _check_caches(op: str, key_cache, value_cache, flash_layout: bool, n_kv_heads: int, head_dim: int,
                  q: torch.Tensor, shuffled_values: bool = True) -> tuple[int, int, int, bool]:
    """The caches' (num_blocks, block_size, x, whether the value cache is aiter's shuffled 5-D
    one) for vLLM's layouts; x = 1 for the flash layout. ``shuffled_values``: that layout allowed."""
    for name, c in (("key_cache", key_cache), ("value_cache", value_cache)):
        if not isinstance(c, torch.Tensor):
            raise TypeError(f"{op}: {name} must be a torch.Tensor, got {type(c).__name__}")
        if c.device != q.device:
            raise ValueError(f"{op}: {name} must be on q's device {q.device}, got {c.device}")
        check_out_dtype(op, name, c.dtype, c.device)
    if value_cache.dtype != key_cache.dtype:
        raise TypeError(f"{op}: value_cache must have key_cache's dtype {key_cache.dtype}, got {value_cache.dtype}")
    kshape, vshape = tuple(key_cache.shape), tuple(value_cache.shape)
    if flash_layout:
        if len(kshape) != 4 or kshape[2:] != (n_kv_heads, head_dim):
            raise ValueError(f"{op}: key_cache must be (num_blocks, block_size, {n_kv_heads}, {head_dim}) with "
                             f"flash_layout=True, got {kshape}")
        if vshape != kshape:
            raise ValueError(f"{op}: value_cache must have key_cache's shape {kshape} with flash_layout=True, "
                             f"got {vshape}")
        return kshape[0], kshape[1], 1, False
    if len(kshape) != 5 or kshape[1] != n_kv_heads or kshape[2] * kshape[4] != head_dim:
        raise ValueError(f"{op}: key_cache must be (num_blocks, {n_kv_heads}, head_dim // x, block_size, x) with "
                         f"x * (head_dim // x) = {head_dim} and flash_layout=False, got {kshape}")
    nb, bs, x = kshape[0], kshape[3], kshape[4]
    classic = (nb, n_kv_heads, head_dim, bs)
    shuffled = (nb, n_kv_heads, bs // x, head_dim, x)
    if vshape == classic:
        return nb, bs, x, False
    if shuffled_values and len(vshape) == 5 and bs % x == 0 and vshape == shuffled:
        return nb, bs, x, True
    also = (f", or aiter's shuffled (num_blocks, kv heads, block_size // x, head_dim, x) = {shuffled}"
            f"{'' if bs % x == 0 else ' (block_size a multiple of x)'}") if shuffled_values else ""
    raise ValueError(f"{op}: value_cache must be (num_blocks, kv heads, head_dim, block_size) = {classic}{also} "
                     f"with flash_layout=False, got {vshape}")


def _cache_strides(key_cache: torch.Tensor, value_cache: torch.Tensor, flash_layout: bool) -> tuple:
    """(block, offset, head, chunk, in-chunk) of the key cache, (block, offset (chunk), head,
    channel, offset in its chunk) of the value cache."""
    k, v = key_cache.stride(), value_cache.stride()
    if flash_layout:
        return (k[0], k[1], k[2], k[3], 0), (v[0], v[1], v[2], v[3], 0)
    if value_cache.dim() == 5:  # [blocks, heads, block_size // x, head_dim, x]
        return (k[0], k[3], k[1], k[2], k[4]), (v[0], v[2], v[1], v[3], v[4])
    return (k[0], k[3], k[1], k[2], k[4]), (v[0], v[3], v[1], v[2], 0)


# Classic caches: a program's tokens that are at most two runs of consecutive slots, each in one
# block (a prefill's), stored run by run with the tokens across the lanes, each channel's run in
# whole sectors (the kernel's SLOT_TILES); other tiles (decode's scattered slots) token by token.
_SLOT_TILES = True


def _slot_tiles(flash_layout: bool, row_slots: bool, kc_strides: tuple, vc_strides: tuple, x: int,
                block_t: int, cache_dtype: torch.dtype) -> bool:
    """Whether a launch takes the kernel's slot tiles: the classic caches (not aiter's 5-D
    shuffled value cache, not per-sequence rows) of 16- or 32-bit values, each cache entry
    contiguous (the key cache's offsets x apart, its chunks' channels adjacent; the value
    cache's offsets adjacent), tiles of 4 tokens at least. fp8 caches write token by token:
    a value tile of bytes a lane took 128 registers a lane on sm_90 (32 token by token) and
    measured 1.7x slower on an H200."""
    return (_SLOT_TILES and not flash_layout and not row_slots and block_t >= 4 and cache_dtype.itemsize >= 2
            and kc_strides[1] == x and kc_strides[4] == 1 and vc_strides[1] == 1 and vc_strides[4] == 0)


@functools.lru_cache(maxsize=1024)
def classic_launch_config(n_tokens: int, n_q_heads: int, n_kv_heads: int, head_dim: int,
                          profile: DeviceProfile = INTERPRETER) -> RopeLaunchConfig:
    """Tokens and heads per program for the classic layout: 16 tokens (a cache block of
    consecutive slots) of 4096 elements' worth of heads, halved until the grid has two
    programs per SM.

    A token's value-cache entry is transposed (each channel ``block_size`` elements from the
    next), so each 32-byte sector is shared by the block's tokens: programs of one token
    leave it to the L2 to merge 16 partial writes. Measured on an H200 (llama3-8B, bf16
    cache, prefill slots), T = 32768: 16 x 2 heads x 4 warps 278.9 us (77% of copy)
    against 476.0 for one token of 8 heads; fp8 cache 220.0 (90%). A tile of a prefill's
    consecutive slots is stored run by run with its tokens across the lanes (_slot_tiles):
    kv_cache_write, T = 65536, bf16 cache, 188.6 -> 175.4 us (whole blocks) and 219.8 ->
    205.3 (a batch of prefills), with the block shift in both.

    AMD takes 8 tokens a program on 8 warps: with 16 on 4 the kernel's scalars (some 70
    arguments) spilled SGPRs under Triton 3.9 on gfx942 (131-164 B into vector lanes, no
    scratch); 8 on 8 spill none (not measured on an AMD GPU).
    """
    hip = profile.backend == "hip"
    block_d = next_power_of_2(head_dim)
    block_h = min(next_power_of_2(max(n_q_heads, n_kv_heads, 1)), max(1, 4096 // (16 * block_d)))
    block_t = min(8 if hip else 16, next_power_of_2(max(n_tokens, 1)))
    head_blocks = cdiv(n_q_heads, block_h) + cdiv(n_kv_heads, block_h)
    block_t = halve_until_filled(block_t, lambda t: cdiv(n_tokens, t) * head_blocks, profile)
    return RopeLaunchConfig(block_t, block_h, (8 if hip else 4) if block_t * block_h * block_d >= 2048 else 2)


@launcher(mutates=("q_out", "k_out", "zeros_out", "key_cache", "value_cache"))
def _launch_rope_cache(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, q_out: torch.Tensor,
                       k_out: torch.Tensor | None,
                       zeros_out: torch.Tensor | None, key_cache: torch.Tensor, value_cache: torch.Tensor,
                       slot_mapping: torch.Tensor, pos: torch.Tensor, offs: torch.Tensor | None,
                       cos: torch.Tensor, sin: torch.Tensor, k_scale: torch.Tensor | None,
                       v_scale: torch.Tensor | None, geometry: list[int], flags: list[bool],
                       config: RopeLaunchConfig | None = None) -> None:
    """Q and K rotated into q_out / k_out (None: the cache only), K and V written into the
    paged caches, zeros_out zeroed. ``flags``: is_neox, reuse, flash_layout and, optionally,
    row_slots (token t's cache row is row t, its slot the offset in it)."""
    n_rows, stride_r, stride_f, half, n_cache_slots, block_size, x = geometry
    is_neox, reuse, flash_layout, *more = flags
    row_slots = bool(more and more[0])
    n_tokens, n_q_heads, d = q.shape
    n_kv_heads = k.shape[1]
    if n_tokens == 0:
        return
    cfg = config or (rope_launch_config if flash_layout else classic_launch_config)(n_tokens, n_q_heads, n_kv_heads,
                                                                                    d, device_profile(q.device))
    rest = d - 2 * half
    kc_strides, vc_strides = _cache_strides(key_cache, value_cache, flash_layout)
    z = q_out if zeros_out is None else zeros_out
    ko = k if k_out is None else k_out
    grid = (cdiv(n_tokens, cfg.BLOCK_T) * (cdiv(n_q_heads, cfg.BLOCK_H) + cdiv(n_kv_heads, cfg.BLOCK_H)),)
    launch(
        _rope_cache_kernel, grid,
        q, k, v, q_out, ko, z, key_cache, value_cache, slot_mapping, pos, pos if offs is None else offs,
        cos, sin, key_cache if k_scale is None else k_scale, key_cache if v_scale is None else v_scale,
        *q.stride(), *k.stride(), *v.stride(), *q_out.stride(), *ko.stride(), *z.stride(),
        *kc_strides, *vc_strides, stride_r, stride_f,
        n_tokens, slot_mapping.shape[0], n_cache_slots, block_size, n_rows, n_q_heads, n_kv_heads, d,
        *fp8_range(q_out.dtype), *fp8_range(ko.dtype), *fp8_range(key_cache.dtype),
        HAS_OFFSETS=offs is not None, IS_NEOX=is_neox, REUSE=reuse,
        HAS_K_SCALE=k_scale is not None, HAS_V_SCALE=v_scale is not None,
        Q_FP8=q_out.dtype.itemsize == 1, K_FP8=ko.dtype.itemsize == 1, KC_FP8=key_cache.dtype.itemsize == 1,
        VC_FP8=value_cache.dtype.itemsize == 1,
        SOFT_ROUND=soft_round(q_out.dtype, ko.dtype, key_cache.dtype), ZEROS=zeros_out is not None, KC_X=x,
        HALF=half, BLOCK_HALF=next_power_of_2(half), BLOCK_REST=next_power_of_2(rest) if rest else 0,
        BLOCK_D=next_power_of_2(d), BLOCK_T=cfg.BLOCK_T, BLOCK_H=cfg.BLOCK_H,
        INT64=max_offset(q, k, v, q_out, k_out, zeros_out) >= 2**31, num_warps=cfg.num_warps,
        **({"ROW_SLOTS": True} if row_slots else {}), **({"K_OUT": False} if k_out is None else {}),
        **({"VC_X": x} if value_cache.dim() == 5 else {}),
        **({"SLOT_TILES": True} if _slot_tiles(flash_layout, row_slots, kc_strides, vc_strides, x, cfg.BLOCK_T,
                                               value_cache.dtype) else {}), **block_shift(block_size),
    )


def _check_qkv(op: str, q, k, v) -> tuple[int, int, int, int]:
    """q (T, QH, d), k and v (T, KH, d) of q's dtype, QH a multiple of KH: (T, QH, d, KH)."""
    check_heads(op, "q", q)
    check_heads(op, "k", k, "q", q)
    check_heads(op, "v", v, "q", q)
    n_tokens, n_q_heads, d = q.shape
    n_kv_heads = k.shape[1]
    if tuple(k.shape) != (n_tokens, n_kv_heads, d) or n_kv_heads == 0:
        raise ValueError(f"{op}: k must be (tokens, kv heads >= 1, head_dim) = ({n_tokens}, KH, {d}) for q of shape "
                         f"{tuple(q.shape)}, got {tuple(k.shape)}")
    if tuple(v.shape) != tuple(k.shape):
        raise ValueError(f"{op}: v must have k's shape {tuple(k.shape)}, got {tuple(v.shape)}")
    if n_q_heads % n_kv_heads:
        raise ValueError(f"{op}: q's {n_q_heads} heads must be a multiple of k's {n_kv_heads}")
    for name, t in (("k", k), ("v", v)):
        if t.dtype != q.dtype:
            raise TypeError(f"{op}: {name} must have q's dtype {q.dtype}, got {t.dtype}")
    return n_tokens, n_q_heads, d, n_kv_heads


@public_op(mutates=("key_cache", "value_cache", "q_out", "k_out", "zeros_out"), no_grad=_NO_GRAD,
           aliases={"q_out": ("q",), "k_out": ("k",)}, unless=check_rope_and_slots)
def fused_qk_rope_reshape_and_cache(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, key_cache: torch.Tensor,
                                    value_cache: torch.Tensor, slot_mapping: torch.Tensor, pos: torch.Tensor,
                                    cos: torch.Tensor, sin: torch.Tensor, k_scale: torch.Tensor | None,
                                    v_scale: torch.Tensor | None, is_neox: bool, flash_layout: bool,
                                    apply_scale: bool = True, offs: torch.Tensor | None = None,
                                    q_out: torch.Tensor | None = None, k_out: torch.Tensor | None = None,
                                    output_zeros: bool = True, zeros_out: torch.Tensor | None = None,
                                    upcast_operand: bool = False) -> tuple:
    """Rotate q and k (q [T, QH, d], k and v [T, KH, d]) and write k and v into the paged
    caches at ``slot_mapping``, in one launch. Returns (q_out, k_out, key_cache,
    value_cache), and ``zeros_out`` (q's shape and dtype, zeroed) last with
    ``output_zeros`` or a ``zeros_out`` given. ``q_out=q`` / ``k_out=k`` rotate in place.
    ``upcast_operand`` (aiter's: rotate in fp32 rather than in q's dtype) changes nothing:
    the rotation is always fp32 math, rounded once."""
    op = "fused_qk_rope_reshape_and_cache"
    check_bool(op, "upcast_operand", upcast_operand)
    n_tokens, n_q_heads, d, n_kv_heads = _check_qkv(op, q, k, v)
    is_neox = check_bool(op, "is_neox", is_neox)
    flash_layout = check_bool(op, "flash_layout", flash_layout)
    apply_scale = check_bool(op, "apply_scale", apply_scale)
    output_zeros = check_bool(op, "output_zeros", output_zeros)
    tab, reuse, half = rope_tables(op, cos, sin, q, d)
    pos, offs = check_positions(op, "pos", pos, n_tokens, q, tab.rows, offs, "offs")
    n_blocks, block_size, x, _ = _check_caches(op, key_cache, value_cache, flash_layout, n_kv_heads, d, q)
    slot_mapping = check_slots(op, slot_mapping, n_tokens, n_blocks * block_size, q)
    check_scale(op, "k_scale", k_scale, q)
    check_scale(op, "v_scale", v_scale, q)
    q_out = check_out(op, "q_out", q_out, q.shape, q)
    k_out = check_out(op, "k_out", k_out, k.shape, k, ref_name="k")
    if zeros_out is not None or output_zeros:
        zeros_out = check_out(op, "zeros_out", zeros_out, q.shape, q)
    if debug_on():
        log_call(op, q=q, k=k, v=v, key_cache=key_cache, value_cache=value_cache, slot_mapping=slot_mapping,
                 pos=pos, cos=tab.cos, sin=tab.sin, k_scale=k_scale, v_scale=v_scale, is_neox=is_neox,
                 flash_layout=flash_layout, apply_scale=apply_scale, offs=offs, q_out=q_out, k_out=k_out,
                 zeros_out=zeros_out)
    geometry = [tab.rows, tab.stride_r, tab.stride_f, half, n_blocks * block_size, block_size, x]
    _launch_rope_cache(q, k, v, q_out, k_out, zeros_out, key_cache, value_cache, slot_mapping, pos, offs,
                       tab.cos, tab.sin, k_scale if apply_scale else None, v_scale if apply_scale else None,
                       geometry, [is_neox, reuse, flash_layout])
    out = (q_out, k_out, key_cache, value_cache)
    return out if zeros_out is None else (*out, zeros_out)


@public_op(mutates=("key_cache", "value_cache", "q_out"), no_grad=_NO_GRAD, aliases={"q_out": ("q",)},
           unless=check_rope_and_slots)
def fused_qk_rope_cosine_cache_llama(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, key_cache: torch.Tensor,
                                     value_cache: torch.Tensor, slot_mapping: torch.Tensor, pos: torch.Tensor,
                                     cos: torch.Tensor, sin: torch.Tensor, k_scale: torch.Tensor | None,
                                     v_scale: torch.Tensor | None, is_neox: bool, flash_layout: bool,
                                     apply_scale: bool = True, offs: torch.Tensor | None = None,
                                     q_out: torch.Tensor | None = None) -> tuple:
    """aiter's RoPE + KV-cache write into a per-sequence cache: q and k rotated (q [T, QH, d],
    k and v [T, KH, d]); token t's rotated k and its v written into row t of the caches at
    offset ``slot_mapping[t]`` (flash layout [rows, block_size, KH, d]; else [rows, KH,
    d // x, block_size, x] and [rows, KH, d, block_size]), scaled by 1 / k_scale, 1 / v_scale
    where given and ``apply_scale``. Returns (q_out, key_cache, value_cache); ``q_out=q``
    rotates in place.

    Where aiter is limited this does more, and checks it: fp32 math, one rounding (aiter: fp64);
    any even head dim (aiter: powers of 2); a slot_mapping shorter than the tokens writes no cache
    entry for the rest while every token's q is rotated (aiter leaves the last heads of the last
    tokens' q unwritten and reads past slot_mapping); a slot outside [0, block_size) writes
    nothing (a ValueError on the host where slot_mapping is there; aiter writes out of bounds)."""
    op = "fused_qk_rope_cosine_cache_llama"
    n_tokens, n_q_heads, d, n_kv_heads = _check_qkv(op, q, k, v)
    is_neox = check_bool(op, "is_neox", is_neox)
    flash_layout = check_bool(op, "flash_layout", flash_layout)
    apply_scale = check_bool(op, "apply_scale", apply_scale)
    tab, reuse, half = rope_tables(op, cos, sin, q, d)
    pos, offs = check_positions(op, "pos", pos, n_tokens, q, tab.rows, offs, "offs")
    n_rows, block_size, x, _ = _check_caches(op, key_cache, value_cache, flash_layout, n_kv_heads, d, q,
                                             shuffled_values=False)
    slot_mapping = check_slots(op, slot_mapping, n_tokens, block_size, q, slots_are="block_size: an offset in "
                               "the token's row")
    if slot_mapping.shape[0] > n_rows:
        raise ValueError(f"{op}: slot_mapping has {slot_mapping.shape[0]} tokens, more than key_cache's {n_rows} "
                         f"rows (one a token)")
    check_scale(op, "k_scale", k_scale, q)
    check_scale(op, "v_scale", v_scale, q)
    q_out = check_out(op, "q_out", q_out, q.shape, q)
    if debug_on():
        log_call(op, q=q, k=k, v=v, key_cache=key_cache, value_cache=value_cache, slot_mapping=slot_mapping,
                 pos=pos, cos=tab.cos, sin=tab.sin, k_scale=k_scale, v_scale=v_scale, is_neox=is_neox,
                 flash_layout=flash_layout, apply_scale=apply_scale, offs=offs, q_out=q_out)
    geometry = [tab.rows, tab.stride_r, tab.stride_f, half, n_rows * block_size, block_size, x]
    _launch_rope_cache(q, k, v, q_out, None, None, key_cache, value_cache, slot_mapping, pos, offs, tab.cos, tab.sin,
                       k_scale if apply_scale else None, v_scale if apply_scale else None, geometry,
                       [is_neox, reuse, flash_layout, True])
    return q_out, key_cache, value_cache


def _mla_part(op: str, name: str, t, ref: torch.Tensor | None) -> torch.Tensor:
    """[B, heads, d] or [B, d] (one head) as 3-D."""
    if isinstance(t, torch.Tensor) and t.dim() == 2:
        t = t[:, None, :]
    check_heads(op, name, t, "k_nope", ref, dims="(tokens, heads, d) or (tokens, d)")
    return t


@functools.lru_cache(maxsize=1024)
def mla_launch_config(n_tokens: int, n_heads: int, d: int, profile: DeviceProfile = INTERPRETER) -> RopeLaunchConfig:
    """Tokens and heads per program for the MLA cache write and its RoPE + concat (entries
    ``d`` wide: the two parts' power-of-2 blocks, 512 + 64 for DeepSeek-V3's latent): heads,
    then tokens, while the tile stays within ``_MLA_TILE`` elements, on 2 warps (36 elements a
    lane; 4 for a head wider than 4096).

    H200, DeepSeek-V3 (128 heads of 576), ``fused_qk_rope_cat_and_cache_mla``: 4 heads on 2
    warps against the old tile (16 heads on 4 warps, sized as 1024 wide, heads halved at
    decode until the grid had two programs an SM): CUDA graphs T = 1 / 16 / 128 / 2048 1.81
    / 2.36 / 6.61 / 149.1 us against 2.00 / 2.39 / 6.58 / 152.7; eager T = 16384 98.0% of
    copy against 94.9%; 1, 2 or 8 heads a program were slower at one token count or more.
    The latent write alone (one head): 4 tokens on 2 warps, as before (T = 32768: 81% of
    copy; 2-16 tokens on 1-4 warps 76-81%)."""
    d = max(d, 1)
    block_t, block_h = fill_tile(n_tokens, n_heads, d, _MLA_TILE)
    return profile.fit(RopeLaunchConfig(block_t, block_h, 2 if block_t * block_h * d <= 4096 else 4))


_MLA_TILE = 2304


@launcher(mutates=("kv_cache",))
def _launch_cat_and_cache_mla(k_nope: torch.Tensor, k_pe: torch.Tensor, kv_cache: torch.Tensor,
                              slot_mapping: torch.Tensor, k_scale: torch.Tensor | None, geometry: list[int],
                              config: RopeLaunchConfig | None = None, shuffle: int = 0,
                              divide: bool = False) -> None:
    """``_cat_kernel`` writing cat(k_nope, k_pe) of each token into its cache slot; ``shuffle``
    > 0: into aiter's preshuffled cache, channel chunks that wide (``_cat_kernel``'s SHUFFLE);
    ``divide``: the values divided by k_scale (vLLM's) rather than times its inverse."""
    n_cache_slots, block_size, s_blk, s_off, s_h, s_d = geometry
    n_tokens, n_heads, d1 = k_nope.shape
    d2 = k_pe.shape[2]
    if n_tokens == 0:
        return
    cfg = config or mla_launch_config(n_tokens, n_heads, next_power_of_2(d1) + next_power_of_2(d2),
                                      device_profile(k_nope.device))
    block_t, block_h = cfg.BLOCK_T, cfg.BLOCK_H
    sb = k_pe.stride()
    sb = (sb[0], 0 if k_pe.shape[1] == 1 else sb[1], sb[2])
    grid = (cdiv(n_tokens, block_t) * cdiv(n_heads, block_h),)
    launch(
        _cat_kernel, grid,
        k_nope, k_pe, kv_cache, k_nope, k_pe, kv_cache, slot_mapping, slot_mapping, kv_cache, kv_cache,
        kv_cache if k_scale is None else k_scale,
        0, 0, 0, 0, 0, 0, 0, 0, 0, *k_nope.stride(), *sb, s_blk, s_off, s_h, s_d, 0, 0,
        n_tokens, slot_mapping.shape[0], n_cache_slots, block_size, 1, 0, n_heads, d1, d2,
        *fp8_range(kv_cache.dtype), *NO_EXTRAS,
        ROPE=False, IS_NEOX=True, REUSE=False, DEST_SLOTS=True, HAS_SCALE=k_scale is not None,
        O1_FP8=False, O2_FP8=kv_cache.dtype.itemsize == 1, SOFT_ROUND=soft_round(kv_cache.dtype),
        HALF=1, BLOCK_HALF=1, BLOCK_D1=next_power_of_2(d1), BLOCK_D2=next_power_of_2(d2),
        BLOCK_T=block_t, BLOCK_H=block_h, INT64=max_offset(k_nope, k_pe) >= 2**31,
        num_warps=cfg.num_warps, **({"SHUFFLE": shuffle} if shuffle else {}),
        **({"DIV_SCALE": True} if divide and k_scale is not None else {}), **block_shift(block_size),
    )


def _mla_cache(op: str, kv_cache, k_nope: torch.Tensor, k_pe: torch.Tensor, shuffled: bool,
               k_pe_name: str = "k_pe") -> tuple:
    """An MLA latent cache checked for k_nope's heads and channels and k_pe's: (slots, block_size,
    the kernel's block / offset / head / channel strides, the shuffled layout's chunk width or 0)."""
    if not isinstance(kv_cache, torch.Tensor):
        raise TypeError(f"{op}: kv_cache must be a torch.Tensor, got {type(kv_cache).__name__}")
    if kv_cache.device != k_nope.device:
        raise ValueError(f"{op}: kv_cache must be on k_nope's device {k_nope.device}, got {kv_cache.device}")
    check_out_dtype(op, "kv_cache", kv_cache.dtype, kv_cache.device, CACHE_DTYPES)
    n_heads, d1, d2 = k_nope.shape[1], k_nope.shape[2], k_pe.shape[2]
    d = d1 + d2
    shape = tuple(kv_cache.shape)
    shuffle = 0
    if shuffled:
        block_size, shuffle, strides = _shuffled_cache(op, kv_cache, n_heads, d1, d2)
    elif kv_cache.dim() == 3 and shape[1:] == (n_heads, d):
        block_size, s = 1, kv_cache.stride()
        strides = (s[0], 0, s[1], s[2])
    elif kv_cache.dim() == 4 and shape[2:] == (n_heads, d):
        block_size, s = shape[1], kv_cache.stride()
        strides = s
    else:
        raise ValueError(f"{op}: kv_cache must be (slots, {n_heads}, {d}) or (num_blocks, block_size, {n_heads}, "
                         f"{d}) for k_nope {tuple(k_nope.shape)} and {k_pe_name} {tuple(k_pe.shape)}, got {shape}")
    return shape[0] * block_size, block_size, strides, shuffle


def _shuffled_cache(op: str, kv_cache: torch.Tensor, n_heads: int, d1: int, d2: int) -> tuple[int, int, tuple]:
    """aiter's preshuffled MLA cache checked: (block_size, chunk width, strides for the kernel)."""
    shape = tuple(kv_cache.shape)
    if kv_cache.element_size() not in (1, 2):
        raise ValueError(f"{op}: shuffled_kv_cache=True with a {kv_cache.dtype} kv_cache is not supported: the "
                         "preshuffled layout holds 16-byte chunks of bf16 / fp16 (8) or fp8 (16) values")
    chunk = 16 // kv_cache.element_size()
    d = d1 + d2
    if kv_cache.dim() != 4 or shape[1] != n_heads or shape[3] != d:
        raise ValueError(f"{op}: kv_cache must be (num_blocks, {n_heads}, block_size, {d}) with "
                         f"shuffled_kv_cache=True for k_nope of {d1} and k_pe of {d2} channels, got {shape}")
    if shape[2] % 16:
        raise ValueError(f"{op}: kv_cache's block_size must be a multiple of 16 with shuffled_kv_cache=True "
                         f"(tokens go in tiles of 16), got {shape[2]} in shape {shape}")
    if d1 % chunk or d2 % chunk:
        raise ValueError(f"{op}: k_nope's and k_pe's channels must be multiples of {chunk} with "
                         f"shuffled_kv_cache=True and a {kv_cache.dtype} cache (16-byte chunks), got {d1} and {d2}")
    s = kv_cache.stride()
    if (s[3] != 1 and d > 1) or (s[2] != d and shape[2] > 1):
        raise ValueError(f"{op}: kv_cache's (block_size, {d}) plane of each block and head must be contiguous "
                         f"with shuffled_kv_cache=True (the layout is a flat plane), got strides {s}")
    return shape[2], chunk, (s[0], 0, s[1], 1)


@public_op(mutates=("kv_cache",), unless=envs.kv_cache_check_slots, no_grad=_NO_GRAD)
def cat_and_cache_mla(k_nope: torch.Tensor, k_pe: torch.Tensor, kv_cache: torch.Tensor, slot_mapping: torch.Tensor,
                      k_scale: torch.Tensor | None, apply_scale: bool = True,
                      shuffled_kv_cache: bool = False) -> None:
    """Write cat(k_nope, k_pe) of each token (k_nope [B, KH, D1] or [B, D1]; k_pe of KH
    heads or one, shared) into ``kv_cache`` ([slots, KH, D1 + D2] or [num_blocks,
    block_size, KH, D1 + D2]) at ``slot_mapping``; scaled by ``1 / k_scale`` when given and
    ``apply_scale``, saturated for an fp8 cache. Returns None (kv_cache is written).

    ``shuffled_kv_cache``: aiter's preshuffled cache (the layout gfx950's MLA decode kernels
    read), ``kv_cache`` [num_blocks, KH, block_size, D1 + D2] with each (block, head)'s
    (block_size, D1 + D2) plane flat: the block's k_nope parts first, then its k_pe parts,
    each in tiles of 16 tokens whose 16-byte channel chunks sit side by side (chunk c // E
    of the token at offset o of a part D wide at ``(o // 16) * 16 D + (c // E) * 16 E + (o
    % 16) * E``, E = 8 for bf16 / fp16, 16 for fp8), as aiter's kernel writes it. block_size
    a multiple of 16, D1 and D2 multiples of E (aiter's assumptions, checked here); fp16
    caches too (aiter: bf16 and fp8); aiter's uint8 (NVFP4) cache is not supported."""
    op = "cat_and_cache_mla"
    shuffled = check_bool(op, "shuffled_kv_cache", shuffled_kv_cache)
    k_nope = _mla_part(op, "k_nope", k_nope, None)
    k_pe = _mla_part(op, "k_pe", k_pe, k_nope)
    n_tokens, n_heads, d1 = k_nope.shape
    if k_pe.shape[0] != n_tokens or k_pe.shape[1] not in (1, n_heads):
        raise ValueError(f"{op}: k_pe must have k_nope's {n_tokens} tokens and {n_heads} heads (or one, shared), "
                         f"got shape {tuple(k_pe.shape)}")
    if k_pe.dtype != k_nope.dtype:
        raise TypeError(f"{op}: k_pe must have k_nope's dtype {k_nope.dtype}, got {k_pe.dtype}")
    apply_scale = check_bool(op, "apply_scale", apply_scale)
    n_cache_slots, block_size, strides, shuffle = _mla_cache(op, kv_cache, k_nope, k_pe, shuffled)
    slot_mapping = check_slots(op, slot_mapping, n_tokens, n_cache_slots, k_nope, "k_nope")
    check_scale(op, "k_scale", k_scale, k_nope, "k_nope")
    if debug_on():
        log_call(op, k_nope=k_nope, k_pe=k_pe, kv_cache=kv_cache, slot_mapping=slot_mapping, k_scale=k_scale,
                 apply_scale=apply_scale, shuffled_kv_cache=shuffled)
    _launch_cat_and_cache_mla(k_nope, k_pe, kv_cache, slot_mapping, k_scale if apply_scale else None,
                              [n_cache_slots, block_size, *strides], None, shuffle)
    return None


@launcher(mutates=("q_out", "kv_cache", "decode_q_pe_out", "k_pe_out", "q_nope_zeros"))
def _launch_qk_rope_cat_and_cache_mla(q_nope: torch.Tensor, q_pe: torch.Tensor, k_nope: torch.Tensor,
                                      k_pe: torch.Tensor, q_out: torch.Tensor, kv_cache: torch.Tensor,
                                      slot_mapping: torch.Tensor, pos: torch.Tensor, cos: torch.Tensor,
                                      sin: torch.Tensor, k_scale: torch.Tensor | None,
                                      decode_q_pe_out: torch.Tensor, k_pe_out: torch.Tensor,
                                      q_nope_zeros: torch.Tensor, geometry: list[int], flags: list[bool],
                                      config: RopeLaunchConfig | None = None, q_nope_in_place: bool = False,
                                      rope_part: bool = True) -> None:
    """``_cat_kernel`` over the decode tokens (Q rotated into q_out, K rotated into the cache at
    their slots, the extra outputs beside), then, where slot_mapping holds more tokens, over
    those (K into the cache unrotated, as aiter's kernel takes them). ``q_nope_in_place``: q_nope
    is q_out's first part already (not copied); ``rope_part`` false: the tokens past B only."""
    n_rows, stride_r, stride_f, half, n_cache_slots, block_size, s_blk, s_off, s_h, s_d, shuffle, n_zeros = geometry
    is_neox, reuse, upcast = flags
    b, qh, d1 = q_nope.shape
    kh, d2 = k_nope.shape[1], k_pe.shape[2]
    n_slots = slot_mapping.shape[0]
    c_min, c_max = fp8_range(kv_cache.dtype)
    o_min, o_max = fp8_range(q_out.dtype)
    for lo, hi, rope in ((0, b, True), (b, n_slots, False)):
        n = hi - lo
        if n <= 0 or (rope and not rope_part):
            continue
        heads1 = qh if rope else 0
        cfg = config or mla_launch_config(n, max(heads1, kh), next_power_of_2(d1) + next_power_of_2(d2),
                                          device_profile(q_nope.device))
        block_t, block_h = cfg.BLOCK_T, cfg.BLOCK_H
        kn, kp, kpo, slots = k_nope[lo:hi], k_pe[lo:hi], k_pe_out[lo:hi], slot_mapping[lo:hi]
        sb = kp.stride()
        sb = (sb[0], 0 if kp.shape[1] == 1 else sb[1], sb[2])
        zeros = q_nope_zeros if rope and n_zeros else None
        launch(
            _cat_kernel, (cdiv(n, block_t) * (cdiv(heads1, block_h) + cdiv(kh, block_h)),),
            q_nope, q_pe, q_out, kn, kp, kv_cache, slots, pos, cos, sin, kv_cache if k_scale is None else k_scale,
            *q_nope.stride(), *q_pe.stride(), *q_out.stride(), *kn.stride(), *sb, s_blk, s_off, s_h, s_d,
            stride_r, stride_f, n, n, n_cache_slots, block_size, n_rows, heads1, kh, d1, d2, c_min, c_max,
            decode_q_pe_out if zeros is not None else None,
            *(decode_q_pe_out.stride() if zeros is not None else (0,) * 3),
            kpo, *kpo.stride(), zeros, *(zeros.stride() if zeros is not None else (0,) * 3), n_zeros, o_min, o_max,
            ROPE=rope, IS_NEOX=is_neox, REUSE=reuse, DEST_SLOTS=True, HAS_SCALE=k_scale is not None,
            O1_FP8=q_out.dtype.itemsize == 1, O2_FP8=kv_cache.dtype.itemsize == 1,
            SOFT_ROUND=soft_round(kv_cache.dtype, q_out.dtype), HALF=max(half, 1),
            BLOCK_HALF=next_power_of_2(max(half, 1)), BLOCK_D1=next_power_of_2(d1), BLOCK_D2=next_power_of_2(d2),
            BLOCK_T=block_t, BLOCK_H=block_h,
            INT64=max_offset(q_nope, q_pe, k_nope, k_pe, q_out, k_pe_out, decode_q_pe_out) >= 2**31,
            UPCAST=upcast, OWN_Q1_RANGE=True, A1_IN_PLACE=q_nope_in_place, num_warps=cfg.num_warps,
            **({"SHUFFLE": shuffle} if shuffle else {}), **block_shift(block_size),
        )


def _mla_rope_cache_checks(op: str, q_name: str, q_ref: torch.Tensor, b: int, qh: int, d1: int, d1_of: str, q_pe,
                           k_nope, k_pe, kv_cache, slot_mapping, pos, cos, sin, k_scale, shuffled: bool,
                           pos_name: str, k_pe_name: str = "k_pe") -> tuple:
    """The RoPE + latent-cache side of the MLA fusions checked (b tokens and qh heads of Q,
    k_nope ``d1`` wide, ``d1_of`` saying whose width that is): (the table, reuse, HALF,
    positions, slot_mapping, cache slots, block size, cache strides, shuffle)."""
    check_heads(op, "q_pe", q_pe, q_name, q_ref)
    check_heads(op, "k_nope", k_nope, q_name, q_ref)
    check_heads(op, k_pe_name, k_pe, q_name, q_ref)
    bk, kh, _ = k_nope.shape
    d2 = q_pe.shape[2]
    if tuple(q_pe.shape[:2]) != (b, qh):
        raise ValueError(f"{op}: q_pe must have {q_name}'s tokens and heads ({b}, {qh}), got {tuple(q_pe.shape)}")
    if k_nope.shape[2] != d1:
        raise ValueError(f"{op}: k_nope must have {d1_of} {d1} channels, got shape {tuple(k_nope.shape)}")
    if tuple(k_pe.shape) != (bk, kh, d2):
        raise ValueError(f"{op}: {k_pe_name} must be ({bk}, {kh}, {d2}) (k_nope's tokens and heads, q_pe's channels), "
                         f"got {tuple(k_pe.shape)}")
    if qh % kh:
        raise ValueError(f"{op}: {q_name}'s {qh} heads must be a multiple of k_nope's {kh}")
    if b > bk:
        raise ValueError(f"{op}: {q_name}'s {b} tokens must not pass k_nope's {bk}")
    for name, t in (("k_nope", k_nope), (k_pe_name, k_pe)):
        if t.dtype != q_pe.dtype:
            raise TypeError(f"{op}: {name} must have q_pe's dtype {q_pe.dtype}, got {t.dtype}")
    tab, reuse, half = rope_tables(op, cos, sin, q_pe, d2, "q_pe", "q_pe")
    pos, _ = check_positions(op, pos_name, pos, b, q_pe, tab.rows, ref_name="q_pe")
    n_cache_slots, block_size, strides, shuffle = _mla_cache(op, kv_cache, k_nope, k_pe, shuffled, k_pe_name)
    slot_mapping = check_slots(op, slot_mapping, bk, n_cache_slots, k_nope, "k_nope")
    if slot_mapping.shape[0] < b:
        raise ValueError(f"{op}: slot_mapping must cover {q_name}'s {b} tokens, got {slot_mapping.shape[0]} slots")
    check_scale(op, "k_scale", k_scale, k_nope, "k_nope")
    return tab, reuse, half, pos, slot_mapping, n_cache_slots, block_size, strides, shuffle


@public_op(mutates=("kv_cache",), buffers=("q_out", "decode_q_pe_out", "k_pe_out"),
           unless=check_rope_and_slots,
           no_grad="its outputs are a cache write and rotated copies (no backward yet)")
def fused_qk_rope_cat_and_cache_mla(q_nope: torch.Tensor, q_pe: torch.Tensor, k_nope: torch.Tensor,
                                    k_pe: torch.Tensor, kv_cache: torch.Tensor, slot_mapping: torch.Tensor,
                                    pos: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
                                    k_scale: torch.Tensor | None, is_neox: bool, num_decode_toks_for_zeros: int = 0,
                                    apply_scale: bool = True, q_out: torch.Tensor | None = None,
                                    decode_q_pe_out: torch.Tensor | None = None,
                                    k_pe_out: torch.Tensor | None = None, q_out_dtype: torch.dtype | None = None,
                                    shuffled_kv_cache: bool = False, upcast_operand: bool = False
                                    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """MLA's absorbed attention input in one launch (aiter's ``fused_qk_rope_cat_and_cache_mla``,
    SGLang's ROCm MLA path): q_nope (B, QH, D1), q_pe (B, QH, D2) -> ``q_out`` (B, QH, D1 + D2) =
    cat(q_nope, rope(q_pe)) in ``q_out_dtype`` (q_nope's by default; fp8 saturated, not scaled);
    k_nope (BK, KH, D1), k_pe (BK, KH, D2) -> cat(k_nope, rope(k_pe)) / k_scale (where given and
    ``apply_scale``) written into ``kv_cache`` at ``slot_mapping`` (negative: skipped) for its
    first B tokens; its tokens past B (prefill tokens of a mixed batch, up to slot_mapping's
    length) are written unrotated, as aiter's kernel takes them. Also returned: ``decode_q_pe_out``
    (N, QH, D2) = rope(q_pe) of the first N = ``num_decode_toks_for_zeros`` tokens (q_nope's
    dtype), ``k_pe_out`` (BK, KH, D2) = k_pe as written into the cache, unscaled, for
    slot_mapping's tokens (aiter: only those with a slot; its rows past slot_mapping's length
    are not written), and (N, QH, D1) zeros. kv_cache: flat (slots, KH, D1 + D2), paged
    (blocks, block_size, KH, D1 + D2) or, with ``shuffled_kv_cache``, aiter's preshuffled
    (blocks, KH, block_size, D1 + D2); bf16 / fp16 / fp32 / fp8. ``upcast_operand``: the
    rotated values go to their destinations from fp32, not rounded to the input's dtype first.
    cos / sin (max_pos, D2 / 2) or (max_pos, D2) (reused for both members of a pair); pos (B,).
    Where a mixed batch has prefill tokens (slot_mapping longer than B) a second launch writes
    them."""
    op = "fused_qk_rope_cat_and_cache_mla"
    check_heads(op, "q_nope", q_nope)
    b, qh, d1 = q_nope.shape
    if isinstance(q_pe, torch.Tensor) and q_pe.dtype != q_nope.dtype:
        raise TypeError(f"{op}: q_pe must have q_nope's dtype {q_nope.dtype}, got {q_pe.dtype}")
    is_neox = check_bool(op, "is_neox", is_neox)
    apply_scale = check_bool(op, "apply_scale", apply_scale)
    shuffled = check_bool(op, "shuffled_kv_cache", shuffled_kv_cache)
    upcast = check_bool(op, "upcast_operand", upcast_operand)
    n_zeros = check_int(op, "num_decode_toks_for_zeros", num_decode_toks_for_zeros, 0, b)
    k = _mla_rope_cache_checks(op, "q_nope", q_nope, b, qh, d1, "q_nope's", q_pe, k_nope, k_pe, kv_cache, slot_mapping,
                               pos, cos, sin, k_scale, shuffled, "pos")
    tab, reuse, half, pos, slot_mapping, n_cache_slots, block_size, strides, shuffle = k
    bk, kh, d2 = k_pe.shape
    if q_out_dtype is not None:
        check_out_dtype(op, "q_out_dtype", q_out_dtype, q_nope.device)
    out_dtype = q_out_dtype or q_nope.dtype
    q_out = (torch.empty((b, qh, d1 + d2), dtype=out_dtype, device=q_nope.device) if q_out is None
             else check_out(op, "q_out", q_out, (b, qh, d1 + d2), q_nope, ref_name="q_nope"))
    decode_q_pe_out = check_out(op, "decode_q_pe_out", decode_q_pe_out, (n_zeros, qh, d2), q_nope,
                                ref_name="q_nope")
    k_pe_out = check_out(op, "k_pe_out", k_pe_out, (bk, kh, d2), k_pe, ref_name="k_pe")
    q_nope_zeros = torch.empty((n_zeros, qh, d1), dtype=q_nope.dtype, device=q_nope.device)
    if debug_on():
        log_call(op, q_nope=q_nope, q_pe=q_pe, k_nope=k_nope, k_pe=k_pe, kv_cache=kv_cache,
                 slot_mapping=slot_mapping, pos=pos, cos=tab.cos, sin=tab.sin, k_scale=k_scale, is_neox=is_neox,
                 num_decode_toks_for_zeros=n_zeros, q_out=q_out, q_out_dtype=out_dtype, shuffled_kv_cache=shuffled)
    _launch_qk_rope_cat_and_cache_mla(
        q_nope, q_pe, k_nope, k_pe, q_out, kv_cache, slot_mapping, pos, tab.cos, tab.sin,
        k_scale if apply_scale else None, decode_q_pe_out, k_pe_out, q_nope_zeros,
        [tab.rows, tab.stride_r, tab.stride_f, half, n_cache_slots, block_size, *strides, shuffle, n_zeros],
        [is_neox, reuse, upcast])
    return q_out, decode_q_pe_out, k_pe_out, q_nope_zeros


def check_kv_cache_write(op: str, key, value, key_cache, value_cache, slot_mapping, k_scale, v_scale,
                         flash_layout: bool) -> tuple:
    """``kv_cache_write``'s arguments checked (``op``: the caller's name): key and value (T, KH, d)
    of one float dtype; the caches of vLLM's layouts (flash: any strides, the HND view included);
    slot_mapping no longer than the tokens. Returns (key and value cut to slot_mapping's tokens,
    slot_mapping, the launcher's geometry)."""
    check_heads(op, "key", key)
    check_heads(op, "value", value, "key", key)
    if tuple(value.shape) != tuple(key.shape):
        raise ValueError(f"{op}: value must have key's shape {tuple(key.shape)}, got {tuple(value.shape)}")
    if value.dtype != key.dtype:
        raise TypeError(f"{op}: value must have key's dtype {key.dtype}, got {value.dtype}")
    n_tokens, n_heads, d = key.shape
    if n_heads == 0 or d == 0:
        raise ValueError(f"{op}: key must have at least one head and one channel, got shape {tuple(key.shape)}")
    n_blocks, block_size, x, _ = _check_caches(op, key_cache, value_cache, flash_layout, n_heads, d, key,
                                               shuffled_values=False)
    slot_mapping = check_slots(op, slot_mapping, n_tokens, n_blocks * block_size, key, "key")
    check_scale(op, "k_scale", k_scale, key, "key")
    check_scale(op, "v_scale", v_scale, key, "key")
    n = slot_mapping.shape[0]
    return key[:n], value[:n], slot_mapping, [n_blocks * block_size, block_size, x]


@launcher(mutates=("key_cache", "value_cache"))
def _launch_kv_cache_write(key: torch.Tensor, value: torch.Tensor, key_cache: torch.Tensor,
                           value_cache: torch.Tensor, slot_mapping: torch.Tensor, k_scale: torch.Tensor | None,
                           v_scale: torch.Tensor | None, geometry: list[int], flash_layout: bool,
                           config: RopeLaunchConfig | None = None) -> None:
    """``_rope_cache_kernel`` with ROTATE off: key and value written into the caches at their
    slots, divided by the scales where given (DIV_SCALE); no Q heads, no tables."""
    n_cache_slots, block_size, x = geometry
    n_tokens, n_heads, d = key.shape
    if n_tokens == 0:
        return
    cfg = config or (rope_launch_config if flash_layout else classic_launch_config)(n_tokens, 0, n_heads, d,
                                                                                    device_profile(key.device))
    kc_strides, vc_strides = _cache_strides(key_cache, value_cache, flash_layout)
    no_range = fp8_range(key.dtype)
    launch(
        _rope_cache_kernel, (cdiv(n_tokens, cfg.BLOCK_T) * cdiv(n_heads, cfg.BLOCK_H),),
        key, key, value, key, key, key, key_cache, value_cache, slot_mapping, slot_mapping, slot_mapping,
        key, key, key_cache if k_scale is None else k_scale, key_cache if v_scale is None else v_scale,
        *key.stride(), *key.stride(), *value.stride(), *key.stride(), *key.stride(), *key.stride(),
        *kc_strides, *vc_strides, 0, 0,
        n_tokens, slot_mapping.shape[0], n_cache_slots, block_size, 1, 0, n_heads, d,
        *no_range, *no_range, *fp8_range(key_cache.dtype),
        HAS_OFFSETS=False, IS_NEOX=True, REUSE=False,
        HAS_K_SCALE=k_scale is not None, HAS_V_SCALE=v_scale is not None,
        Q_FP8=False, K_FP8=False, KC_FP8=key_cache.dtype.itemsize == 1, VC_FP8=value_cache.dtype.itemsize == 1,
        SOFT_ROUND=soft_round(key_cache.dtype), ZEROS=False, KC_X=x, HALF=1, BLOCK_HALF=1, BLOCK_REST=0,
        BLOCK_D=next_power_of_2(d), BLOCK_T=cfg.BLOCK_T, BLOCK_H=cfg.BLOCK_H,
        INT64=max_offset(key, value) >= 2**31, num_warps=cfg.num_warps, ROTATE=False,
        **({"DIV_SCALE": True} if k_scale is not None or v_scale is not None else {}),
        **({"SLOT_TILES": True} if _slot_tiles(flash_layout, False, kc_strides, vc_strides, x, cfg.BLOCK_T,
                                               value_cache.dtype) else {}),
        **block_shift(block_size),
    )


@public_op(mutates=("key_cache", "value_cache"), unless=envs.kv_cache_check_slots, no_grad=_NO_GRAD)
def kv_cache_write(key: torch.Tensor, value: torch.Tensor, key_cache: torch.Tensor, value_cache: torch.Tensor,
                   slot_mapping: torch.Tensor, k_scale: torch.Tensor | None = None,
                   v_scale: torch.Tensor | None = None, flash_layout: bool = True) -> None:
    """Write key and value (T, KH, d) into vLLM's paged caches at ``slot_mapping`` (vLLM's
    ``reshape_and_cache_flash`` / ``reshape_and_cache``, unrotated): ``flash_layout`` key and
    value caches [num_blocks, block_size, KH, d] (any strides: the [num_blocks, KH,
    block_size, d] memory order's permuted view too), else key [num_blocks, KH, d // x,
    block_size, x] and value [num_blocks, KH, d, block_size]. Values divided by
    ``k_scale`` / ``v_scale`` where given (one-element fp32; vLLM's ``x / scale``), saturated
    for fp8 caches. slot_mapping may be shorter than the tokens (CUDA-graph padding: the
    rest write nothing); a negative slot writes nothing. Returns None (the caches are written)."""
    op = "kv_cache_write"
    flash_layout = check_bool(op, "flash_layout", flash_layout)
    key, value, slot_mapping, geometry = check_kv_cache_write(op, key, value, key_cache, value_cache, slot_mapping,
                                                              k_scale, v_scale, flash_layout)
    if debug_on():
        log_call(op, key=key, value=value, key_cache=key_cache, value_cache=value_cache, slot_mapping=slot_mapping,
                 k_scale=k_scale, v_scale=v_scale, flash_layout=flash_layout)
    _launch_kv_cache_write(key, value, key_cache, value_cache, slot_mapping, k_scale, v_scale, geometry, flash_layout)
    return None


def check_kv_cache_convert(op: str, output, input, scale, output_name: str = "output",
                           input_name: str = "input") -> tuple[torch.Tensor, torch.Tensor, float]:
    """``convert_kv_cache``'s arguments checked: one side fp8, the other bf16 / fp16 / fp32,
    one shape, each's (shape[0], rest) rows with contiguous elements. Returns the two as
    (rows, elements) views and the scale as a float."""
    for name, t in ((output_name, output), (input_name, input)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{op}: {name} must be a torch.Tensor, got {type(t).__name__}")
    check_same_device(op, output_name, output, input_name, input)
    floats = (torch.bfloat16, torch.float16, torch.float32)
    if not ((output.dtype in FP8_DTYPES and input.dtype in floats)
            or (input.dtype in FP8_DTYPES and output.dtype in floats)):
        raise TypeError(f"{op}: one of {output_name} and {input_name} must be fp8 and the other bf16, fp16 or fp32, "
                        f"got {output.dtype} and {input.dtype}")
    for name, t in ((output_name, output), (input_name, input)):
        if t.dtype in FP8_DTYPES:
            check_out_dtype(op, name, t.dtype, t.device)
    if tuple(output.shape) != tuple(input.shape):
        raise ValueError(f"{op}: {output_name} must have {input_name}'s shape {tuple(input.shape)}, "
                         f"got {tuple(output.shape)}")
    if isinstance(scale, bool) or not isinstance(scale, (int, float)):
        raise TypeError(f"{op}: scale must be a float, got {type(scale).__name__}")
    scale = float(scale)
    if not math.isfinite(scale) or scale <= 0.0:
        raise ValueError(f"{op}: scale must be finite and positive, got {scale}")
    rows = []
    for name, t in ((output_name, output), (input_name, input)):
        n0 = t.shape[0] if t.dim() else 1
        try:
            rows.append(t.view(n0, -1) if n0 else t.reshape(0, 0))
        except RuntimeError:
            raise ValueError(f"{op}: {name}'s elements after its first dim must be contiguous (a cache of whole "
                             f"blocks), got shape {tuple(t.shape)} and strides {t.stride()}") from None
    for name, t in zip((output_name, input_name), rows):
        if t.shape[1] > 1 and t.stride(1) != 1:
            raise ValueError(f"{op}: {name}'s elements after its first dim must be contiguous, got strides "
                             f"{tuple(t.stride())} as (blocks, elements)")
    return rows[0], rows[1], scale


@dataclass(frozen=True)
class ConvertLaunchConfig:
    BLOCK_N: int    # elements a program
    num_warps: int


@functools.lru_cache(maxsize=256)
def convert_launch_config(n_cols: int) -> ConvertLaunchConfig:
    """Elements per program of the cache conversion: a block's row up to 4096 (a streaming
    copy: 4096 elements of 4 warps keep each SM's loads in flight)."""
    block_n = min(4096, next_power_of_2(max(n_cols, 1)))
    return ConvertLaunchConfig(block_n, 4 if block_n >= 2048 else 2)


@launcher(mutates=("output",))
def _launch_cache_convert(output: torch.Tensor, input: torch.Tensor, scale: float,
                          config: ConvertLaunchConfig | None = None) -> None:
    """``_cache_convert_kernel`` over (rows, elements) views of the two caches."""
    n_rows, n_cols = input.shape
    if n_rows == 0 or n_cols == 0:
        return
    cfg = config or convert_launch_config(n_cols)
    block_n = cfg.BLOCK_N
    quant = output.dtype in FP8_DTYPES
    q_min, q_max = fp8_range(output.dtype)
    n_programs = n_rows * cdiv(n_cols, block_n)
    launch(
        _cache_convert_kernel, (n_programs,),
        input, output, input.stride(0), output.stride(0), n_rows, n_cols, scale, q_min, q_max,
        QUANT=quant, SOFT_ROUND=soft_round(output.dtype), BLOCK_N=block_n,
        INT64=max(max_offset(input, output), n_programs * block_n) >= 2**31,
        num_warps=cfg.num_warps,
    )


@public_op(mutates=("output",), no_grad="its output is a (de)quantized cache")
def convert_kv_cache(output: torch.Tensor, input: torch.Tensor, scale: float = 1.0) -> None:
    """A KV cache converted into ``output`` (vLLM's ``convert_fp8``): a bf16 / fp16 / fp32
    ``input`` into an fp8 ``output`` as ``input / scale`` (IEEE division, fp32), saturated to
    the format's range; an fp8 ``input`` into a bf16 / fp16 / fp32 ``output`` as
    ``input * scale`` (fp32, one rounding). Same shape; each tensor's elements after its
    first dim contiguous (whole cache blocks). Returns None (``output`` is written)."""
    op = "convert_kv_cache"
    out2, in2, scale = check_kv_cache_convert(op, output, input, scale)
    if debug_on():
        log_call(op, output=output, input=input, scale=scale)
    _launch_cache_convert(out2, in2, scale)
    return None
