"""Every entry kernel lowered for sm_90 with its float scalars typed fp64, on any machine.

torch.compile (inductor compiling a user Triton kernel, or a launch it traced) hands a
kernel the Python floats of a launch typed fp64. A kernel that does not pin them to fp32
first either fails to build (fp32-only intrinsics such as ``tl.math.div_rn``; fp64 to fp8
conversions, which sm_90 lacks) or computes in fp64, at a fraction of the fp32 rate.

Nothing here needs a GPU. The wrappers are called on meta tensors with every
``kernel[grid](...)`` recorded instead of launched (``fast_launch.record``): the launches,
their arguments and constexprs are the wrappers' own (every registered op at tiny sizes,
plus the regimes tiny sizes leave out, at sizes that select them on an H100: launch configs
chosen for the H100 profile, ``utils.device.use_profile``). A launch is
typed as Triton's binder types it (its specialization rules, alignment included), its
Python floats as fp64, and lowered to Triton IR for ``GPUTarget("cuda", 90, 32)`` (code
generation and the TTIR passes; the machine-code builds of every kernel for every target
are scripts/check_targets.py's): a kernel with float scalars once per regime of its
constexpr flags, any other kernel once. That IR must hold no fp64 operation but each such
parameter's conversion to fp32 (the pin): an fp64 division or an fp64-to-fp8 conversion
shows there, before the stage that would refuse to build it.

The kernels must be JITFunctions, so this runs in a process without TRITON_INTERPRET:
``python -m op_tests.utils.kernel_builds`` prints one JSON object a build, then one for
the entry kernels found (op_tests/test_kernel_scalars.py runs it).
"""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Callable

import torch

KERNEL_PACKAGE = "aiter_lite.ops.triton._triton_kernels"


def offline() -> None:
    """Launches recorded, not run (for the rest of the process)."""
    from triton.runtime.jit import JITFunction

    from aiter_lite.utils import checks

    if os.environ.get("TRITON_INTERPRET", "0") == "1":
        raise RuntimeError("kernel_builds needs JITFunctions: run it without TRITON_INTERPRET")
    JITFunction.__getitem__ = lambda self, grid: (lambda *args, **meta: None)
    checks.LAUNCH_DEVICES.add("meta")  # nothing is launched: the wrappers run on meta tensors


def _meta(*shape, dtype=torch.bfloat16, grad=False) -> torch.Tensor:
    return torch.empty(*shape, device="meta", dtype=dtype, requires_grad=grad)


def _norm_backward(op, n_rows: int, n_cols: int, layer_norm: bool = False, **kw) -> Callable:
    """An RMSNorm / LayerNorm forward and backward (the backward's launches recorded too);
    ``kw``: RMSNorm's keywords (casting_mode)."""
    def run():
        x, w = _meta(n_rows, n_cols, grad=True), _meta(n_cols, grad=True)
        y = op(x, w, _meta(n_cols, grad=True), 1e-5, None, 0.0) if layer_norm else op(x, w, 1e-6, 0.0, **kw)
        y.backward(torch.empty_like(y))
    return run


def _norm_add_backward(op: dict, n_rows: int, n_cols: int, layer_norm: bool = False, **kw) -> Callable:
    """A fused add + norm forward and backward from both outputs (the backward adds
    residual_out's gradient in its kernel); ``kw``: RMSNorm's keywords (casting_mode)."""
    def run():
        x, r, w = _meta(n_rows, n_cols, grad=True), _meta(n_rows, n_cols, grad=True), _meta(n_cols, grad=True)
        out, r_out = _meta(n_rows, n_cols), _meta(n_rows, n_cols)
        if layer_norm:
            op["layernorm2d_fwd_with_add"](out, x, r, r_out, w, _meta(n_cols, grad=True), 1e-5, None, 0.0)
        else:
            op["rmsnorm2d_fwd_with_add"](out, x, r, r_out, w, 1e-6, 0.0, **kw)
        torch.autograd.backward([out, r_out], [torch.empty_like(out), torch.empty_like(r_out)])
    return run


def _backward(forward: Callable) -> Callable:
    """``forward()``'s result backpropagated (the backward's launches recorded too)."""
    def run():
        y = forward()
        y.backward(torch.empty_like(y))
    return run


def cases(fp8: torch.dtype = torch.float8_e4m3fn, tiny: bool = True) -> list[tuple[str, Callable]]:
    """(name, call): every registered op at tiny sizes (bf16 activations, ``fp8`` outputs;
    ``tiny``), then the regimes tiny sizes leave out, at sizes that select them on an H100
    (and on the other profiles: a split row's segments are fewer than any's SMs)."""
    from aiter_lite.library import OPS
    from aiter_lite.ops.triton.fusions import (
        fused_clamp_act_mul,
        fused_mul_add,
        fused_qk_rope_cat_and_cache_mla,
        fused_qk_rope_cosine_cache_llama,
        fused_qkv_split_qk_norm_rope_cache,
        fused_reduce_qk_norm_rope_swa_write,
        fused_routing_from_topk,
    )
    from aiter_lite.ops.triton.quant import fused_fp8_quant as ffq
    from aiter_lite.ops.triton.rope.rope_3d import rope_fwd_3d
    from aiter_lite.ops.triton.fusions.fused_bmm_rope_kv_cache import (
        fused_bf16_bmm_rope_cat_and_cache_mla,
        fused_fp4_bmm_rope_cat_and_cache_mla,
        fused_fp8_bmm_rope_cat_and_cache_mla,
    )
    from aiter_lite.ops.triton.quant import mx_quant as mxq
    from aiter_lite.ops.triton import sampling as smp
    from aiter_lite.vllm import ops as vllm_ops
    from op_benchmarks.utils.op_args import TINY, op_args

    f32 = torch.float32
    out = []
    for name, spec in OPS.items() if tiny else ():
        args = op_args(name, TINY, "meta", torch.bfloat16, fp8)
        out.append((f"{name} tiny", lambda fn=spec.triton, args=args: fn(*args)))

    op = {name: spec.triton for name, spec in OPS.items()}
    cache_args = op_args("fused_qk_rope_reshape_and_cache", TINY, "meta", torch.bfloat16, fp8)
    q, k, v, kc, vc, slots, pos, cos, sin = cache_args[:9]
    mla = op_args("cat_and_cache_mla", TINY, "meta", torch.bfloat16, fp8)
    out += [
        ("rms_norm looped", lambda: op["rms_norm"](_meta(264, 65536), _meta(65536), 1e-6, 0.0)),
        ("layer_norm looped, width compiled in",
         lambda: op["layer_norm"](_meta(264, 65536), _meta(65536), _meta(65536), 1e-5, None, 0.0)),
        ("rms_norm split", lambda: op["rms_norm"](_meta(4, 262144), _meta(262144), 1e-6, 1.0)),
        ("fused_add_rms_norm split",
         lambda: op["fused_add_rms_norm"](_meta(4, 65536), _meta(4, 65536), _meta(65536), 1e-6, 0.0)),
        ("rms_norm backward", _norm_backward(op["rms_norm"], 8, 4096)),
        ("layer_norm backward", _norm_backward(op["layer_norm"], 8, 4096, layer_norm=True)),
        ("layer_norm backward looped", _norm_backward(op["layer_norm"], 4, 65536, layer_norm=True)),
        ("layernorm2d_fwd_with_add backward", _norm_add_backward(op, 8, 4096, layer_norm=True)),
        ("rmsnorm2d_fwd_with_add backward, residual_out's gradient added", _norm_add_backward(op, 8, 4096)),
        ("layernorm2d_fwd_with_add backward looped", _norm_add_backward(op, 4, 65536, layer_norm=True)),
        # Llama casting: x * rstd rounded to the input's dtype before the weight (every forward
        # regime), the fused add's sum normalized as stored, dweight from the rounded values
        ("rms_norm llama", lambda: op["rms_norm"](_meta(8, 4096), _meta(4096), 1e-6, 0.0, casting_mode="llama")),
        ("rms_norm llama looped, width compiled in",
         lambda: op["rms_norm"](_meta(264, 32768), _meta(32768), 1e-6, 0.0, casting_mode="llama")),
        ("rms_norm llama looped",
         lambda: op["rms_norm"](_meta(264, 65536), _meta(65536), 1e-6, 0.0, casting_mode="llama")),
        ("fused_add_rms_norm llama split",
         lambda: op["fused_add_rms_norm"](_meta(4, 65536), _meta(4, 65536), _meta(65536), 1e-6, 0.0,
                                          casting_mode="llama")),
        ("rms_norm llama backward", _norm_backward(op["rms_norm"], 8, 4096, casting_mode="llama")),
        ("rms_norm llama backward looped", _norm_backward(op["rms_norm"], 4, 65536, casting_mode="llama")),
        ("rmsnorm2d_fwd_with_add llama backward", _norm_add_backward(op, 8, 4096, casting_mode="llama")),
        *[(f"act_and_mul backward, {a}",
           _backward(lambda a=a: op["act_and_mul"](_meta(8, 4096), _meta(8, 2 * 4096, grad=True), a)))
          for a in ("silu", "gelu", "gelu_tanh", "relu")],
        ("act_mul backward, gate and up apart",
         _backward(lambda: op["act_mul"](_meta(8, 4096, grad=True), _meta(8, 4096, grad=True), "silu"))),
        ("silu backward", _backward(lambda: op["silu"](_meta(8, 4096, grad=True)))),
        ("gelu tanh backward", _backward(lambda: op["gelu"](_meta(8, 4096, grad=True), "tanh"))),
        ("gelu backward", _backward(lambda: op["gelu"](_meta(8, 4096, grad=True), "none"))),
        ("relu backward", _backward(lambda: op["relu"](_meta(8, 4096, grad=True)))),
        ("softmax split", lambda: op["softmax"](_meta(4, 1 << 17), -1)),
        ("log_softmax looped", lambda: op["log_softmax"](_meta(4, 1 << 22), -1)),
        *[(f"{name} backward, {regime}",
           _backward(lambda name=name, shape=shape: op[name](_meta(*shape, grad=True), -1)))
          for name in ("softmax", "log_softmax")
          for regime, shape in (("rows in registers", (4096, 100)), ("one row in registers", (256, 1000)),
                                ("widest row in registers", (8, 16384)),
                                ("looped in whole chunks", (2048, 32768)), ("split", (4, 1 << 17)),
                                ("split, wide segments", (4, 1 << 18)), ("looped", (4, 1 << 22)))],
        *[(f"cross_entropy backward, {what}",
           _backward(lambda kw=kw: op["cross_entropy"](_meta(8, 128256, grad=True), _meta(8, dtype=torch.int64),
                                                        **kw)))
          for what, kw in (("plain", {}), ("smoothed, softcapped", dict(label_smoothing=0.1, softcap=30.0)))],
        *[(f"fused_linear_cross_entropy backward, {reduction}",
           _backward(lambda reduction=reduction: op["fused_linear_cross_entropy"](
               _meta(16, 256, grad=True), _meta(1000, 256, grad=True), _meta(16, dtype=torch.int64),
               reduction=reduction, softcap=30.0)))
          for reduction in ("mean", "none")],
        ("topk_softmax, 256 routed and 2 shared experts (sigmoid), source rows",
         lambda: op["topk_softmax"](_meta(8, 10, dtype=f32), _meta(8, 8, dtype=torch.int32),
                                    _meta(8, 8, dtype=torch.int32), _meta(8, 258), True, 2, "sigmoid")),
        ("fused_rms_fp8_group_quant, DeepSeek-V3 q_a / kv_a, residual, unquantized, transposed scales",
         lambda: ffq.fused_rms_fp8_group_quant(_meta(8, 1536), _meta(1536), 1e-6, _meta(8, 512), _meta(512), 1e-6,
                                               128, fp8, _meta(8, 1536), True, True)),
        ("fused_rms_fp8_group_quant, the widest rows",
         lambda: ffq.fused_rms_fp8_group_quant(_meta(8, 16384), _meta(16384), 1e-6, _meta(8, 16384), _meta(16384),
                                               1e-6, 128, fp8, _meta(8, 16384))),
        ("fused_rms_fp8_per_tensor_static_quant, rounded",
         lambda: ffq.fused_rms_fp8_per_tensor_static_quant(_meta(8, 7168), _meta(7168), 1e-6, _meta(1, dtype=f32),
                                                           dtype_quant=fp8, rmsnorm_convert_to_inp1_type=True)),
        ("fused_reduce_rms_fp8_group_quant, 4 splits of q_a / kv_a, k_pe summed, residual, unquantized",
         lambda: ffq.fused_reduce_rms_fp8_group_quant(_meta(4, 8, 1536, dtype=f32), _meta(1536), 1e-6,
                                                      _meta(4, 8, 512, dtype=f32), _meta(512), 1e-6,
                                                      _meta(4, 8, 64, dtype=f32), 128, fp8, torch.bfloat16,
                                                      _meta(8, 1536), True, None, True)),
        ("fused_reduce_act_mul_fp8_group_quant, 4 splits, x2 summed",
         lambda: ffq.fused_reduce_act_mul_fp8_group_quant(_meta(4, 8, 2 * 2304, dtype=f32), "silu",
                                                          _meta(4, 8, 512, dtype=f32), 128, fp8)),
        ("fused_reduce_act_mul_fp8_group_quant, rows (unrounded y)",
         lambda: ffq.fused_reduce_act_mul_fp8_group_quant(_meta(8, 2 * 2048), "gelu_tanh", None, 128, fp8)),
        *[(f"fused_rms_gated_fp8_group_quant, {what}",
           lambda n=n, gs=gs, kw=kw: ffq.fused_rms_gated_fp8_group_quant(
               _meta(64, n), _meta(n), _meta(n), _meta(64, n), 1e-6, group_size=gs, out_dtype=fp8, **kw))
          for what, n, gs, kw in (("Qwen3-Next heads of 128, UE8M0", 128, 128, dict(use_ue8m0=True)),
                                  ("a row of 16384, one scale, gate first", 16384, None,
                                   dict(norm_before_gate=False, activation="sigmoid")),
                                  ("groups of 96", 1536, 96, {}))],
        *[(f"fused_flatten_fp8_group_quant, {what}",
           lambda x=x, gs=gs: ffq.fused_flatten_fp8_group_quant(x, gs, fp8))
          for what, x, gs in (("heads first, groups within heads", _meta(128, 8, 128).transpose(0, 1), 128),
                              ("groups across heads", _meta(16, 8, 100).transpose(0, 1), 64))],
        ("fused_clamp_act_mul, DeepSeek-V3's experts, clamp, row weights, UE8M0 scales shuffled (fp32 scales "
         "where the target stores no e4m3)",
         lambda: fused_clamp_act_mul(_meta(8, 2 * 2048), None, None, 7.0, "silu", _meta(8, 1, dtype=f32), fp8,
                                     quant_block_size=32,
                                     **(dict(scale_dtype_fmt="ue8m0", shuffle_scale=True)
                                        if fp8 in (torch.float8_e4m3fn, torch.float8_e4m3fnuz) else {}))),
        ("fused_clamp_act_mul, unquantized, element weights, fp32 group scales transposed",
         lambda: (fused_clamp_act_mul(_meta(8, 2 * 2880), None, None, 7.0, "gelu_tanh", _meta(8, 2880)),
                  fused_clamp_act_mul(_meta(8, 2 * 2880), None, None, 0.0, "silu", None, fp8, True))),
        *[(f"fused_qk_rope_cat_and_cache_mla, DeepSeek-V3 decode, {what}",
           lambda shuffled=shuffled, qdt=qdt: fused_qk_rope_cat_and_cache_mla(
               _meta(64, 128, 512), _meta(64, 128, 64), _meta(80, 1, 512), _meta(80, 1, 64),
               _meta(64, 1, 64, 576, dtype=fp8) if shuffled else _meta(4096, 1, 576, dtype=fp8),
               _meta(80, dtype=torch.int64), _meta(64, dtype=torch.int64), _meta(4096, 32, dtype=f32),
               _meta(4096, 32, dtype=f32), _meta(1, dtype=f32), False, 16, q_out_dtype=qdt,
               shuffled_kv_cache=shuffled))
          for what, shuffled, qdt in (("fp8 cache and q, prefill tokens", False, fp8),
                                      ("aiter's preshuffled fp8 cache", True, None))],
        *[(f"fused_qkv_split_qk_norm_rope_cache, Qwen3-Next prefill, gates {gl}, {lay} fp8 cache, scales, offsets",
           lambda gl=gl, lay=lay, shape=shape: fused_qkv_split_qk_norm_rope_cache(
               _meta(4096, (16 * 2 + 2 * 2) * 256), _meta(256), _meta(256), _meta(4096, 32, dtype=f32),
               _meta(4096, 32, dtype=f32), _meta(4096, dtype=torch.int64), _meta(*shape, dtype=fp8),
               _meta(*shape, dtype=fp8), _meta(4096, dtype=torch.int64), 16, 2, 256, False,
               _meta(4096, dtype=torch.int64), True, True, _meta(1, dtype=f32), _meta(1, dtype=f32), 1e-6, gl, lay))
          for gl, lay, shape in (("interleaved", "HND", (300, 2, 16, 256)), ("blocked", "NHD", (300, 16, 2, 256)))],
        ("fused_qkv_split_qk_norm_rope_cache, Qwen3-Next decode (K / V programs on Q's tile), bf16 cache",
         lambda: fused_qkv_split_qk_norm_rope_cache(
             _meta(16, (16 * 2 + 2 * 2) * 256), _meta(256), _meta(256), _meta(4096, 32, dtype=f32),
             _meta(4096, 32, dtype=f32), _meta(16, dtype=torch.int64), _meta(300, 16, 2, 256),
             _meta(300, 16, 2, 256), _meta(16, dtype=torch.int64), 16, 2, 256, False,
             None, True, True, None, None, 1e-6, "interleaved", "NHD")),
        *[(f"fused_qk_rope_cosine_cache_llama, llama3-8B decode, {what}",
           lambda flash=flash: fused_qk_rope_cosine_cache_llama(
               _meta(64, 32, 128), _meta(64, 8, 128), _meta(64, 8, 128),
               *((_meta(64, 4096, 8, 128, dtype=fp8),) * 2 if flash else
                 (_meta(64, 8, 128 // 16, 4096, 16, dtype=fp8), _meta(64, 8, 128, 4096, dtype=fp8))),
               _meta(64, dtype=torch.int64), _meta(64, dtype=torch.int64), _meta(8192, 64, dtype=f32),
               _meta(8192, 64, dtype=f32), _meta(1, dtype=f32), _meta(1, dtype=f32), True, flash))
          for what, flash in (("flash fp8 cache", True), ("classic fp8 cache", False))],
        *[(f"fused_reduce_qk_norm_rope_swa_write, DeepSeek-V4-style 64 heads of 512, {what}",
           lambda splits=splits, swa=swa: fused_reduce_qk_norm_rope_swa_write(
               _meta(*((splits,) if splits else ()), 4096, 64 * 512), _meta(4096, 512), _meta(512), _meta(512), 1e-6,
               1e-6, 64, _meta(65536, 1, 1, 32, dtype=f32), _meta(65536, 1, 1, 32, dtype=f32),
               _meta(4096, dtype=torch.int64), None, False,
               *((_meta(4096, dtype=torch.int32), _meta(4096, dtype=torch.int32), _meta(64, dtype=torch.int32),
                  _meta(64, 128, 512)) if swa else (None, None, None, None)), 128))
          for what, splits, swa in (("4 split-K slices, the window cache", 4, True), ("reduced q", 0, False))],
        # DeepSeek-V3's absorbed query (128 heads, 128 -> 512, rope 64) at decode, fp8 weights and cache
        ("fused_fp8_bmm_rope_cat_and_cache_mla, DeepSeek-V3 decode, fp8 weights and cache",
         lambda: fused_fp8_bmm_rope_cat_and_cache_mla(
             _meta(128, 64, 128), _meta(128, 512, 128, dtype=fp8), _meta(1, dtype=f32), _meta(64, 128, 64),
             _meta(64, 1, 512), _meta(64, 1, 64), _meta(4096, 1, 576, dtype=fp8), _meta(64, dtype=torch.int64),
             _meta(64, dtype=torch.int64), _meta(4096, 32, dtype=f32), _meta(4096, 32, dtype=f32), 128, True, None,
             _meta(1, dtype=f32), False, torch.bfloat16, 16)),
        ("fused_fp8_bmm_rope_cat_and_cache_mla, DeepSeek-V3 prefill, fp8 weights",
         lambda: fused_fp8_bmm_rope_cat_and_cache_mla(
             _meta(128, 4096, 128), _meta(128, 512, 128, dtype=fp8), _meta(1, dtype=f32), _meta(4096, 128, 64),
             _meta(4096, 1, 512), _meta(4096, 1, 64), _meta(8192, 1, 576), _meta(4096, dtype=torch.int64),
             _meta(4096, dtype=torch.int64), _meta(8192, 32, dtype=f32), _meta(8192, 32, dtype=f32))),
        *[(f"fused_fp4_bmm_rope_cat_and_cache_mla, DeepSeek-V3 at {t} tokens, {'q quantized' if pq else 'bf16 q'}",
           lambda t=t, pq=pq: fused_fp4_bmm_rope_cat_and_cache_mla(
               _meta(128, t, 128), _meta(128, 512, 64, dtype=torch.uint8), _meta(128, 512, 4, dtype=torch.uint8),
               _meta(t, 128, 64), _meta(t, 1, 512), _meta(t, 1, 64), _meta(8192, 1, 576),
               _meta(t, dtype=torch.int64), _meta(t, dtype=torch.int64), _meta(8192, 32, dtype=f32),
               _meta(8192, 32, dtype=f32), None, True, pq, _meta(1, dtype=f32)))
          for t in (16, 4096) for pq in (True, False)],
        ("fused_bf16_bmm_rope_cat_and_cache_mla, DeepSeek-V3 prefill",
         lambda: fused_bf16_bmm_rope_cat_and_cache_mla(
             _meta(128, 4096, 128), _meta(128, 512, 128), _meta(4096, 128, 64), _meta(4096, 1, 512),
             _meta(4096, 1, 64), _meta(8192, 1, 576), _meta(4096, dtype=torch.int64), _meta(4096, dtype=torch.int64),
             _meta(8192, 32, dtype=f32), _meta(8192, 32, dtype=f32))),
        ("rope_fwd_3d, Wan2.1-14B 720p on one rank, 8 videos (64-bit offsets)",
         lambda: rope_fwd_3d(_meta(8, 75600, 40, 128), _meta(8, 3, dtype=torch.int64),
                             _meta(1024, 64, dtype=torch.complex128), 1, 0)),
        ("fused_routing_from_topk, the most pairs a program sorts, an expert map",
         lambda: fused_routing_from_topk(_meta(1024, 8, dtype=f32), _meta(1024, 8, dtype=torch.int32), 256,
                                         _meta(512, dtype=torch.int32))),
        ("fused_mul_add, an element of a each, a number for b",
         lambda: fused_mul_add(_meta(8, 4096), _meta(8, 4096), 0.5, _meta(8, 4096, dtype=f32))),
        ("fused_silu_mul_fp8_per_tensor_static_quant, rounded to the input's dtype",
         lambda: ffq.fused_silu_mul_fp8_per_tensor_static_quant(_meta(8, 2 * 14336), _meta(1, dtype=f32), fp8, True)),
        ("fused_rms_mxfp4_quant, DeepSeek-V3 q_a / kv_a, residual, unquantized, shuffled scales",
         lambda: mxq.fused_rms_mxfp4_quant(_meta(8, 1536), _meta(1536), 1e-6, _meta(8, 512), _meta(512), 1e-6,
                                           _meta(8, 1536), True, False, True)),
        ("fused_rms_mxfp4_quant, the widest rows, padded scales",
         lambda: mxq.fused_rms_mxfp4_quant(_meta(8, 16384), _meta(16384), 1e-6, _meta(8, 16384), _meta(16384),
                                           1e-6, _meta(8, 16384), False, True)),
        ("fused_rms_mxfp8_quant, the widest rows",
         lambda: mxq.fused_rms_mxfp8_quant(_meta(8, 16384), _meta(16384), 1e-6, _meta(8, 16384, dtype=fp8))),
        *[(f"dynamic_mxfp4_quant, {mode} scales",
           lambda mode=mode: mxq.dynamic_mxfp4_quant(_meta(256, 7168), mode)) for mode in ("floor", "ceil", "rceil")],
        ("dynamic_mxfp4_quant, offsets past 2^31", lambda: mxq.dynamic_mxfp4_quant(_meta(1 << 19, 4096))),
        ("act_mul_and_mxfp4_quant gelu_tanh, padded scales, rceil",
         lambda: mxq.act_mul_and_mxfp4_quant(_meta(256, 2 * 2048), "gelu_tanh", "rceil", False, True)),
        ("dynamic_nvfp4_quant, no global scale", lambda: mxq.dynamic_nvfp4_quant(_meta(256, 7168))),
        ("topk filter", lambda: op["topk"](_meta(4, 128256), 50, -1, True, True)),
        ("topk filter, k = 1", lambda: op["topk"](_meta(4, 128256), 1, -1, True, True)),
        ("topk sorted rows", lambda: op["topk"](_meta(4, 1 << 17), 4096, -1, True, True)),
        ("dynamic_per_tensor_quant amax, then static",
         lambda: op["dynamic_per_tensor_quant_fp8_i8"](_meta(4096, 7168, dtype=fp8), _meta(4096, 7168),
                                                       _meta(1, dtype=f32))),
        ("dynamic_per_token_quant looped",
         lambda: op["dynamic_per_token_quant_fp8_i8"](_meta(4, 65536, dtype=fp8), _meta(4, 65536),
                                                      _meta(4, 1, dtype=f32), _meta(1, dtype=f32))),
        ("dynamic_per_token_quant split",
         lambda: op["dynamic_per_token_quant_fp8_i8"](_meta(1024, 131072, dtype=fp8), _meta(1024, 131072),
                                                      _meta(1024, 1, dtype=f32), None)),
        *[(f"dynamic_per_token_int8_azp_quant, {m} x {n}: rows in registers, 64 elements a lane",
           lambda m=m, n=n: op["dynamic_per_token_int8_azp_quant"](
               _meta(m, n, dtype=torch.int8), _meta(m, n), _meta(m, 1, dtype=f32), _meta(m, 1, dtype=torch.int32)))
          for m, n in ((16384, 14336), (65536, 4096))],
        ("dynamic_per_token_int8_azp_quant looped",
         lambda: op["dynamic_per_token_int8_azp_quant"](_meta(4, 65536, dtype=torch.int8), _meta(4, 65536),
                                                        _meta(4, 1, dtype=f32), _meta(4, 1, dtype=torch.int32))),
        ("dynamic_per_token_int8_azp_quant, rows the per-token launch splits, looped",
         lambda: op["dynamic_per_token_int8_azp_quant"](_meta(1024, 131072, dtype=torch.int8), _meta(1024, 131072),
                                                        _meta(1024, 1, dtype=f32),
                                                        _meta(1024, 1, dtype=torch.int32))),
        ("static_per_tensor_int8_azp_quant, wide rows",
         lambda: op["static_per_tensor_int8_azp_quant"](_meta(4, 65536, dtype=torch.int8), _meta(4, 65536),
                                                        _meta(1, dtype=f32), _meta(1, dtype=torch.int32))),
        *[(f"vLLM scaled_fp8_quant, static {what} scales",
           lambda s=s, gs=gs: vllm_ops.scaled_fp8_quant(_meta(256, 7168), _meta(*s, dtype=f32), group_shape=gs))
          for what, s, gs in (("per-token", (256,), (1, -1)), ("per-channel", (7168,), (-1, 1)),
                              ("128 x 128 block", (2, 56), None))],
        # vLLM's RMSNorm + quant forms: Llama's roundings (CASTING_LLAMA) in the fused kernels
        *[(f"vLLM rms_norm_dynamic_per_token_quant {what}",
           lambda n=n, res=res: vllm_ops.rms_norm_dynamic_per_token_quant(
               _meta(256, n), _meta(n), 1e-6, fp8, _meta(1, dtype=f32), _meta(256, n) if res else None))
          for what, n, res in (("4096", 4096, False), ("4096, residual", 4096, True),
                               ("looped, residual", 14336, True), ("looped", 65536, False))],
        *[(f"vLLM rms_norm_per_block_quant {what}",
           lambda res=res, t=t: vllm_ops.rms_norm_per_block_quant(
               _meta(256, 7168), _meta(7168), 1e-6, fp8, [1, 128], None, _meta(256, 7168) if res else None, t, 4))
          for what, res, t in (("row-major scales", False, False), ("residual, TMA-aligned scales", True, True))],
        ("vLLM per_token_group_quant_fp8, ue8m0 scales",
         lambda: vllm_ops.per_token_group_quant_fp8(_meta(256, 7168), 128, dtype=fp8, use_ue8m0=True)),
        ("act_mul_and_fp8_quant per token",
         lambda: op["act_mul_and_fp8_quant"](_meta(4, 2 * 4096), "silu", None, fp8, None)),
        ("act_mul_and_fp8_quant per token looped, bound",
         lambda: op["act_mul_and_fp8_quant"](_meta(4, 2 * 65536), "silu", None, fp8, _meta(1, dtype=f32))),
        ("rms_norm dynamic quant looped",
         lambda: op["rmsnorm2d_fwd_with_dynamicquant"](_meta(4, 65536, dtype=fp8), _meta(4, 65536),
                                                       _meta(4, 1, dtype=f32), _meta(65536), 1e-6)),
        ("fused_qk_rope_reshape_and_cache fp8 caches and outputs, scaled",
         lambda: op["fused_qk_rope_reshape_and_cache"](
             q, k, v, _meta(*kc.shape, dtype=fp8), _meta(*vc.shape, dtype=fp8), slots, pos, cos, sin,
             _meta(1, dtype=f32), _meta(1, dtype=f32), True, True, True, None,
             _meta(*q.shape, dtype=fp8), _meta(*k.shape, dtype=fp8), False, None)),
        # aiter's shuffled 5-D value cache (gpt-oss: 64 KV heads of 64, blocks of 16), fp8 (x 16) and bf16 (x 8)
        *[(f"fused_qk_rope_reshape_and_cache, aiter's shuffled value cache, {dt}",
           lambda dt=dt, xw=16 // dt.itemsize: op["fused_qk_rope_reshape_and_cache"](
               _meta(64, 64, 64), _meta(64, 8, 64), _meta(64, 8, 64), _meta(512, 8, 64 // xw, 16, xw, dtype=dt),
               _meta(512, 8, 16 // xw, 64, xw, dtype=dt), _meta(64, dtype=torch.int64), _meta(64, dtype=torch.int64),
               _meta(4096, 32, dtype=f32), _meta(4096, 32, dtype=f32), _meta(1, dtype=f32), _meta(1, dtype=f32),
               True, False, True, None, None, None, False, None))
          for dt in (torch.bfloat16, fp8)],
        ("cat_and_cache_mla fp8 cache, scaled",
         lambda: op["cat_and_cache_mla"](mla[0], mla[1], _meta(*mla[2].shape, dtype=fp8), mla[3],
                                         _meta(1, dtype=f32), True)),
        # aiter's preshuffled MLA cache (DeepSeek's 512 + 64 in blocks of 64): 8-wide bf16 chunks, 16-wide fp8
        *[(f"cat_and_cache_mla shuffled {dt}",
           lambda dt=dt: op["cat_and_cache_mla"](_meta(8, 512), _meta(8, 64), _meta(4, 1, 64, 576, dtype=dt),
                                                 _meta(8, dtype=torch.int64), _meta(1, dtype=f32), True, True))
          for dt in (torch.bfloat16, fp8)],
        # vLLM's cache writes (ROTATE off, DIV_SCALE): the classic layout's fp8 caches, the HND flash view, the
        # MLA cache, and the fp8 cache decoded
        ("kv_cache_write classic layout, fp8 caches, scaled",
         lambda: op["kv_cache_write"](_meta(64, 8, 128), _meta(64, 8, 128), _meta(512, 8, 8, 16, 16, dtype=fp8),
                                      _meta(512, 8, 128, 16, dtype=fp8), _meta(64, dtype=torch.int64),
                                      _meta(1, dtype=f32), _meta(1, dtype=f32), False)),
        # a prefill's tiles of consecutive slots stored run by run (SLOT_TILES): llama3-8B's KV heads, blocks of 16
        *[(f"kv_cache_write classic layout, prefill tiles, {dt} caches",
           lambda dt=dt, xw=16 // dt.itemsize: op["kv_cache_write"](
               _meta(16384, 8, 128), _meta(16384, 8, 128), _meta(1024, 8, 128 // xw, 16, xw, dtype=dt),
               _meta(1024, 8, 128, 16, dtype=dt), _meta(16384, dtype=torch.int64), None, None, False))
          for dt in (torch.bfloat16, fp8)],
        ("fused_qk_rope_reshape_and_cache classic layout, prefill tiles, bf16 caches",
         lambda: op["fused_qk_rope_reshape_and_cache"](
             _meta(16384, 32, 128), _meta(16384, 8, 128), _meta(16384, 8, 128), _meta(1024, 8, 16, 16, 8),
             _meta(1024, 8, 128, 16), _meta(16384, dtype=torch.int64), _meta(16384, dtype=torch.int64),
             _meta(4096, 64, dtype=f32), _meta(4096, 64, dtype=f32), None, None, True, False, True, None)),
        ("vLLM reshape_and_cache_flash, HND cache view, unscaled",
         lambda: vllm_ops.reshape_and_cache_flash(
             _meta(64, 8, 128), _meta(64, 8, 128), _meta(512, 8, 16, 128).permute(0, 2, 1, 3),
             _meta(512, 8, 16, 128).permute(0, 2, 1, 3), _meta(64, dtype=torch.int64), "auto", None, None)),
        ("vLLM concat_and_cache_mla, fp8 cache",
         lambda: vllm_ops.concat_and_cache_mla(_meta(8, 512), _meta(8, 64), _meta(64, 16, 576, dtype=torch.uint8),
                                               _meta(8, dtype=torch.int64), "fp8", _meta(1, dtype=f32))),
        # vLLM's activation forms: torch's rounding and the device's expf / tanhf (PRECISE), interleaved
        # gate / up with gpt-oss's clamp, gelu_new / gelu_fast rounded in bf16, full tiles (EVEN)
        ("vLLM silu_and_mul, gelu_and_mul, gelu_tanh_and_mul, mul_and_silu",
         lambda: [fn(_meta(8, 4096), _meta(8, 2 * 4096)) for fn in (
             vllm_ops.silu_and_mul, vllm_ops.gelu_and_mul, vllm_ops.gelu_tanh_and_mul, vllm_ops.mul_and_silu)]),
        ("vLLM mul_and_silu fp16 (the rounded silu: ex2.approx.ftz and its patched inputs on NVIDIA)",
         lambda: vllm_ops.mul_and_silu(_meta(8, 4096, dtype=torch.float16), _meta(8, 2 * 4096, dtype=torch.float16))),
        ("vLLM swigluoai_and_mul gpt-oss, fatrelu_and_mul",
         lambda: (vllm_ops.swigluoai_and_mul(_meta(8, 2880), _meta(8, 2 * 2880), 1.702, 7.0),
                  vllm_ops.swigluoai_and_mul(_meta(8, 4096), _meta(8, 2 * 4096), 1.702, 7.0),
                  vllm_ops.fatrelu_and_mul(_meta(8, 4096), _meta(8, 2 * 4096), 0.1))),
        ("vLLM gelu_new, gelu_fast, gelu_quick (bf16: the SFU's tanh on NVIDIA; fp16)",
         lambda: [fn(_meta(8, 4096, dtype=dt), _meta(8, 4096, dtype=dt)) for fn in (
             vllm_ops.gelu_new, vllm_ops.gelu_fast, vllm_ops.gelu_quick) for dt in (torch.bfloat16, torch.float16)]),
        # sampling: each mode and filter set, vocabulary widths, per-row parameters, shared rows
        ("sampling top_k_top_p from logits, per-row k, p and temperature",
         lambda: smp.top_k_top_p_sampling_from_logits(_meta(4, 128256), _meta(4, dtype=torch.int32),
                                                      _meta(4, dtype=f32), temperature=_meta(4, dtype=f32))),
        ("sampling top_k_top_p from bf16 logits, k = 50 (a list of 256)",
         lambda: smp.top_k_top_p_sampling_from_logits(_meta(4, 128256, dtype=torch.bfloat16), 50, 0.9)),
        ("sampling top_k_top_p from probs, an int64 k a row",
         lambda: smp.top_k_top_p_sampling_from_probs(_meta(4, 32000, dtype=f32), _meta(4, dtype=torch.int64),
                                                     _meta(4, dtype=f32))),
        ("sampling top_k from fp16 probs, k = 1000 (a list of 2048)",
         lambda: smp.top_k_sampling_from_probs(_meta(4, 151936, dtype=torch.float16), 1000)),
        ("sampling from logits, a temperature", lambda: smp.sampling_from_logits(_meta(4, 151936), temperature=0.7)),
        ("sampling min_p from probs, indices",
         lambda: smp.min_p_sampling_from_probs(_meta(4, 151936, dtype=f32), 0.1, indices=_meta(8, dtype=torch.int64))),
        ("sampling top_k_top_p joint from probs", lambda: smp.top_k_top_p_sampling_from_probs(
            _meta(4, 1000, dtype=f32), 5, 0.9, filter_apply_order="joint")),
        ("sampling from probs", lambda: smp.sampling_from_probs(_meta(4, 32000, dtype=f32))),
        # a k a row and top-k alone: the kept mass launched over the rows not listed (one row: many slices)
        ("sampling top_k from probs, a k a row", lambda: smp.top_k_sampling_from_probs(
            _meta(1, 152064, dtype=f32), _meta(1, dtype=torch.int64))),
        ("sampling top_p_renorm_probs / top_k_renorm_probs",
         lambda: (smp.top_p_renorm_probs(_meta(2, 262144, dtype=f32), 0.9), smp.top_k_renorm_probs(_meta(2, 100), 5))),
        ("sampling top_k_mask_logits", lambda: smp.top_k_mask_logits(_meta(2, 201088), 50)),
        ("convert_kv_cache fp8 decoded",
         lambda: op["convert_kv_cache"](_meta(64, 16, 8, 128), _meta(64, 16, 8, 128, dtype=fp8), 0.5)),
        ("convert_kv_cache fp8 encoded (divided by the scale)",
         lambda: op["convert_kv_cache"](_meta(64, 16, 8, 128, dtype=fp8), _meta(64, 16, 8, 128), 0.37)),
        # fused_add_rmsnorm_pad: gpt-oss's 2880 padded to 3072 (a row in registers), a looped row (the width
        # compiled in, and not), a split row
        ("add_rmsnorm_pad gpt-oss",
         lambda: op["add_rmsnorm_pad"](_meta(256, 2880), _meta(2880), 1e-6, _meta(256, 2880), 256)),
        ("rmsnorm_pad looped, width compiled in",
         lambda: op["rmsnorm_pad"](_meta(264, 16000), _meta(16000), 1e-6, 256)),
        ("rmsnorm_pad looped", lambda: op["rmsnorm_pad"](_meta(264, 65000), _meta(65000), 1e-6, 128)),
        ("add_rmsnorm_pad split",
         lambda: op["add_rmsnorm_pad"](_meta(4, 65552), _meta(65552), 1e-6, _meta(4, 65552), 256)),
        # routing_sigmoid_top1: Llama 4 Maverick's 128 experts from 8192 tokens (32-token tiles), the most
        # experts in fp32 (full-precision dot)
        ("routing_sigmoid_top1 Llama 4 Maverick, shared expert",
         lambda: op["routing_sigmoid_top1"](_meta(8192, 5120), _meta(5120, 128), 1, True)),
        ("routing_sigmoid_top1 fp32, the most experts",
         lambda: op["routing_sigmoid_top1"](_meta(16, 5120, dtype=f32), _meta(5120, 512, dtype=f32), 1, False)),
        # vLLM's _moe_C grouped_topk on scores as given (the routing kernel's IDENTITY), DeepSeek-V3's groups
        ("vLLM grouped_topk, scores as given",
         lambda: vllm_ops.grouped_topk(_meta(4096, 256, dtype=f32), 8, 4, 8, True, 2.5, _meta(256, dtype=f32), 0)),
    ]
    return out


def record_cases(calls: list[tuple[str, Callable]], profile) -> list[tuple]:
    """(case, kernel, grid, args, meta) of every launch the calls make with launch configs
    chosen for ``profile`` (a :class:`DeviceProfile`; the meta device stands for it)."""
    from aiter_lite.spec.device import use_profile
    from aiter_lite.utils.fast_launch import record

    out = []
    with use_profile(profile):
        for case, call in calls:
            _, launches = record(call)
            out += [(case, *launch) for launch in launches]
    return out


def entry_kernels() -> list[str]:
    """``module.name`` of every ``*_kernel`` JITFunction defined under the kernel package
    (its subfolders are namespace packages: walked as files)."""
    from triton.runtime.jit import JITFunction

    root = Path(importlib.import_module(KERNEL_PACKAGE).__file__).parent
    found = []
    for path in sorted(root.rglob("*.py")):
        module = ".".join((KERNEL_PACKAGE, *path.relative_to(root).with_suffix("").parts))
        mod = importlib.import_module(module.removesuffix(".__init__"))
        for name, obj in vars(mod).items():
            if isinstance(obj, JITFunction) and name.endswith("_kernel") and obj.fn.__module__ == mod.__name__:
                found.append(f"{mod.__name__}.{name}")
    return found


def _typed(kernel, args: tuple, meta: dict, backend, fp64: bool = True):
    """(signature, constexprs, attrs, options, float parameter names) of a launch, as the
    binder types it, with its Python floats typed fp64 (``fp64``, as torch.compile passes
    them; else fp32, as an eager launch does)."""
    from triton.runtime.jit import create_function_from_signature

    binder = create_function_from_signature(kernel.signature, kernel.params, backend)
    bound, specialization, options = binder(*args, **meta)
    options, signature, constexprs, attrs = kernel._pack_args(backend, meta, bound, specialization, options)
    floats = [name for name, value in bound.items() if type(value) is float and signature[name] != "constexpr"]
    if fp64:
        signature = {name: "fp64" if name in floats else ty for name, ty in signature.items()}
    return signature, constexprs, attrs, options, floats


def fp64_ops(ttir: str, floats: list[str]) -> list[str]:
    """Operations of a kernel's Triton IR on fp64 values but the conversion of the fp64
    parameters ``floats`` to fp32 (libdevice's own fp64, in the PTX of sin / cos, is not
    the kernel's)."""
    pins = {f"= arith.truncf %{name} : f64 to f32" for name in floats}
    return [line.strip() for line in ttir.splitlines()
            if "f64" in line and not line.lstrip().startswith("tt.func")
            and not any(pin in line for pin in pins)]


@contextlib.contextmanager
def _stderr_to(file):
    """File descriptor 2 into ``file``: where MLIR and LLVM print why a pass failed."""
    sys.stderr.flush()
    saved = os.dup(2)
    os.dup2(file.fileno(), 2)
    try:
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def _error(e: Exception, diagnostics: str) -> str:
    """A build's error: the exception, its cause, and what the compiler printed ahead of
    the IR it dumps (``Unsupported conversion from f64 to f8E4M3FN`` and the like). A
    message of several lines (Triton's CompilationError: the place, the source, then why)
    leads with its first and last lines, so a shortened report still says why."""
    msg = str(e).splitlines() or [""]
    lines = [f"{type(e).__name__}: {msg[0]} {msg[-1]}" if len(msg) > 1 else f"{type(e).__name__}: {msg[0]}",
             *msg[1:-1]]
    cause = e
    while cause.__cause__ is not None:  # a helper's error inside the kernel's: the innermost says why
        cause = cause.__cause__
    if cause is not e:
        lines.append(f"caused by {type(cause).__name__}: {cause}")
    for line in diagnostics.splitlines():
        if line.startswith(("#", "module", "{-#")):
            break
        if line.strip() and "warn" not in line.lower():
            lines.append(line)
    return "\n".join(lines)


def _regime(kernel, meta: dict) -> tuple:
    """A launch's constexpr flags, tile sizes (BLOCK_*) left out."""
    return tuple((p.name, repr(meta.get(p.name))) for p in kernel.params
                 if p.is_constexpr and not p.name.startswith("BLOCK"))


def _triton_ir(src, backend, target, options) -> str:
    """``src`` lowered to Triton IR (code generation and the TTIR passes, as
    ``triton.compile`` runs them first), not further: the fp64 check reads this IR, and
    past the scalars' pins to fp32 the later stages see what the kernel's fp32-scalar
    launches give them, which scripts/check_targets.py builds to machine code for every
    target. The later stages (LLVM, ptxas) were nine tenths of this module's time."""
    from triton._C.libtriton import ir

    opts = backend.parse_options(dict(options.__dict__))
    context = ir.context()
    ir.load_dialects(context)
    backend.load_dialects(context)
    module = src.make_ir(target, opts, backend.get_codegen_implementation(opts), backend.get_module_map(), context)
    stages = {}
    backend.add_stages(stages, opts, src.language)
    return str(stages["ttir"](module, {"target": target, **opts.__dict__}))


def build_all() -> list[dict]:
    """Every case's launches lowered to Triton IR (_triton_ir): a kernel taking float
    scalars once per regime (its constexpr flags), any other kernel once (nothing to pin:
    its code generation is the check). A dict each: the kernel, the first case that
    launched it, its fp64 parameters, its constexprs, and the lowering's error or the fp64
    operations of its Triton IR."""
    from triton.compiler import ASTSource, make_backend

    from aiter_lite.spec.device import H100

    offline()
    target = H100.gpu_target()
    backend = make_backend(target)
    jobs = {}
    for case, kernel, _grid, args, meta in record_cases(cases(), H100):
            signature, constexprs, attrs, options, floats = _typed(kernel, args, meta, backend)
            key = (id(kernel), _regime(kernel, meta) if floats else ())
            if key not in jobs:
                jobs[key] = (case, kernel, signature, constexprs, attrs, options, floats)

    def build(job) -> dict:
        case, kernel, signature, constexprs, attrs, options, floats = job
        result = {"kernel": f"{kernel.fn.__module__}.{kernel.fn.__name__}", "case": case, "fp64": floats,
                  "constexprs": {kernel.arg_names[i]: repr(v) for (i,), v in constexprs.items()}}
        with tempfile.TemporaryFile("w+") as diagnostics:
            try:
                with _stderr_to(diagnostics):
                    ttir = _triton_ir(ASTSource(kernel, signature, constexprs, attrs), backend, target, options)
            except Exception as e:  # noqa: BLE001 (the error is the result)
                diagnostics.seek(0)
                result["error"] = _error(e, diagnostics.read())
                return result
        result["fp64_ops"] = fp64_ops(ttir, floats)
        return result

    return [build(job) for job in jobs.values()]


def main() -> None:
    for result in build_all():
        print(json.dumps(result), flush=True)
    print(json.dumps({"entry_kernels": entry_kernels()}), flush=True)


if __name__ == "__main__":
    main()
