"""MLA decode's absorbed query in one launch: ``q_out[..., :L] = q_nope @ W_UK^T`` per head
(the batched matmul) and RoPE + concat + the latent-cache write (as
``fused_qk_rope_cat_and_cache_mla``) in the same grid, under aiter's names:
``fused_fp8_bmm_rope_cat_and_cache_mla`` (fp8 weights, q quantized per token and group of
input channels as aiter's prequant form), ``fused_fp4_bmm_rope_cat_and_cache_mla`` (MXFP4
weights with e8m0 scales, q quantized to MXFP4 or not), and
``fused_bf16_bmm_rope_cat_and_cache_mla`` (bf16 / fp16 weights, this project's; no aiter
counterpart).

Where aiter is limited this does more, and checks it: every argument checked, with a clear
error (aiter: asserts); a group size need not divide qk_nope_head_dim (the last group masked);
the RoPE / cache side as ``fused_qk_rope_cat_and_cache_mla`` (flat or paged caches, bf16 /
fp16 / fp32 / fp8, padding slots, a mixed batch's prefill tokens). The matmul
multiplies bf16 operands with fp32 accumulation on every GPU (fp8 values, and e2m1 values,
whose power-of-2 scales multiply the products, are exact in bf16), so NVIDIA and AMD give
the same products and the fp4 form needs no fp4 matrix instructions.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import torch
from triton.tools.tensor_descriptor import TensorDescriptor

from aiter_lite.ops.triton._triton_kernels.fusions.fused_bmm_rope_kv_cache import _mla_bmm_rope_cache_kernel
from aiter_lite.ops.triton.fusions._common import block_shift, check_out_dtype, fp8_range, max_offset, soft_round
from aiter_lite.ops.triton.fusions.fused_kv_cache import (
    _launch_qk_rope_cat_and_cache_mla,
    _mla_rope_cache_checks,
)
from aiter_lite.ops.triton.quant.mx_quant import E2M1_MAX, MX_BLOCK
from aiter_lite.spec.device import device_profile
from aiter_lite.spec.quant import FP8_DTYPES
from aiter_lite.utils.checks import TRITON_INTERPRET, check_bool, check_int, check_same_device, check_triton_device
from aiter_lite.utils.fast_launch import launch
from aiter_lite.utils.launch import cdiv, next_power_of_2
from aiter_lite.utils.launcher import launcher
from aiter_lite.utils.logger import debug_on, log_call
from aiter_lite.utils.registry import public_op

__all__ = ["fused_fp4_bmm_rope_cat_and_cache_mla", "fused_fp8_bmm_rope_cat_and_cache_mla",
           "fused_bf16_bmm_rope_cat_and_cache_mla",
           "set_use_gemm_splitk_bf16", "BmmLaunchConfig"]

_USE_GEMM_SPLITK_BF16 = False


def set_use_gemm_splitk_bf16(value: bool) -> None:
    """aiter's switch of its fp4 form's split-K partial sums to bf16. Kept for code that calls
    it; nothing here splits K (the fp8 and bf16 forms accumulate every group in fp32)."""
    global _USE_GEMM_SPLITK_BF16
    _USE_GEMM_SPLITK_BF16 = check_bool("set_use_gemm_splitk_bf16", "value", value)


# Past this many tokens the matmul and the RoPE / cache programs take a launch each: one
# launch gives every program the kernel's resources, and the matmul's shared memory (53 to
# 196 KB) then holds the small RoPE / cache programs to one to three an SM. H200, DeepSeek-V3,
# bf16: 334.9 / 87.7 us in one launch against 286.8 / 77.6 in two at 4096 / 1024 tokens; at
# 128 tokens one launch is faster (15.3 against 17.8). On AMD GPUs a launch a side at every
# size: the two sides in one kernel spill registers on gfx942 / gfx950 (fp8 and fp4 forms).
SPLIT_TOKENS = 256


@dataclass(frozen=True)
class BmmLaunchConfig:
    BLOCK_M: int  # tokens a program (tl.dot's 16 at least)
    BLOCK_N: int  # output channels a program
    num_warps: int
    N_SPLITS: int = 0  # programs a head's output channels are split between, at most one a tile (0: ~1024 programs)
    num_stages: int = 0  # software pipelining of the loads (0: Triton's default)
    BLOCK_K: int = 0  # bf16 / fp16: input channels a step (0: up to 64; all of them: q loaded once a program)
    TMA: int = 0  # bf16 / fp16 on Hopper and later: this many persistent programs an SM, on tensor descriptors


@functools.lru_cache(maxsize=256)
def bmm_launch_config(n_tokens: int, n_out: int, n_in: int, prequant: bool = False, fp4: bool = False,
                      tma: bool = False) -> BmmLaunchConfig:
    """Measured on an H200 (DeepSeek-V3's 128 heads, 128 -> 512, the whole op under CUDA
    graphs; torch.bmm's matmul alone 4.6 / 8.9 / 55 / 189 us at 1 / 128 / 1024 / 4096 tokens).
    bf16: at decode 16 or 32 tokens by 64 channels, one tile a program, q stepped 64 channels
    at a time (5.1 us at one token); then 64 tokens by 64 channels, each program loading its
    tokens' q once (all of P up to 128) and walking all L output channels (13.1 us at 128
    tokens against 15.2 for 64 x 128 tiles of one program each). Past 128 tokens on Hopper and
    later (``tma``): 2 persistent programs an SM walking 128 x 128 tiles on tensor
    descriptors, 64 channels a step, five stages (the matmul 232.6 us at 4096 tokens, 81% of
    torch.bmm; 62.1 us, 89%, at 1024; the pointer tiles' best 322 us with the RoPE / cache).
    fp8: each program quantizes its tokens' q once and walks some of the output channels
    (programs for ~1024 in flight): 16 or 32 tokens by 32 channels at decode, 64 by 64 past
    that (the fastest of 64 x 32 / 64 x 64 / 128 x 64 there; none spills in the offline builds).
    fp4: one tile a program, 16 or 32 by 64 at decode, 64 by 64 past that, 4 warps, loads not
    pipelined (the weights' decoding beside the sums spilled at 128 x 128, and on gfx942 /
    gfx950 at 64 x 64 pipelined): 16.1 us at one token, 2216 us at 4096 (the e2m1 decoding
    and q's MXFP4 rounding, redone for every tile, bound it)."""
    if fp4:
        return BmmLaunchConfig(min(64, max(16, next_power_of_2(max(n_tokens, 1)))), 64, 4, N_SPLITS=n_out,
                               num_stages=1)
    if prequant:
        if n_tokens <= 32:
            return BmmLaunchConfig(max(16, next_power_of_2(max(n_tokens, 1))), 32, 4)
        return BmmLaunchConfig(64, 64, 4)
    if n_tokens <= 32:
        return BmmLaunchConfig(max(16, next_power_of_2(max(n_tokens, 1))), 64, 4, N_SPLITS=n_out)
    if tma and n_tokens > 128:
        return BmmLaunchConfig(128, 128, 4, num_stages=5, BLOCK_K=64, TMA=2)
    if next_power_of_2(n_in) > 128:  # q too wide to hold once: 64 channels a step
        return BmmLaunchConfig(64, 128, 4, N_SPLITS=n_out) if n_tokens <= 128 else \
            BmmLaunchConfig(128, 128, 8, N_SPLITS=n_out)
    return BmmLaunchConfig(64, 64, 4, N_SPLITS=1, num_stages=3, BLOCK_K=next_power_of_2(n_in))


@launcher(mutates=("q_out", "kv_cache", "decode_q_pe_out", "k_pe_out", "q_nope_zeros"))
def _launch_mla_bmm_rope_cat_cache(q_nope: torch.Tensor, w_k: torch.Tensor, w_k_scale: torch.Tensor | None,
                                   q_pe: torch.Tensor, k_nope: torch.Tensor, k_rope: torch.Tensor,
                                   q_out: torch.Tensor, kv_cache: torch.Tensor, slot_mapping: torch.Tensor,
                                   pos: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
                                   k_scale: torch.Tensor | None, decode_q_pe_out: torch.Tensor,
                                   k_pe_out: torch.Tensor, q_nope_zeros: torch.Tensor, geometry: list[int],
                                   flags: list[bool], group: int, prequant: bool,
                                   config: BmmLaunchConfig | None = None,
                                   w_blocks: torch.Tensor | None = None) -> None:
    """The B tokens' q_out[:, h, :L] = q_nope[h] @ w_k[h]^T (times w_k_scale) for every head
    h and, in the same grid's further programs, RoPE + concat + the latent-cache write as
    ``fused_qk_rope_cat_and_cache_mla`` with q_out's latent part in place: one launch up to
    SPLIT_TOKENS tokens, a launch a side past that; another launch for slot_mapping's tokens
    past B (a mixed batch's prefill, K into the cache unrotated). ``w_blocks``: w_k is MXFP4 (packed along P) and these its e8m0
    scales; w_k_scale (aiter's y_scale) then divides the product. ``geometry`` / ``flags``: as
    ``_launch_qk_rope_cat_and_cache_mla``'s."""
    qh, b, p = q_nope.shape
    n = w_k.shape[1]
    if slot_mapping.shape[0] > b:  # the prefill tokens' cache writes
        _launch_qk_rope_cat_and_cache_mla(q_out[:, :, :n], q_pe, k_nope, k_rope, q_out, kv_cache, slot_mapping, pos,
                                          cos, sin, k_scale, decode_q_pe_out, k_pe_out, q_nope_zeros, geometry,
                                          flags, q_nope_in_place=True, rope_part=False)
    if b == 0:
        return
    n_rows, stride_r, stride_f, half, n_cache_slots, block_size, s_blk, s_off, s_h, s_d, shuffle, n_zeros = geometry
    is_neox, reuse, _ = flags
    fp4 = w_blocks is not None
    profile = device_profile(q_nope.device)
    # the TMA tiles' five stages take 196 KB of shared memory (an RTX 50's 99 KB: pointer tiles)
    cfg = config or bmm_launch_config(b, n, p, prequant, fp4, profile.tma and profile.smem_per_block >= 200 * 1024)
    step = MX_BLOCK if fp4 else group if prequant else cfg.BLOCK_K or min(next_power_of_2(p), 64)
    m_blocks, n_blocks = cdiv(b, cfg.BLOCK_M), cdiv(n, cfg.BLOCK_N)
    # each program as many output-channel tiles as keep some 1024 programs in flight
    n_splits = min(n_blocks, cfg.N_SPLITS or max(1, cdiv(1024, m_blocks * qh)))
    tiles = cdiv(n_blocks, n_splits)
    n_bmm = m_blocks * cdiv(n_blocks, tiles) * qh
    descs = (None, None, None)
    tma = bool(cfg.TMA) and (profile.tma or profile.interpreter) and not (prequant or fp4) \
        and q_out.dtype == q_nope.dtype and _tma_aligned(q_nope, w_k, q_out)
    if tma:  # persistent programs, at most one a tile
        n_bmm = min(n_bmm, cfg.TMA * profile.sms, m_blocks * n_blocks * qh)
        descs = (TensorDescriptor(q_nope, list(q_nope.shape), list(q_nope.stride()), [1, cfg.BLOCK_M, step]),
                 TensorDescriptor(w_k, list(w_k.shape), list(w_k.stride()), [1, cfg.BLOCK_N, step]),
                 TensorDescriptor(q_out, [b, qh, n], list(q_out.stride()), [cfg.BLOCK_M, 1, cfg.BLOCK_N]))
    q_min, q_max = (-E2M1_MAX, E2M1_MAX) if fp4 else fp8_range(w_k.dtype)
    o_min, o_max = fp8_range(q_out.dtype)
    c_min, c_max = fp8_range(kv_cache.dtype)
    wsb = w_blocks if fp4 else w_k
    kh, d2 = k_nope.shape[1], k_rope.shape[2]
    # q_pe's rotation and the cache writes: some 4096 elements a program (of q_pe, of k)
    bh_q, bh_k = min(next_power_of_2(qh), 16), min(next_power_of_2(kh), 16)
    # (with the decode tokens' zeros the q programs also write L zeros a head: sized by L + R then)
    bt_q = max(1, min(next_power_of_2(b), 4096 // (bh_q * next_power_of_2(d2 + (n if n_zeros else 0)))))
    bt_k = max(1, min(next_power_of_2(b), 4096 // (bh_k * next_power_of_2(n + d2))))
    n_q, n_k = cdiv(b, bt_q) * cdiv(qh, bh_q), cdiv(b, bt_k) * cdiv(kh, bh_k)
    sb = k_rope.stride()
    sb = (sb[0], 0 if k_rope.shape[1] == 1 else sb[1], sb[2])
    zeros = q_nope_zeros if n_zeros else None
    meta = dict(
        PREQUANT=prequant, HAS_WS=w_k_scale is not None, O_FP8=q_out.dtype in FP8_DTYPES,
        SOFT_ROUND=soft_round(w_k.dtype if prequant and not fp4 else q_out.dtype, q_out.dtype), GROUP=step,
        ONCE=step >= p and not fp4, N_LOOP=tiles > 1, BLOCK_M=cfg.BLOCK_M, BLOCK_N=cfg.BLOCK_N,
        DOT_FP32=TRITON_INTERPRET,
        TILE64=max(q_nope.stride(1), q_out.stride(0), w_k.stride(1)) * max(cfg.BLOCK_M, cfg.BLOCK_N) + p >= 2**31,
        W_FP4=fp4, IS_NEOX=is_neox, REUSE=reuse, HAS_SCALE=k_scale is not None, C_FP8=kv_cache.dtype.itemsize == 1,
        C_SOFT_ROUND=soft_round(kv_cache.dtype, q_out.dtype), HALF=max(half, 1),
        BLOCK_HALF=next_power_of_2(max(half, 1)), BLOCK_D1=next_power_of_2(n), BLOCK_D2=next_power_of_2(d2),
        BLOCK_T=bt_q, BLOCK_H=bh_q, BLOCK_TK=bt_k, BLOCK_HK=bh_k,
        INT64=max_offset(q_pe, k_nope, k_rope, q_out, k_pe_out, decode_q_pe_out) >= 2**31, SHUFFLE=shuffle,
        **block_shift(block_size),
        **({"TMA": True, "BLOCK_K": step, "STAGES": cfg.num_stages or 3} if tma else {}))
    stages = {"num_stages": cfg.num_stages} if cfg.num_stages and not tma else {}

    def go(grid: int, matmul_programs: int, parts: int, warps: int, **options) -> None:
        launch(_mla_bmm_rope_cache_kernel, (grid,),
               q_nope, w_k, q_out if w_k_scale is None else w_k_scale, q_out, wsb, *descs,
               q_nope.stride(0), q_nope.stride(1), w_k.stride(0), w_k.stride(1), *q_out.stride(),
               *(wsb.stride() if fp4 else (0, 0, 0)),
               b, qh, n, p, tiles, q_min, q_max, o_min, o_max, matmul_programs,
               q_pe, k_nope, k_rope, kv_cache, slot_mapping, pos, cos, sin, kv_cache if k_scale is None else k_scale,
               *q_pe.stride(), *k_nope.stride(), *sb, s_blk, s_off, s_h, s_d, stride_r, stride_f, n_cache_slots,
               block_size, n_rows, kh, d2, c_min, c_max,
               decode_q_pe_out if zeros is not None else None,
               *(decode_q_pe_out.stride() if zeros is not None else (0,) * 3),
               k_pe_out, *k_pe_out.stride(), zeros, *(zeros.stride() if zeros is not None else (0,) * 3), n_zeros,
               n_q, **meta, PARTS=parts, num_warps=warps, **options)

    # one launch where launch latency is most of the time; not on AMD GPUs nor the RTX 50 (99 KB
    # of shared memory), where the two sides in one kernel spill registers
    if b <= SPLIT_TOKENS and profile.backend != "hip" and profile.smem_per_block >= 160 * 1024:
        go(n_bmm + n_q + n_k, n_bmm, 3, cfg.num_warps, **stages)
    else:  # each side with its own resources (module doc)
        go(n_bmm, n_bmm, 1, cfg.num_warps, **stages)
        go(n_q + n_k, 0, 2, 4)


def _tma_aligned(*tensors: torch.Tensor) -> bool:
    """Each tensor's base and strides but the last (unit) at 16 bytes, as tensor descriptors need."""
    return all(t.stride(-1) == 1 and t.data_ptr() % 16 == 0
               and all(s * t.element_size() % 16 == 0 for s in t.stride()[:-1]) for t in tensors)


def _bmm_rope_cat_cache(op: str, q_nope, w_k, w_k_scale, q_pe, k_nope, k_rope, kv_cache, slot_mapping, positions,
                        cos, sin, group: int, k_scale, is_neox, q_out_dtype, num_decode_toks_for_zeros,
                        prequant: bool, config: BmmLaunchConfig | None = None,
                        w_blocks: torch.Tensor | None = None) -> tuple:
    """The three forms' checks and launches. fp8 / bf16: w_k (H, L, P), w_k_scale the fp8
    weights' per-tensor scale (fp8); fp4 (``w_blocks`` given): w_k packed MXFP4 (H, L, P / 2),
    w_blocks its e8m0 scales (H, L, ceil(P / 32)), w_k_scale aiter's y_scale (or None). Returns
    aiter's four outputs: the fp4 form's fourth is the zeros, the others' the cache."""
    fp4 = w_blocks is not None
    if not isinstance(q_nope, torch.Tensor):
        raise TypeError(f"{op}: q_nope must be a torch.Tensor, got {type(q_nope).__name__}")
    if q_nope.dtype not in ((torch.bfloat16, torch.float16, torch.float32) if prequant else
                            (torch.bfloat16, torch.float16)):
        raise TypeError(f"{op}: q_nope must be {'bf16, fp16 or fp32' if prequant else 'bf16 or fp16'}, got "
                        f"{q_nope.dtype}")
    check_triton_device(op, "q_nope", q_nope)
    if q_nope.dim() != 3:
        raise ValueError(f"{op}: q_nope must be 3-D (heads, tokens, qk_nope_head_dim), got shape "
                         f"{tuple(q_nope.shape)}")
    if q_nope.stride(2) != 1:
        raise ValueError(f"{op}: q_nope's channels must be contiguous (last stride 1), got strides "
                         f"{tuple(q_nope.stride())}")
    qh, b, p = q_nope.shape
    if not isinstance(w_k, torch.Tensor):
        raise TypeError(f"{op}: w_k must be a torch.Tensor, got {type(w_k).__name__}")
    check_same_device(op, "w_k", w_k, "q_nope", q_nope)
    if fp4:
        lora = _check_fp4_weights(op, q_nope, w_k, w_blocks, qh, p)
    else:
        lora = _check_weights(op, w_k, prequant, q_nope.dtype, qh, p)
    if (prequant and not fp4) or (fp4 and w_k_scale is not None):
        name, what = ("y_scale", "the product's divisor") if fp4 else ("w_k_scale", "the weights' per-tensor scale")
        if not isinstance(w_k_scale, torch.Tensor) or not w_k_scale.dtype.is_floating_point \
                or w_k_scale.dtype in FP8_DTYPES:
            raise TypeError(f"{op}: {name} must be a one-element float tensor ({what}), got "
                            f"{type(w_k_scale).__name__ if not isinstance(w_k_scale, torch.Tensor) else w_k_scale.dtype}")
        if w_k_scale.numel() != 1:
            raise ValueError(f"{op}: {name} must have one element, got shape {tuple(w_k_scale.shape)}")
        check_same_device(op, name, w_k_scale, "q_nope", q_nope)
    group = check_int(op, "group_size", group, 16, 4096)
    if group & (group - 1):
        raise ValueError(f"{op}: group_size must be a power of 2, got {group}")
    is_neox = check_bool(op, "is_neox", is_neox)
    n_zeros = check_int(op, "num_decode_toks_for_zeros", num_decode_toks_for_zeros, 0, b)
    if k_scale is not None and not isinstance(k_scale, torch.Tensor):  # aiter takes a float too
        if isinstance(k_scale, bool) or not isinstance(k_scale, (int, float)):
            raise TypeError(f"{op}: k_scale must be None, a number or a one-element tensor, got "
                            f"{type(k_scale).__name__}")
        k_scale = torch.tensor([float(k_scale)], dtype=torch.float32, device=q_nope.device)
    k = _mla_rope_cache_checks(op, "q_nope", q_nope, b, qh, lora, "w_k's (kv_lora_rank)", q_pe, k_nope, k_rope,
                               kv_cache, slot_mapping, positions, cos, sin, k_scale, False, "positions", "k_rope")
    tab, reuse, half, pos, slot_mapping, n_cache_slots, block_size, strides, shuffle = k
    bk, kh, d2 = k_rope.shape
    out_dtype = torch.bfloat16 if q_out_dtype is None else q_out_dtype
    check_out_dtype(op, "q_out_dtype", out_dtype, q_nope.device)
    q_out = torch.empty((b, qh, lora + d2), dtype=out_dtype, device=q_nope.device)
    decode_q_pe_out = torch.empty((n_zeros, qh, d2), dtype=q_pe.dtype, device=q_nope.device)
    k_pe_out = torch.empty((bk, kh, d2), dtype=k_rope.dtype, device=q_nope.device)
    zeros = torch.empty((n_zeros, qh, lora), dtype=q_nope.dtype, device=q_nope.device)
    if debug_on():
        log_call(op, q_nope=q_nope, w_k=w_k, w_k_scale=w_blocks if fp4 else w_k_scale,
                 **({"y_scale": w_k_scale, "prequant": prequant} if fp4 else {}), q_pe=q_pe, k_nope=k_nope,
                 k_rope=k_rope, kv_cache=kv_cache, slot_mapping=slot_mapping, positions=pos, cos=tab.cos, sin=tab.sin,
                 **({} if fp4 else {"group_size": group}), k_scale=k_scale, is_neox=is_neox, q_out_dtype=out_dtype,
                 num_decode_toks_for_zeros=n_zeros)
    _launch_mla_bmm_rope_cat_cache(
        q_nope, w_k, w_k_scale if prequant or fp4 else None, q_pe, k_nope, k_rope, q_out, kv_cache, slot_mapping, pos,
        tab.cos, tab.sin, k_scale, decode_q_pe_out, k_pe_out, zeros,
        [tab.rows, tab.stride_r, tab.stride_f, half, n_cache_slots, block_size, *strides, shuffle, n_zeros],
        [is_neox, reuse, False], group, prequant, config, w_blocks)
    return q_out, decode_q_pe_out, k_pe_out, zeros if fp4 else kv_cache


def _check_weights(op: str, w_k, prequant: bool, q_dtype: torch.dtype, qh: int, p: int) -> int:
    """The fp8 (``prequant``) or bf16 / fp16 (q's dtype) weights (qh, L, P) checked; returns L."""
    if prequant and w_k.dtype not in FP8_DTYPES:
        raise TypeError(f"{op}: w_k must be fp8 ({', '.join(map(str, FP8_DTYPES))}), got {w_k.dtype}")
    if not prequant and w_k.dtype != q_dtype:
        raise TypeError(f"{op}: w_k must have q_nope's dtype {q_dtype}, got {w_k.dtype}")
    if w_k.dim() != 3 or w_k.shape[0] != qh or w_k.shape[2] != p or w_k.stride(2) != 1:
        raise ValueError(f"{op}: w_k must be (heads, kv_lora_rank, qk_nope_head_dim) = ({qh}, L, {p}) (q_nope's heads "
                         f"and channels) with unit last stride, got shape {tuple(w_k.shape)} strides "
                         f"{tuple(w_k.stride())}")
    return w_k.shape[1]


def _check_fp4_weights(op: str, q_nope, w_k, w_blocks, qh: int, p: int) -> int:
    """MXFP4 weights (qh, L, P / 2) packed along P and their e8m0 scales (qh, L, ceil(P / 32))
    checked; returns L."""
    if p % 2:
        raise ValueError(f"{op}: q_nope's qk_nope_head_dim must be even (MXFP4 packs two channels a byte), got {p}")
    for name, t in (("w_k", w_k), ("w_k_scale", w_blocks)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{op}: {name} must be a torch.Tensor, got {type(t).__name__}")
        if t.dtype != torch.uint8:
            raise TypeError(f"{op}: {name} must be uint8 ({'packed e2m1' if name == 'w_k' else 'e8m0'} bytes), got "
                            f"{t.dtype}")
        check_same_device(op, name, t, "q_nope", q_nope)
    if w_k.dim() != 3 or w_k.shape[0] != qh or w_k.shape[2] != p // 2 or w_k.stride(2) != 1:
        raise ValueError(f"{op}: w_k must be (heads, kv_lora_rank, qk_nope_head_dim / 2) = ({qh}, L, {p // 2}) packed "
                         f"e2m1 with unit last stride, got shape {tuple(w_k.shape)} strides {tuple(w_k.stride())}")
    lora = w_k.shape[1]
    if tuple(w_blocks.shape) != (qh, lora, cdiv(p, MX_BLOCK)):
        raise ValueError(f"{op}: w_k_scale must be (heads, kv_lora_rank, qk_nope_head_dim / 32) = "
                         f"({qh}, {lora}, {cdiv(p, MX_BLOCK)}) e8m0 scales, got shape {tuple(w_blocks.shape)}")
    return lora


@public_op(mutates=("kv_cache",), no_grad="it writes a KV cache (no backward)")
def fused_fp4_bmm_rope_cat_and_cache_mla(q_nope: torch.Tensor, w_k: torch.Tensor, w_k_scale: torch.Tensor,
                                         q_pe: torch.Tensor, k_nope: torch.Tensor, k_rope: torch.Tensor,
                                         kv_cache: torch.Tensor, slot_mapping: torch.Tensor,
                                         positions: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
                                         y: torch.Tensor | None = None, transpose_bm: bool = True,
                                         prequant: bool = True, y_scale: torch.Tensor | None = None,
                                         config: str | BmmLaunchConfig | None = None,
                                         k_scale: torch.Tensor | None = None, is_neox: bool = False,
                                         q_out_dtype: torch.dtype | None = None,
                                         num_decode_toks_for_zeros: int = 0) -> tuple:
    """(q_out, decode_q_pe_out, k_pe_out, q_nope_zeros_out) as aiter returns them: q_out (B, H,
    L + R) = cat(q_nope @ W^T / y_scale, rope(q_pe)) in ``q_out_dtype`` (q_nope's by default),
    W the MXFP4 weights w_k (H, L, P / 2) (two e2m1 values a byte along P, the low nibble
    first) with their e8m0 scales w_k_scale (H, L, ceil(P / 32)); ``prequant``: q_nope (H, B,
    P) quantized to MXFP4 per token and 32 channels first, as ``dynamic_mxfp4_quant``; the
    RoPE / cache side as ``fused_qk_rope_cat_and_cache_mla``. ``y`` (aiter: unused) must be
    None or a tensor, ``transpose_bm`` a bool; ``config``: aiter's serialized tuning (ignored)
    or a ``BmmLaunchConfig``.

    Where aiter is limited this does more: aiter needs fp4 matrix instructions (MI355,
    Blackwell) and asserts prequant; here the e2m1 values and their power-of-2 scales enter
    ``tl.dot`` as bf16 (exact) with fp32 sums on every GPU, and prequant=False multiplies
    q_nope (bf16 / fp16) as it is."""
    op = "fused_fp4_bmm_rope_cat_and_cache_mla"
    if not isinstance(w_k_scale, torch.Tensor):
        raise TypeError(f"{op}: w_k_scale must be a torch.Tensor (the weights' e8m0 scales), got "
                        f"{type(w_k_scale).__name__}")
    if y is not None and not isinstance(y, torch.Tensor):
        raise TypeError(f"{op}: y must be None or a torch.Tensor (unused, as in aiter), got {type(y).__name__}")
    check_bool(op, "transpose_bm", transpose_bm)
    prequant = check_bool(op, "prequant", prequant)
    if config is not None and not isinstance(config, (str, BmmLaunchConfig)):
        raise TypeError(f"{op}: config must be None, a str or a BmmLaunchConfig, got {type(config).__name__}")
    return _bmm_rope_cat_cache(op, q_nope, w_k, y_scale, q_pe, k_nope, k_rope, kv_cache, slot_mapping, positions, cos,
                               sin, MX_BLOCK, k_scale, is_neox,
                               q_nope.dtype if q_out_dtype is None and isinstance(q_nope, torch.Tensor) else q_out_dtype,
                               num_decode_toks_for_zeros, prequant,
                               config if isinstance(config, BmmLaunchConfig) else None, w_blocks=w_k_scale)


@public_op(mutates=("kv_cache",), no_grad="it writes a KV cache (no backward)")
def fused_fp8_bmm_rope_cat_and_cache_mla(q_nope: torch.Tensor, w_k: torch.Tensor, w_k_scale: torch.Tensor,
                                         q_pe: torch.Tensor, k_nope: torch.Tensor, k_rope: torch.Tensor,
                                         kv_cache: torch.Tensor, slot_mapping: torch.Tensor,
                                         positions: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
                                         group_size: int = 128, transpose_bm: bool = True,
                                         config: dict | BmmLaunchConfig | None = None,
                                         k_scale: torch.Tensor | None = None,
                                         is_neox: bool = False, q_out_dtype: torch.dtype | None = torch.bfloat16,
                                         num_decode_toks_for_zeros: int = 0) -> tuple:
    """(q_out, decode_q_pe_out, k_pe_out, kv_cache) as aiter returns them: q_out (B, H, L + R) =
    cat(q_nope @ W^T, rope(q_pe)) with q_nope (H, B, P) quantized per token and ``group_size``
    channels to w_k's fp8 format (scale = amax / fp8 max), w_k (H, L, P) fp8 times its
    per-tensor ``w_k_scale``; the RoPE / cache side as ``fused_qk_rope_cat_and_cache_mla``
    (k_rope for k_pe, ``positions`` for pos). ``transpose_bm`` (q_out is (B, H, ...) either way,
    as aiter's fp8 form writes it) is checked only for its type; ``config``: aiter's tuning dict
    (ignored: the launch picks its own tiles) or a ``BmmLaunchConfig`` that pins them."""
    op = "fused_fp8_bmm_rope_cat_and_cache_mla"
    check_bool(op, "transpose_bm", transpose_bm)
    if config is not None and not isinstance(config, (dict, BmmLaunchConfig)):
        raise TypeError(f"{op}: config must be None, a dict or a BmmLaunchConfig, got {type(config).__name__}")
    return _bmm_rope_cat_cache(op, q_nope, w_k, w_k_scale, q_pe, k_nope, k_rope, kv_cache, slot_mapping, positions,
                               cos, sin, group_size, k_scale, is_neox, q_out_dtype, num_decode_toks_for_zeros, True,
                               config if isinstance(config, BmmLaunchConfig) else None)


@public_op(mutates=("kv_cache",), no_grad="it writes a KV cache (no backward)")
def fused_bf16_bmm_rope_cat_and_cache_mla(q_nope: torch.Tensor, w_k: torch.Tensor, q_pe: torch.Tensor,
                                          k_nope: torch.Tensor, k_rope: torch.Tensor, kv_cache: torch.Tensor,
                                          slot_mapping: torch.Tensor, positions: torch.Tensor, cos: torch.Tensor,
                                          sin: torch.Tensor, k_scale: torch.Tensor | None = None,
                                          is_neox: bool = False, q_out_dtype: torch.dtype | None = None,
                                          num_decode_toks_for_zeros: int = 0,
                                          config: BmmLaunchConfig | None = None) -> tuple:
    """The fp8 form's outputs with bf16 / fp16 weights w_k (H, L, P) of q_nope's dtype, no
    quantization: q_out (B, H, L + R) = cat(q_nope @ W^T, rope(q_pe)) in ``q_out_dtype``
    (bf16 by default). ``config``: a ``BmmLaunchConfig`` that pins the tiles."""
    op = "fused_bf16_bmm_rope_cat_and_cache_mla"
    if config is not None and not isinstance(config, BmmLaunchConfig):
        raise TypeError(f"{op}: config must be None or a BmmLaunchConfig, got {type(config).__name__}")
    return _bmm_rope_cat_cache(op, q_nope, w_k, None, q_pe, k_nope, k_rope, kv_cache, slot_mapping, positions, cos,
                               sin, 64, k_scale, is_neox, q_out_dtype, num_decode_toks_for_zeros, False, config)
