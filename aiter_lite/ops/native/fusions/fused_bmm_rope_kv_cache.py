"""MLA's absorbed-query matmul + RoPE + concat + latent-cache write in plain PyTorch (fp32
math): the reference of ``aiter_lite.ops.triton.fusions.fused_bmm_rope_kv_cache``, same names
and argument orders."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from aiter_lite.ops.native.fusions.fused_kv_cache import fused_qk_rope_cat_and_cache_mla
from aiter_lite.ops.native.quant.mx_quant import dynamic_mxfp4_quant, mxfp4_dequant
from aiter_lite.spec.quant import quant_range


def _bmm(q_nope, w_k, w_k_scale, group, prequant):
    """(B, H, L) fp32: q_nope (H, B, P) @ w_k (H, L, P)^T; prequant: q quantized to w_k's fp8
    per token and ``group`` channels (scale amax / fp8 max), the result times w_k_scale."""
    h, b, p = q_nope.shape
    q = q_nope.float()
    if prequant:
        lo, hi = quant_range(w_k.dtype)
        g = F.pad(q, (0, (-p) % group)).reshape(h, b, -(-p // group), group)
        amax = g.abs().amax(-1, keepdim=True)
        scale = torch.where(amax.isfinite(), amax / hi, float("nan"))  # a NaN or inf: the token's outputs NaN
        inv = torch.where(scale == 0, 0.0, 1.0 / torch.where(scale == 0, 1.0, scale))
        q = ((g * inv).clamp(lo, hi).to(w_k.dtype).float() * scale).reshape(h, b, g.shape[2] * group)[..., :p]
    out = torch.einsum("hbp,hnp->bhn", q, w_k.float())
    return out * w_k_scale.float().reshape(()) if prequant else out


def _rest(op_out, q_pe, k_nope, k_rope, kv_cache, slot_mapping, positions, cos, sin, k_scale, is_neox, out_dtype,
          n_zeros, zeros_last=False):
    if k_scale is not None and not isinstance(k_scale, torch.Tensor):
        k_scale = torch.tensor([float(k_scale)], device=q_pe.device)
    q_out, dq, k_pe_out, zeros = fused_qk_rope_cat_and_cache_mla(op_out.to(out_dtype), q_pe, k_nope, k_rope,
                                                                 kv_cache, slot_mapping, positions, cos, sin, k_scale,
                                                                 is_neox, n_zeros, True, None, None, None, out_dtype)
    return q_out, dq.to(q_pe.dtype), k_pe_out, zeros if zeros_last else kv_cache


def fused_fp4_bmm_rope_cat_and_cache_mla(q_nope, w_k, w_k_scale, q_pe, k_nope, k_rope, kv_cache, slot_mapping,
                                         positions, cos, sin, y=None, transpose_bm=True, prequant=True, y_scale=None,
                                         k_scale=None, is_neox=False, q_out_dtype=None, num_decode_toks_for_zeros=0):
    """(q_out, decode_q_pe_out, k_pe_out, q_nope_zeros_out) (the Triton side's ``config``, its
    tiles, aside): the MXFP4 weights decoded, q_nope
    quantized to MXFP4 and decoded where prequant (a block of 32 holding a NaN or an inf: NaN,
    as the fp8 form's), their product divided by y_scale."""
    h, b, p = q_nope.shape
    w = mxfp4_dequant(w_k.reshape(-1, w_k.shape[2]), w_k_scale.reshape(-1, w_k_scale.shape[2]))
    q = q_nope.float().reshape(h * b, p)
    if prequant and q.numel():
        blocks = F.pad(q, (0, (-p) % 32)).unflatten(-1, (-1, 32))
        bad = (~blocks.isfinite()).any(-1, keepdim=True).expand_as(blocks).flatten(-2)[:, :p]
        q = torch.where(bad, float("nan"), mxfp4_dequant(*dynamic_mxfp4_quant(q)))
    out = torch.einsum("hbp,hnp->bhn", q.reshape(h, b, p), w.reshape(h, -1, p))
    if y_scale is not None:
        out = out * (1.0 / y_scale.float().reshape(()))
    return _rest(out, q_pe, k_nope, k_rope, kv_cache, slot_mapping, positions, cos, sin, k_scale, is_neox,
                 q_out_dtype or q_nope.dtype, num_decode_toks_for_zeros, True)


def fused_fp8_bmm_rope_cat_and_cache_mla(q_nope, w_k, w_k_scale, q_pe, k_nope, k_rope, kv_cache, slot_mapping,
                                         positions, cos, sin, group_size=128, transpose_bm=True,
                                         k_scale=None, is_neox=False, q_out_dtype=torch.bfloat16,
                                         num_decode_toks_for_zeros=0):
    """(q_out, decode_q_pe_out, k_pe_out, kv_cache) (the Triton side's ``config``, its tiles, aside)."""
    return _rest(_bmm(q_nope, w_k, w_k_scale, group_size, True), q_pe, k_nope, k_rope, kv_cache, slot_mapping,
                 positions, cos, sin, k_scale, is_neox, q_out_dtype or torch.bfloat16, num_decode_toks_for_zeros)


def fused_bf16_bmm_rope_cat_and_cache_mla(q_nope, w_k, q_pe, k_nope, k_rope, kv_cache, slot_mapping, positions, cos,
                                          sin, k_scale=None, is_neox=False, q_out_dtype=None,
                                          num_decode_toks_for_zeros=0):
    """(q_out, decode_q_pe_out, k_pe_out, kv_cache)."""
    return _rest(_bmm(q_nope, w_k, None, 0, False), q_pe, k_nope, k_rope, kv_cache, slot_mapping, positions, cos, sin,
                 k_scale, is_neox, q_out_dtype or torch.bfloat16, num_decode_toks_for_zeros)
