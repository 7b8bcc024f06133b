"""Code written against aiter switches by changing the import prefix: every aiter Triton
function aiter_lite provides is importable at aiter's module path (``aiter.ops.triton.X`` ->
``aiter_lite.ops.triton.X``, and the older flat paths serving stacks import) with a
signature aiter's callers can use: aiter's positional parameters in aiter's order and names,
its keyword-only ones by name, a default wherever aiter has one (the same value where both
are literals), and nothing more that a call must pass. The signatures are aiter's own (its
source's AST at e4048607a535ace3a2b51ded31b1c8c2d45c0879)."""

from __future__ import annotations

import ast
import importlib
import inspect

import pytest

# (aiter module, aiter signature) of every aiter function aiter_lite provides at aiter's path
AITER = [
    ("aiter.ops.triton.quant.fused_fp8_quant",
     "fused_rms_fp8_per_tensor_static_quant(inp1, inp1_weight, inp1_epsilon, inp1_scale, inp2 = None, "
     "inp2_weight = None, inp2_epsilon = None, dtype_quant = fp8_dtype, res1 = None, "
     "output_unquantized_inp1 = False, rmsnorm_convert_to_inp1_type = False)"),
    ("aiter.ops.triton.quant.fused_fp8_quant",
     "fused_rms_fp8_group_quant(inp1, inp1_weight, inp1_epsilon, inp2 = None, inp2_weight = None, "
     "inp2_epsilon = None, group_size = 128, dtype_quant = fp8_dtype, res1 = None, "
     "output_unquantized_inp1 = False, transpose_scale = False, is_x_scale_strided: bool = False)"),
    ("aiter.ops.triton.quant.fused_fp8_quant",
     "get_fp8_min_max_bounds(fp8_dtype: torch.dtype) -> tuple[float, float]"),
    ("aiter.ops.triton.quant.fused_fp8_quant",
     "fused_rms_gated_fp8_group_quant(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, "
     "z: torch.Tensor, eps: float, *, norm_before_gate: bool = True, use_ue8m0: bool = False, "
     "activation: str = 'silu', out_dtype: torch.dtype | None = None, fp8_min: float | None = None, "
     "fp8_max: float | None = None, fp8_min_scaling_factor: float | None = None, "
     "group_size: int | None = None) -> tuple[torch.Tensor, torch.Tensor]"),
    ("aiter.ops.triton.quant",
     "fused_rms_gated_fp8_group_quant(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, "
     "z: torch.Tensor, eps: float, *, norm_before_gate: bool = True, use_ue8m0: bool = False, "
     "activation: str = 'silu', out_dtype: torch.dtype | None = None, fp8_min: float | None = None, "
     "fp8_max: float | None = None, fp8_min_scaling_factor: float | None = None, "
     "group_size: int | None = None) -> tuple[torch.Tensor, torch.Tensor]"),
    ("aiter.ops.triton.quant.fused_fp8_quant",
     "fused_flatten_fp8_group_quant(x: torch.Tensor, group_size, dtype_quant = fp8_dtype, "
     "transpose_scale: bool = False)"),
    ("aiter.ops.triton.quant.fused_fp8_quant",
     "fused_reduce_act_mul_fp8_group_quant(x: torch.Tensor, activation: str = 'silu', "
     "x2: torch.Tensor | None = None, group_size = 128, dtype_quant = fp8_dtype, "
     "dtype: float | None = torch.bfloat16)"),
    ("aiter.ops.triton.quant.fused_fp8_quant",
     "fused_reduce_rms_fp8_group_quant(inp1, inp1_weight, inp1_epsilon, inp2 = None, inp2_weight = None, "
     "inp2_epsilon = None, inp3 = None, group_size = 128, dtype_quant = fp8_dtype, dtype = None, res1 = None, "
     "output_unquantized_inp1 = False, out3 = None, transpose_scale = False, is_x_scale_strided: bool = False)"),
    ("aiter.ops.triton.quant.fused_fp8_quant",
     "fused_silu_mul_fp8_per_tensor_static_quant(inp, inp_scale, dtype_quant = fp8_dtype, "
     "silu_convert_to_inp_type = False)"),
    ("aiter.ops.triton.activation",
     "act_mul_and_fp8_group_quant(x: torch.Tensor, activation: Literal['silu', 'gelu', 'gelu_tanh'], "
     "group_size, dtype_quant = fp8_dtype) -> tuple[torch.Tensor, torch.Tensor]"),
    ("aiter.ops.triton.activation", "fused_silu_mul(x: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor"),
    ("aiter.ops.triton.softmax", "softmax(x)"),
    ("aiter.ops.triton.topk",
     "topk(x: torch.Tensor, k: int, *, dim: int = -1, largest: bool = True, sorted: bool = True, "
     "tiny_row_thresh: int = MAX_TINY_ROW)"),
    ("aiter.ops.triton.kv_cache",
     "cat_and_cache_mla(k_nope: torch.Tensor, k_pe: torch.Tensor, kv_cache: torch.Tensor, "
     "slot_mapping: torch.Tensor, k_scale: torch.Tensor, apply_scale: bool = True, "
     "shuffled_kv_cache: bool = False) -> None"),
    ("aiter.ops.triton.normalization.norm",
     "layer_norm(input: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, eps: float = 1e-05, "
     "x_bias: torch.Tensor | None = None) -> torch.Tensor"),
    ("aiter.ops.triton.normalization.norm",
     "layernorm2d_fwd_with_add(out: torch.Tensor, input: torch.Tensor, residual_in: torch.Tensor, "
     "residual_out: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, epsilon: float, "
     "x_bias: torch.Tensor | None = None) -> torch.Tensor"),
    ("aiter.ops.triton.normalization.norm",
     "layernorm2d_fwd_with_dynamicquant(out: torch.Tensor, input: torch.Tensor, yscale: torch.Tensor, "
     "weight: torch.Tensor, bias: torch.Tensor, epsilon: float = 1e-05, "
     "x_bias: torch.Tensor | None = None) -> torch.Tensor"),
    ("aiter.ops.triton.normalization.norm",
     "layernorm2d_fwd_with_smoothquant(out: torch.Tensor, input: torch.Tensor, xscale: torch.Tensor, "
     "yscale: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, epsilon: float = 1e-05, "
     "x_bias: torch.Tensor | None = None) -> torch.Tensor"),
    ("aiter.ops.triton.normalization.norm",
     "layernorm2d_fwd_with_add_dynamicquant(out: torch.Tensor, input: torch.Tensor, "
     "residual_in: torch.Tensor, residual_out: torch.Tensor, yscale: torch.Tensor, weight: torch.Tensor, "
     "bias: torch.Tensor, epsilon: float = 1e-05, x_bias: torch.Tensor | None = None) -> torch.Tensor"),
    ("aiter.ops.triton.normalization.norm",
     "layernorm2d_fwd_with_add_smoothquant(out: torch.Tensor, input: torch.Tensor, "
     "residual_in: torch.Tensor, residual_out: torch.Tensor, xscale: torch.Tensor, yscale: torch.Tensor, "
     "weight: torch.Tensor, bias: torch.Tensor, epsilon: float = 1e-05, "
     "x_bias: torch.Tensor | None = None) -> torch.Tensor"),
    ("aiter.ops.triton.normalization.rmsnorm", "rms_norm(input: torch.Tensor, weight: torch.Tensor, epsilon: float)"),
    ("aiter.ops.triton.normalization.rmsnorm",
     "rmsnorm2d_fwd_with_add(out: torch.Tensor, input: torch.Tensor, residual_in: torch.Tensor, "
     "residual_out: torch.Tensor, weight: torch.Tensor, epsilon: float)"),
    ("aiter.ops.triton.normalization.rmsnorm",
     "rmsnorm2d_fwd_with_smoothquant(out: torch.Tensor, input: torch.Tensor, xscale: torch.Tensor, "
     "yscale: torch.Tensor, weight: torch.Tensor, epsilon: float)"),
    ("aiter.ops.triton.normalization.rmsnorm",
     "rmsnorm2d_fwd_with_dynamicquant(out: torch.Tensor, input: torch.Tensor, yscale: torch.Tensor, "
     "weight: torch.Tensor, epsilon: float, scale_ub: torch.Tensor | None = None, clamp_out: bool = False, "
     "dump_rms_norm: bool = False)"),
    ("aiter.ops.triton.normalization.rmsnorm",
     "rmsnorm2d_fwd_with_add_smoothquant(out: torch.Tensor, input: torch.Tensor, residual_in: torch.Tensor, "
     "residual_out: torch.Tensor, xscale: torch.Tensor, yscale: torch.Tensor, weight: torch.Tensor, "
     "epsilon: float)"),
    ("aiter.ops.triton.normalization.rmsnorm",
     "rmsnorm2d_fwd_with_add_dynamicquant(out: torch.Tensor, input: torch.Tensor, "
     "residual_in: torch.Tensor, residual_out: torch.Tensor, yscale: torch.Tensor, weight: torch.Tensor, "
     "epsilon: float)"),
    ("aiter.ops.triton.rope.fused_qkv_split_qk_rope",
     "fused_qkv_split_qk_rope(qkv: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, "
     "positions: torch.Tensor, qh: int, kvh: int, head_dim: int, is_neox: bool = True, "
     "offsets: torch.Tensor = None, reuse_freqs_front_part: bool = True, nope_first: bool = False)"),
    ("aiter.ops.triton.rope.rope",
     "rope_fwd(x: torch.Tensor, freqs: torch.Tensor, rotate_style: int, reuse_freqs_front_part: bool, "
     "nope_first: bool, transpose_output: bool = False) -> torch.Tensor"),
    ("aiter.ops.triton.rope.rope",
     "rope_fwd_inplace(x: torch.Tensor, freqs: torch.Tensor, rotate_style: int, "
     "reuse_freqs_front_part: bool, nope_first: bool, transpose_output: bool = False) -> torch.Tensor"),
    ("aiter.ops.triton.rope.rope",
     "rope_bwd(x: torch.Tensor, freqs: torch.Tensor, rotate_style: int, reuse_freqs_front_part: bool, "
     "nope_first: bool, transpose_output: bool = False) -> torch.Tensor"),
    ("aiter.ops.triton.rope.rope",
     "rope_thd_fwd(x: torch.Tensor, cu_seqlens: torch.Tensor, freqs: torch.Tensor, rotate_style: int, "
     "reuse_freqs_front_part: bool, nope_first: bool, transpose_output: bool = False) -> torch.Tensor"),
    ("aiter.ops.triton.rope.rope",
     "rope_thd_fwd_inplace(x: torch.Tensor, cu_seqlens: torch.Tensor, freqs: torch.Tensor, "
     "rotate_style: int, reuse_freqs_front_part: bool, nope_first: bool, "
     "transpose_output: bool = False) -> torch.Tensor"),
    ("aiter.ops.triton.rope.rope",
     "rope_thd_bwd(x: torch.Tensor, cu_seqlens: torch.Tensor, freqs: torch.Tensor, rotate_style: int, "
     "reuse_freqs_front_part: bool, nope_first: bool, transpose_output: bool = False) -> torch.Tensor"),
    ("aiter.ops.triton.rope.rope",
     "rope_cached_fwd(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, rotate_style: int, "
     "reuse_freqs_front_part: bool, nope_first: bool, transpose_output: bool = False)"),
    ("aiter.ops.triton.rope.rope",
     "rope_cached_fwd_inplace(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, rotate_style: int, "
     "reuse_freqs_front_part: bool, nope_first: bool, transpose_output: bool = False)"),
    ("aiter.ops.triton.rope.rope",
     "rope_cached_positions_fwd(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, "
     "positions: torch.Tensor, rotate_style: int, reuse_freqs_front_part: bool, nope_first: bool, "
     "transpose_output: bool = False) -> torch.Tensor"),
    ("aiter.ops.triton.rope.rope",
     "rope_cached_positions_fwd_inplace(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, "
     "positions: torch.Tensor, rotate_style: int, reuse_freqs_front_part: bool, nope_first: bool, "
     "transpose_output: bool = False) -> torch.Tensor"),
    ("aiter.ops.triton.rope.rope",
     "rope_cached_positions_offsets_fwd(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, "
     "positions: torch.Tensor, offsets: torch.Tensor, rotate_style: int, reuse_freqs_front_part: bool, "
     "nope_first: bool, transpose_output: bool = False) -> torch.Tensor"),
    ("aiter.ops.triton.rope.rope",
     "rope_cached_positions_offsets_fwd_inplace(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, "
     "positions: torch.Tensor, offsets: torch.Tensor, rotate_style: int, reuse_freqs_front_part: bool, "
     "nope_first: bool, transpose_output: bool = False) -> torch.Tensor"),
    ("aiter.ops.triton.rope.rope",
     "rope_cached_bwd(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, rotate_style: int, "
     "reuse_freqs_front_part: bool, nope_first: bool, transpose_output: bool = False)"),
    ("aiter.ops.triton.rope.rope",
     "rope_cached_positions_bwd(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, "
     "positions: torch.Tensor, rotate_style: int, reuse_freqs_front_part: bool, nope_first: bool, "
     "transpose_output: bool = False) -> torch.Tensor"),
    ("aiter.ops.triton.rope.rope",
     "rope_cached_positions_offsets_bwd(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, "
     "positions: torch.Tensor, offsets: torch.Tensor, rotate_style: int, reuse_freqs_front_part: bool, "
     "nope_first: bool, transpose_output: bool = False) -> torch.Tensor"),
    ("aiter.ops.triton.rope.rope",
     "rope_cached_thd_positions_2c_fwd(x: torch.Tensor, y: torch.Tensor, cos: torch.Tensor, "
     "sin: torch.Tensor, positions: torch.Tensor, rotate_style: int, reuse_freqs_front_part: bool, "
     "nope_first: bool, transpose_output: bool = False)"),
    ("aiter.ops.triton.rope.rope",
     "rope_cached_thd_positions_2c_fwd_inplace(x: torch.Tensor, y: torch.Tensor, cos: torch.Tensor, "
     "sin: torch.Tensor, positions: torch.Tensor, rotate_style: int, reuse_freqs_front_part: bool, "
     "nope_first: bool, transpose_output: bool = False)"),
    ("aiter.ops.triton.rope.rope",
     "rope_cached_thd_positions_offsets_2c_fwd(x: torch.Tensor, y: torch.Tensor, cos: torch.Tensor, "
     "sin: torch.Tensor, positions: torch.Tensor, offsets: torch.Tensor, rotate_style: int, "
     "reuse_freqs_front_part: bool, nope_first: bool, transpose_output: bool = False)"),
    ("aiter.ops.triton.rope.rope",
     "rope_cached_thd_positions_offsets_2c_fwd_inplace(x: torch.Tensor, y: torch.Tensor, cos: torch.Tensor, "
     "sin: torch.Tensor, positions: torch.Tensor, offsets: torch.Tensor, rotate_style: int, "
     "reuse_freqs_front_part: bool, nope_first: bool, transpose_output: bool = False)"),
    ("aiter.ops.triton.rope.rope",
     "rope_cached_thd_positions_2c_bwd(x: torch.Tensor, y: torch.Tensor, cos: torch.Tensor, "
     "sin: torch.Tensor, positions: torch.Tensor, rotate_style: int, reuse_freqs_front_part: bool, "
     "nope_first: bool, transpose_output: bool = False)"),
    ("aiter.ops.triton.rope.rope",
     "rope_cached_thd_positions_offsets_2c_bwd(x: torch.Tensor, y: torch.Tensor, cos: torch.Tensor, "
     "sin: torch.Tensor, positions: torch.Tensor, offsets: torch.Tensor, rotate_style: int, "
     "reuse_freqs_front_part: bool, nope_first: bool, transpose_output: bool = False)"),
    ("aiter.ops.triton.rope.rope",
     "rope_fwd_2d(x: torch.Tensor, cos_h: torch.Tensor, sin_h: torch.Tensor, cos_w: torch.Tensor, "
     "sin_w: torch.Tensor, img_height: torch.Tensor, img_width: torch.Tensor, rotate_style: int, "
     "reuse_freqs_front_part: bool, nope_first: bool, transpose_output: bool = False)"),
    ("aiter.ops.triton.rope.rope",
     "rope_fwd_2d_inplace(x: torch.Tensor, cos_h: torch.Tensor, sin_h: torch.Tensor, cos_w: torch.Tensor, "
     "sin_w: torch.Tensor, img_height: torch.Tensor, img_width: torch.Tensor, rotate_style: int, "
     "reuse_freqs_front_part: bool, nope_first: bool, transpose_output: bool = False)"),
    ("aiter.ops.triton.fusions.fused_kv_cache",
     "fused_qk_rope_reshape_and_cache(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, "
     "key_cache: torch.Tensor, value_cache: torch.Tensor, slot_mapping: torch.Tensor, pos: torch.Tensor, "
     "cos: torch.Tensor, sin: torch.Tensor, k_scale: torch.Tensor, v_scale: torch.Tensor, is_neox: bool, "
     "flash_layout: bool, apply_scale: bool = True, offs: torch.Tensor = None, q_out: torch.Tensor = None, "
     "k_out: torch.Tensor = None, output_zeros: bool = True, zeros_out: torch.Tensor = None, "
     "upcast_operand: bool = False)"),
    ("aiter.ops.triton.fusions.fused_qk_concat",
     "fused_qk_cat(q1: torch.Tensor, q2: torch.Tensor, k1: torch.Tensor, k2: torch.Tensor)"),
    ("aiter.ops.triton.fusions.fused_qk_concat",
     "fused_qk_rope_cat(q_nope: torch.Tensor, q_pe: torch.Tensor, k_nope: torch.Tensor, k_pe: torch.Tensor, "
     "pos: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, is_neox: bool)"),
    ("aiter.ops.triton.quant.quant",
     "static_per_tensor_quant_fp8_i8(qx: torch.Tensor, x_in: torch.Tensor, scale_in: torch.Tensor)"),
    ("aiter.ops.triton.quant.quant",
     "dynamic_per_tensor_quant_fp8_i8(qx: torch.Tensor, x_in: torch.Tensor, scale_out: torch.Tensor)"),
    ("aiter.ops.triton.quant.quant",
     "dynamic_per_token_quant_fp8_i8(qx: torch.Tensor, x_in: torch.Tensor, scale_out: torch.Tensor)"),
    ("aiter.ops.triton.normalization.rmsnorm",
     "rmsnorm_forward_inference(x: torch.Tensor, weight: torch.Tensor, eps: float)"),
    ("aiter.ops.triton.activation",
     "act_mul_and_mxfp4_quant(x: torch.Tensor, activation: Literal['silu', 'gelu', 'gelu_tanh'], "
     "scaling_mode: str = 'even', shuffle: bool = False, "
     "scale_shuffle_padding: bool = False) -> tuple[torch.Tensor, torch.Tensor]"),
    ("aiter.ops.triton.quant.fused_mxfp4_quant",
     "fused_rms_mxfp4_quant(x1: torch.Tensor, x1_weight: torch.Tensor, x1_epsilon: float, "
     "x2: torch.Tensor | None = None, x2_weight: torch.Tensor | None = None, "
     "x2_epsilon: float = 0.0, res1: torch.Tensor | None = None, shuffle: bool | None = False, "
     "scale_shuffle_padding: bool | None = False, output_unquantized_inp1 = False, "
     "inargs: str = 'auto')"),
    ("aiter.ops.triton.quant.fused_mxfp4_quant",
     "fused_flatten_mxfp4_quant(x: torch.Tensor)"),
    ("aiter.ops.triton.quant.fused_mxfp8_quant",
     "fused_rms_mxfp8_quant(x: torch.Tensor, weight: torch.Tensor, eps: float, "
     "y: torch.Tensor | None = None, scale: torch.Tensor | None = None) -> tuple[torch.Tensor, "
     "torch.Tensor]"),
    ("aiter.ops.triton.quant.fused_mxfp8_quant",
     "fused_flatten_mxfp8_quant(x: torch.Tensor, "
     "quant_dtype: torch.dtype = torch.float8_e4m3fn) -> tuple[torch.Tensor, torch.Tensor]"),
    ("aiter.ops.triton.quant.quant",
     "dynamic_mxfp4_quant(x: torch.Tensor, scaling_mode: str = 'even') -> tuple[torch.Tensor, "
     "torch.Tensor]"),
    ("aiter.ops.triton.quant.quant",
     "dynamic_mxfp8_quant(x: torch.Tensor, scale: torch.Tensor | None = None, "
     "quant_dtype: torch.dtype = torch.float8_e4m3fn) -> tuple[torch.Tensor, torch.Tensor]"),
    ("aiter.ops.triton.quant.quant",
     "dynamic_nvfp4_quant(x: torch.Tensor, "
     "global_scale: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]"),
    ("aiter.ops.triton.normalization.fused_rmsnorm_add",
     "fused_rmsnorm_add(x, weight, epsilon, res1 = None)"),
    ("aiter.ops.triton.normalization.fused_add_rmsnorm_pad",
     "fused_add_rmsnorm_pad(x: torch.Tensor, weight: torch.Tensor, epsilon: float, "
     "res: torch.Tensor = None, x_pad_to_multiple: int = 0)"),
    ("aiter.ops.triton.moe.moe_routing_sigmoid_top1_fused",
     "routing_sigmoid_top1(x, w, topk, fused_shared_experts = False, config: dict[str, "
     "any] | None = None)"),
    ("aiter.ops.triton.quant",
     "dynamic_mxfp4_quant(x: torch.Tensor, scaling_mode: str = 'even') -> tuple[torch.Tensor, torch.Tensor]"),
    ("aiter.ops.triton.fusions.fused_clamp_act_mul",
     "fused_clamp_act_mul(inp: torch.Tensor, out: torch.Tensor | None = None, scale: torch.Tensor | None = None, "
     "swiglu_limit: float = 0, activation: Literal['silu', 'gelu', 'gelu_tanh'] = 'silu', "
     "weights: torch.Tensor | None = None, dtype_quant: torch.dtype | None = None, transpose_scale: bool = False, "
     "quant_block_size: int = 128, scale_dtype_fmt: Literal['fp32', 'ue8m0'] = 'fp32', "
     "shuffle_scale: bool = False)"),
    ("aiter.ops.triton.fusions.fused_mul_add",
     "fused_mul_add(x: torch.Tensor, a: torch.Tensor | float | int, b: torch.Tensor | float | int, "
     "out: torch.Tensor | None = None)"),
    ("aiter.ops.triton.fusions.fused_kv_cache",
     "fused_qk_rope_cat_and_cache_mla(q_nope: torch.Tensor, q_pe: torch.Tensor, k_nope: torch.Tensor, "
     "k_pe: torch.Tensor, kv_cache: torch.Tensor, slot_mapping: torch.Tensor, pos: torch.Tensor, "
     "cos: torch.Tensor, sin: torch.Tensor, k_scale: torch.Tensor, is_neox: bool, "
     "num_decode_toks_for_zeros: int = 0, apply_scale: bool = True, q_out: torch.Tensor = None, "
     "decode_q_pe_out: torch.Tensor = None, k_pe_out: torch.Tensor = None, q_out_dtype: torch.dtype = None, "
     "shuffled_kv_cache: bool = False, upcast_operand: bool = False) -> tuple[torch.Tensor, torch.Tensor, "
     "torch.Tensor, torch.Tensor]"),
    ("aiter.ops.triton.fusions.fused_bmm_rope_kv_cache",
     "fused_fp8_bmm_rope_cat_and_cache_mla(q_nope: torch.Tensor, w_k: torch.Tensor, w_k_scale: torch.Tensor, "
     "q_pe: torch.Tensor, k_nope: torch.Tensor, k_rope: torch.Tensor, kv_cache: torch.Tensor, "
     "slot_mapping: torch.Tensor, positions: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, "
     "group_size: int = 128, transpose_bm: bool = True, config: dict | None = None, "
     "k_scale: torch.Tensor | None = None, is_neox: bool = False, "
     "q_out_dtype: torch.dtype | None = torch.bfloat16, num_decode_toks_for_zeros: int = 0) "
     "-> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]"),
    ("aiter.ops.triton.fusions.fused_bmm_rope_kv_cache",
     "fused_fp4_bmm_rope_cat_and_cache_mla(q_nope: torch.Tensor, w_k: torch.Tensor, w_k_scale: torch.Tensor, "
     "q_pe: torch.Tensor, k_nope: torch.Tensor, k_rope: torch.Tensor, kv_cache: torch.Tensor, "
     "slot_mapping: torch.Tensor, positions: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, "
     "y: torch.Tensor | None = None, transpose_bm: bool = True, prequant: bool = True, "
     "y_scale: torch.Tensor | None = None, config: str | None = None, k_scale: torch.Tensor | None = None, "
     "is_neox: bool = False, q_out_dtype = None, num_decode_toks_for_zeros: int = 0) "
     "-> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]"),
    ("aiter.ops.triton.fusions.fused_bmm_rope_kv_cache", "set_use_gemm_splitk_bf16(value: bool)"),
    ("aiter.ops.triton.fusions.fused_reduce_qk_norm_rope_swa_write",
     "fused_reduce_qk_norm_rope_swa_write(q: torch.Tensor, kv: torch.Tensor, q_norm_weight: torch.Tensor | None, "
     "kv_norm_weight: torch.Tensor | None, q_rms_eps: float, kv_rms_eps: float, rope_head_dim: int, "
     "cos_cache: torch.Tensor, sin_cache: torch.Tensor, positions: torch.Tensor, q_out: torch.Tensor | None = None, "
     "is_neox: bool = False, write_indices: torch.Tensor | None = None, "
     "batch_id_per_token: torch.Tensor | None = None, state_slot_mapping: torch.Tensor | None = None, "
     "swa_kv: torch.Tensor | None = None, win: int = 128, dtype: torch.dtype = torch.bfloat16) -> torch.Tensor"),
    ("aiter.ops.triton.rope.rope",
     "rope_fwd_3d(x, grid_sizes: tl.constexpr, freqs: tl.constexpr, sp_size: tl.constexpr, sp_rank: tl.constexpr)"),
    ("aiter.ops.triton.fusions.fused_kv_cache",
     "fused_qk_rope_cosine_cache_llama(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, "
     "key_cache: torch.Tensor, value_cache: torch.Tensor, slot_mapping: torch.Tensor, pos: torch.Tensor, "
     "cos: torch.Tensor, sin: torch.Tensor, k_scale: torch.Tensor, v_scale: torch.Tensor, is_neox: bool, "
     "flash_layout: bool, apply_scale: bool = True, offs: torch.Tensor = None, q_out: torch.Tensor = None)"),
    ("aiter.ops.triton.rope.fused_qkv_split_qk_norm_rope_cache",
     "fused_qkv_split_qk_norm_rope_cache(qkv: torch.Tensor, q_weight: torch.Tensor, k_weight: torch.Tensor, "
     "cos: torch.Tensor, sin: torch.Tensor, positions: torch.Tensor, key_cache: torch.Tensor, "
     "value_cache: torch.Tensor, slot_mapping: torch.Tensor, qh: int, kvh: int, head_dim: int, "
     "is_neox: bool = True, offsets: torch.Tensor = None, reuse_freqs_front_part: bool = True, "
     "attn_output_gate: bool = False, k_scale: torch.Tensor = None, v_scale: torch.Tensor = None, "
     "eps: float = 1e-05, gated_qkv_layout: str = 'interleaved', kv_cache_layout: str = 'HND')"),
    ("aiter.ops.triton.rope.fused_qkv_split_qk_norm_rope_cache",
     "infer_rope_cache_triton_block_t(T: int, device: torch.device) -> int"),
    ("aiter.ops.triton.fusions.fused_routing_from_topk",
     "fused_routing_from_topk(topk_weights: torch.Tensor, topk_ids: torch.Tensor, n_expts_tot: int, "
     "expert_map: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]"),
]
# older module paths vLLM and SGLang still import, and what each must hold
FLAT_PATHS = {
    "aiter.ops.triton.fused_kv_cache": ["fused_qk_rope_reshape_and_cache", "cat_and_cache_mla",
                                        "fused_qk_rope_cat_and_cache_mla", "fused_qk_rope_cosine_cache_llama"],
    "aiter.ops.triton.fused_qk_concat": ["fused_qk_cat", "fused_qk_rope_cat"],
    "aiter.ops.triton.kv_cache": ["cat_and_cache_mla"],
    "aiter.ops.triton.fused_mxfp4_quant": ["fused_rms_mxfp4_quant", "fused_flatten_mxfp4_quant"],
    "aiter.ops.triton.fused_add_rmsnorm_pad": ["fused_add_rmsnorm_pad"],
    "aiter.ops.triton.moe_routing_sigmoid_top1_fused": ["routing_sigmoid_top1"],
    "aiter.ops.triton.fused_fp8_quant": ["fused_rms_fp8_group_quant", "fused_rms_gated_fp8_group_quant",
                                         "fused_flatten_fp8_group_quant", "fused_reduce_act_mul_fp8_group_quant",
                                         "fused_reduce_rms_fp8_group_quant", "fused_rms_fp8_per_tensor_static_quant",
                                         "fused_silu_mul_fp8_per_tensor_static_quant", "get_fp8_min_max_bounds"],
}


def _aiter_params(signature: str) -> list[tuple[str, str, bool, object]]:
    """(name, kind, has a default, the default if a literal else ...) of aiter's parameters."""
    fn = ast.parse(f"def {signature}: pass").body[0]
    a = fn.args
    out = []
    positional = a.posonlyargs + a.args
    defaults = [None] * (len(positional) - len(a.defaults)) + list(a.defaults)
    for p, d in zip(positional, defaults):
        out.append((p.arg, "positional", d is not None, _literal(d)))
    for p, d in zip(a.kwonlyargs, a.kw_defaults):
        out.append((p.arg, "keyword", d is not None, _literal(d)))
    return out


def _literal(node):
    try:
        return ast.literal_eval(node) if node is not None else None
    except ValueError:  # a module constant of aiter's (fp8_dtype, MAX_TINY_ROW): any default
        return ...


def _problems(fn, signature: str) -> list[str]:
    ours = inspect.signature(fn).parameters
    names = list(ours)
    problems = []
    theirs = _aiter_params(signature)
    for i, (name, kind, has_default, default) in enumerate(theirs):
        p = ours.get(name)
        if p is None:
            problems.append(f"no parameter {name}")
            continue
        if kind == "positional" and (names.index(name) != i or p.kind not in (p.POSITIONAL_ONLY,
                                                                            p.POSITIONAL_OR_KEYWORD)):
            problems.append(f"{name} is not aiter's positional parameter {i}")
        if kind == "keyword" and p.kind not in (p.KEYWORD_ONLY, p.POSITIONAL_OR_KEYWORD):
            problems.append(f"{name} cannot be passed by keyword")
        if has_default and p.default is p.empty:
            problems.append(f"{name} has no default (aiter's: {default!r})")
        elif has_default and default is not ... and p.default != default:
            problems.append(f"{name} defaults to {p.default!r}, aiter's to {default!r}")
    for name, p in ours.items():  # ours alone: never required
        if name not in {t[0] for t in theirs} and p.default is p.empty and p.kind not in (p.VAR_POSITIONAL,
                                                                                         p.VAR_KEYWORD):
            problems.append(f"{name} (not aiter's) has no default")
    return problems


def _ours(aiter_module: str):
    return importlib.import_module("aiter_lite" + aiter_module.removeprefix("aiter"))


@pytest.mark.parametrize("module, signature", AITER, ids=[s.split("(")[0] for _, s in AITER])
def test_aiter_function_at_aiter_path(module, signature):
    name = signature.split("(")[0]
    fn = getattr(_ours(module), name, None)
    assert fn is not None, f"{name} is not importable from aiter_lite{module.removeprefix('aiter')}"
    problems = _problems(fn, signature)
    assert not problems, f"{name}: " + "; ".join(problems)


@pytest.mark.parametrize("module", sorted(FLAT_PATHS))
def test_older_paths(module):
    ours = _ours(module)
    for name in FLAT_PATHS[module]:
        assert callable(getattr(ours, name, None)), f"{module}.{name}"


# aiter's top-level (HIP) routing ops as vLLM and SGLang call them (serving_calls), at aiter_lite's top level
TOP_LEVEL = [
    "topk_softmax(topk_weights, topk_indices, token_expert_indices, gating_output, need_renorm, "
    "num_shared_experts=0, shared_expert_scoring_func='')",
    "topk_sigmoid(topk_weights, topk_indices, gating_output)",
    "grouped_topk(gating_output, topk_weights, topk_ids, num_expert_group, topk_group, need_renorm, is_softmax=True, "
    "routed_scaling_factor=1.0)",
    "biased_grouped_topk(gating_output, correction_bias, topk_weights, topk_ids, num_expert_group, topk_group, "
    "need_renorm, routed_scaling_factor=1.0)",
]


@pytest.mark.parametrize("signature", TOP_LEVEL, ids=[s.split("(")[0] for s in TOP_LEVEL])
def test_aiter_top_level_routing(signature):
    import aiter_lite

    fn = getattr(aiter_lite, signature.split("(")[0], None)
    assert fn is not None and not _problems(fn, signature), _problems(fn, signature) if fn else "missing"


def test_the_same_function_at_every_path():
    """An alias is the op itself (one registration, one set of launch plans)."""
    from aiter_lite.ops.triton.fusions import fused_kv_cache
    from aiter_lite.ops.triton.normalization import layernorm

    assert _ours("aiter.ops.triton.normalization.norm").layer_norm is layernorm.layer_norm
    assert _ours("aiter.ops.triton.fused_kv_cache").cat_and_cache_mla is fused_kv_cache.cat_and_cache_mla
    with pytest.raises(AttributeError, match="has no attribute 'not_an_op'"):
        _ours("aiter.ops.triton.normalization.norm").not_an_op


def test_the_checker_finds_each_kind_of_difference():
    def f(x, k, dim=-1, *, largest=True, extra):
        pass

    assert _problems(f, "f(x, k, dim: int = -1, *, largest: bool = True)") == ["extra (not aiter's) has no default"]
    assert _problems(f, "f(k, x)") == ["k is not aiter's positional parameter 0", "x is not aiter's positional "
                                       "parameter 1", "extra (not aiter's) has no default"]
    assert "dim defaults to -1, aiter's to 0" in _problems(f, "f(x, k, dim=0)")
    assert "missing has no default" not in _problems(f, "f(x, k, *, missing=1)")
    assert "no parameter missing" in _problems(f, "f(x, k, *, missing=1)")


def test_aiter_keywords_taken():
    """aiter's keywords that tune or choose a layout: taken, checked, and where they change
    nothing here (fp32 math always; the launch config picks topk's regime), the same result."""
    import torch

    from aiter_lite.ops.native.normalization import rmsnorm as native_rms
    from aiter_lite.ops.triton import topk
    from aiter_lite.ops.triton.fusions import fused_kv_cache
    from aiter_lite.ops.triton.normalization import rmsnorm
    from op_benchmarks.utils.op_args import op_args
    from op_tests.utils import DEVICE, assert_close

    x = torch.randn(4, 300, device=DEVICE)
    assert all(torch.equal(a, b) for a, b in zip(topk.topk(x, 5, tiny_row_thresh=16), topk.topk(x, 5)))
    with pytest.raises(ValueError, match="topk: tiny_row_thresh must be >= 0"):
        topk.topk(x, 5, tiny_row_thresh=-1)
    args = op_args("fused_qk_rope_reshape_and_cache", device=DEVICE)
    outs = [fused_kv_cache.fused_qk_rope_reshape_and_cache(*[a.clone() if isinstance(a, torch.Tensor) else a
                                                             for a in args], upcast_operand=up) for up in (False, True)]
    assert all(torch.equal(a, b) for a, b in zip(*outs))
    mla = op_args("cat_and_cache_mla", device=DEVICE)
    with pytest.raises(ValueError, match="cat_and_cache_mla: shuffled_kv_cache=True .* not supported"):
        fused_kv_cache.cat_and_cache_mla(*mla, shuffled_kv_cache=True)
    w = torch.randn(300, device=DEVICE)
    assert_close(rmsnorm.rmsnorm_forward_inference(x, w, 1e-6), native_rms.rms_norm(x, w, 1e-6))
    with pytest.raises(ValueError, match="rmsnorm_forward_inference: weight must have shape .* for x of shape"):
        rmsnorm.rmsnorm_forward_inference(x, w[:-1], 1e-6)


def test_fused_rmsnorm_add():
    """aiter's dispatcher: the norm of x, or (norm of x + res1, x + res1); differentiable in
    x, res1 and weight; x and res1 untouched; bad arguments named as the caller names them."""
    import torch

    from aiter_lite.ops.native.normalization.fused_rmsnorm_add import fused_rmsnorm_add as native
    from aiter_lite.ops.triton.normalization.fused_rmsnorm_add import fused_rmsnorm_add
    from op_tests.utils import DEVICE, assert_close

    x, r, w = (torch.randn(5, 96, device=DEVICE) for _ in range(3))
    w = w[0]
    assert_close(fused_rmsnorm_add(x, w, 1e-6), native(x, w, 1e-6))
    xs, rs = x.clone().requires_grad_(), r.clone().requires_grad_()
    out, s = fused_rmsnorm_add(xs, w, 1e-6, rs)
    want_out, want_s = native(x, w, 1e-6, r)
    assert_close(out, want_out)
    assert_close(s, want_s)
    (out.sum() + 2 * s.sum()).backward()
    xn, rn = x.clone().requires_grad_(), r.clone().requires_grad_()
    a, b = native(xn, w, 1e-6, rn)
    (a.sum() + 2 * b.sum()).backward()
    assert_close(xs.grad, xn.grad, atol=1e-5, rtol=1e-4)
    assert_close(rs.grad, rn.grad, atol=1e-5, rtol=1e-4)
    assert torch.equal(xs.detach(), x) and torch.equal(rs.detach(), r)
    with pytest.raises(ValueError, match="fused_rmsnorm_add: res1 must have x's shape"):
        fused_rmsnorm_add(x, w, 1e-6, r[:2])
    with pytest.raises(ValueError, match="fused_rmsnorm_add: weight must have shape .* for x of shape"):
        fused_rmsnorm_add(x, w[:3], 1e-6)
    with pytest.raises(TypeError, match="fused_rmsnorm_add: weight must be a torch.Tensor"):
        fused_rmsnorm_add(x, None, 1e-6)
