"""Every public op as a ``torch.library`` op: ``torch.ops.aiter_lite.<name>``.

Importing :mod:`aiter_lite` registers them. Each op's real kernel is the Triton backend's
public function (checks, then one launch); its fake kernel is the native reference run
on fake tensors, so torch.compile and ``torch.library.opcheck`` see the same shapes and
dtypes as eager. Schemas follow the public functions, with the rules a registered op
obeys:

* an argument the op writes is declared mutable (``Tensor(a!)``): the out-parameter and
  in-place forms (``silu_and_mul(out, input)``, ``fused_add_rms_norm``, ``*_inplace``,
  the KV-cache writes) return nothing;
* an op that allocates returns new tensors only (a static scale handed back by
  ``scaled_fp8_quant`` is a copy here); optional output buffers of the Python functions
  (``fused_silu_mul(out=)``, ``scaled_fp8_quant(output=)``,
  ``per_token_group_quant_fp8(out_q=)``) are covered by the out-parameter ops;
* launch-configuration arguments (``config=``) are not part of a schema.

Eager code should call the Python functions (no dispatcher on the launch path); these
ops serve graphs and stacks that call kernels through ``torch.ops``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable

import torch

from aiter_lite.ops.native import activation as n_act
from aiter_lite.ops.native import fusions as n_fusions
from aiter_lite.ops.native import moe_routing as n_moe
from aiter_lite.ops.native import softmax as n_softmax
from aiter_lite.ops.native import topk as n_topk
from aiter_lite.ops.native.normalization import layernorm as n_ln
from aiter_lite.ops.native.normalization import rmsnorm as n_rms
from aiter_lite.ops.native.quant import act_quant as n_act_quant
from aiter_lite.ops.native.quant import norm_quant as n_norm_quant
from aiter_lite.ops.native.quant import quant as n_quant
from aiter_lite.ops.native.rope import rope as n_rope
from aiter_lite.ops.triton import activation as t_act
from aiter_lite.ops.triton import fusions as t_fusions
from aiter_lite.ops.triton import moe_routing as t_moe
from aiter_lite.ops.triton import softmax as t_softmax
from aiter_lite.ops.triton import topk as t_topk
from aiter_lite.ops.triton.normalization import layernorm as t_ln
from aiter_lite.ops.triton.normalization import rmsnorm as t_rms
from aiter_lite.ops.triton.quant import act_quant as t_act_quant
from aiter_lite.ops.triton.quant import norm_quant as t_norm_quant
from aiter_lite.ops.triton.quant import quant as t_quant
from aiter_lite.ops.triton.rope import rope as t_rope
from aiter_lite.spec.normalization import LAYER_NORM_EPS
from aiter_lite.spec.quant import GROUP_EPS

__all__ = ["OPS", "OpSpec"]


@dataclass(frozen=True)
class OpSpec:
    """One registered op: its schema (``name(args) -> returns``), the Triton function that
    runs it and the native one its fake runs."""

    schema: str
    triton: Callable
    native: Callable

    @property
    def name(self) -> str:
        return self.schema.split("(", 1)[0]

    @property
    def mutates(self) -> tuple[str, ...]:
        return tuple(re.findall(r"Tensor\(\w!\)\??\s+(\w+)", self.schema))

    @property
    def returns_nothing(self) -> bool:
        return self.schema.rstrip().endswith("-> ()")


def _same(name: str, schema: str, t_mod, n_mod) -> OpSpec:
    return OpSpec(f"{name}{schema}", getattr(t_mod, name), getattr(n_mod, name))


_OUT_ACT = "(Tensor(a!) out, Tensor input) -> ()"
_ROPE_TAIL = "int rotate_style, bool reuse_freqs_front_part, bool nope_first, bool transpose_output=False"
# tensors ahead of the RoPE arguments, by op stem; "2c" stems turn x and y
_ROPE_STEMS = {
    "rope": "Tensor freqs",
    "rope_thd": "Tensor cu_seqlens, Tensor freqs",
    "rope_cached": "Tensor cos, Tensor sin",
    "rope_cached_positions": "Tensor cos, Tensor sin, Tensor positions",
    "rope_cached_positions_offsets": "Tensor cos, Tensor sin, Tensor positions, Tensor offsets",
    "rope_cached_thd_positions_2c": "Tensor cos, Tensor sin, Tensor positions",
    "rope_cached_thd_positions_offsets_2c": "Tensor cos, Tensor sin, Tensor positions, Tensor offsets",
}


def _rope_specs() -> list[OpSpec]:
    specs = []
    for stem, tensors in _ROPE_STEMS.items():
        two = stem.endswith("_2c")
        for kind in ("fwd", "fwd_inplace", "bwd"):
            name = f"{stem}_{kind}"
            inplace = kind == "fwd_inplace"
            xs = ("Tensor(a!) x, Tensor(b!) y" if two else "Tensor(a!) x") if inplace else \
                ("Tensor x, Tensor y" if two else "Tensor x")
            ret = "()" if inplace else ("(Tensor, Tensor)" if two else "Tensor")
            specs.append(_same(name, f"({xs}, {tensors}, {_ROPE_TAIL}) -> {ret}", t_rope, n_rope))
    tensors_2d = "Tensor cos_h, Tensor sin_h, Tensor cos_w, Tensor sin_w, int img_height, int img_width"
    for name, xs, ret in (("rope_fwd_2d", "Tensor x", "Tensor"), ("rope_fwd_2d_inplace", "Tensor(a!) x", "()"),
                          ("rope_bwd_2d", "Tensor x", "Tensor")):
        specs.append(_same(name, f"({xs}, {tensors_2d}, {_ROPE_TAIL}) -> {ret}", t_rope, n_rope))
    return specs


def _int8_group(fn):
    def run(x, group_size, eps=GROUP_EPS, dtype=None):
        return fn(x, group_size, eps, torch.int8 if dtype is None else dtype)
    return run


def _kw(fn, *names):
    """``fn`` with its trailing arguments ``names`` (keyword-only there) taken positionally."""
    def run(*args):
        head = len(args) - len(names)
        return fn(*args[:head], **dict(zip(names, args[head:])))
    return run


def _no_output(fn):
    def run(input, scale=None, scale_ub=None, use_per_token_if_dynamic=False, dtype=None):
        return fn(input, scale, scale_ub, use_per_token_if_dynamic, None, dtype)
    return run


def _no_dump(fn):
    def run(out, input, yscale, weight, epsilon, scale_ub=None, clamp_out=False):
        fn(out, input, yscale, weight, epsilon, scale_ub, clamp_out)
    return run


def _rope_cache(fn):
    def run(q, k, v, key_cache, value_cache, slot_mapping, pos, cos, sin, k_scale, v_scale, is_neox, flash_layout,
            apply_scale, offs, q_out, k_out, zeros_out):
        fn(q, k, v, key_cache, value_cache, slot_mapping, pos, cos, sin, k_scale, v_scale, is_neox, flash_layout,
           apply_scale=apply_scale, offs=offs, q_out=q_out, k_out=k_out, output_zeros=False, zeros_out=zeros_out)
    return run


def _specs() -> list[OpSpec]:
    s = [
        # activation
        _same("silu_and_mul", _OUT_ACT, t_act, n_act),
        _same("gelu_and_mul", _OUT_ACT, t_act, n_act),
        _same("gelu_tanh_and_mul", _OUT_ACT, t_act, n_act),
        _same("act_and_mul", "(Tensor(a!) out, Tensor input, str activation) -> ()", t_act, n_act),
        _same("fused_silu_mul", "(Tensor x) -> Tensor", t_act, n_act),
        _same("silu", "(Tensor x) -> Tensor", t_act, n_act),
        _same("gelu", "(Tensor x, str approximate=\"none\") -> Tensor", t_act, n_act),
        _same("relu", "(Tensor x) -> Tensor", t_act, n_act),
        # normalization
        _same("rms_norm", "(Tensor input, Tensor? weight, float epsilon, float weight_offset=0.0) -> Tensor",
              t_rms, n_rms),
        _same("rmsnorm2d_fwd_with_add", "(Tensor(a!) out, Tensor input, Tensor residual_in, Tensor(b!) residual_out, "
              "Tensor? weight, float epsilon, float weight_offset=0.0) -> ()", t_rms, n_rms),
        _same("fused_add_rms_norm", "(Tensor(a!) input, Tensor(b!) residual, Tensor? weight, float epsilon, "
              "float weight_offset=0.0) -> ()", t_rms, n_rms),
        _same("layer_norm", f"(Tensor input, Tensor? weight, Tensor? bias, float eps={LAYER_NORM_EPS}, "
              "Tensor? x_bias=None, float weight_offset=0.0) -> Tensor", t_ln, n_ln),
        _same("layernorm2d_fwd_with_add", "(Tensor(a!) out, Tensor input, Tensor residual_in, "
              "Tensor(b!) residual_out, Tensor? weight, Tensor? bias, float epsilon, Tensor? x_bias=None, "
              "float weight_offset=0.0) -> ()", t_ln, n_ln),
        # softmax, topk, routing
        _same("softmax", "(Tensor x, int dim=-1) -> Tensor", t_softmax, n_softmax),
        _same("log_softmax", "(Tensor x, int dim=-1) -> Tensor", t_softmax, n_softmax),
        _same("topk", "(Tensor x, int k, int dim=-1, bool largest=True, bool sorted=True) -> (Tensor, Tensor)",
              t_topk, n_topk),
        _same("topk_softmax", "(Tensor gating_output, int topk, bool renormalize) -> (Tensor, Tensor)", t_moe, n_moe),
        _same("grouped_topk", "(Tensor gating_output, int topk, int num_expert_group, int topk_group, "
              "bool renormalize, str scoring_func=\"softmax\", float routed_scaling_factor=1.0) -> (Tensor, Tensor)",
              t_moe, n_moe),
        _same("biased_grouped_topk", "(Tensor gating_output, Tensor correction_bias, int topk, int num_expert_group, "
              "int topk_group, bool renormalize, float routed_scaling_factor=1.0) -> (Tensor, Tensor)", t_moe, n_moe),
        OpSpec("moe_routing(Tensor gating_output, int topk, str scoring_func=\"softmax\", bool renormalize=False, "
               "int num_expert_group=1, int topk_group=1, Tensor? correction_bias=None, "
               "float routed_scaling_factor=1.0) -> (Tensor, Tensor)",
               *(_kw(m.moe_routing, "scoring_func", "renormalize", "num_expert_group", "topk_group",
                     "correction_bias", "routed_scaling_factor") for m in (t_moe, n_moe))),
        # quantization
        _same("static_per_tensor_quant_fp8_i8", "(Tensor(a!) qx, Tensor x_in, Tensor scale_in) -> ()", t_quant,
              n_quant),
        _same("dynamic_per_tensor_quant_fp8_i8", "(Tensor(a!) qx, Tensor x_in, Tensor(b!) scale_out) -> ()",
              t_quant, n_quant),
        _same("dynamic_per_token_quant_fp8_i8", "(Tensor(a!) qx, Tensor x_in, Tensor(b!) scale_out, "
              "Tensor? scale_ub=None) -> ()", t_quant, n_quant),
        _same("per_token_group_quant", "(Tensor(a!) qx, Tensor x_in, Tensor(b!) scale_out, int group_size, "
              f"float eps={GROUP_EPS}) -> ()", t_quant, n_quant),
        OpSpec("scaled_fp8_quant(Tensor input, Tensor? scale=None, Tensor? scale_ub=None, "
               "bool use_per_token_if_dynamic=False, ScalarType? dtype=None) -> (Tensor, Tensor)",
               *(_no_output(m.scaled_fp8_quant) for m in (t_quant, n_quant))),
        _same("per_token_group_quant_fp8", f"(Tensor x, int group_size, float eps={GROUP_EPS}, "
              "ScalarType? dtype=None, bool column_major_scales=False) -> (Tensor, Tensor)", t_quant, n_quant),
        OpSpec(f"per_token_group_quant_int8(Tensor x, int group_size, float eps={GROUP_EPS}, "
               "ScalarType? dtype=None) -> (Tensor, Tensor)", _int8_group(t_quant.per_token_group_quant_int8),
               _int8_group(n_quant.per_token_group_quant_int8)),
        OpSpec("rmsnorm2d_fwd_with_dynamicquant(Tensor(a!) out, Tensor input, Tensor(b!) yscale, Tensor? weight, "
               "float epsilon, Tensor? scale_ub=None, bool clamp_out=False) -> ()",
               *(_no_dump(m.rmsnorm2d_fwd_with_dynamicquant) for m in (t_norm_quant, n_norm_quant))),
        _same("rmsnorm2d_fwd_with_smoothquant", "(Tensor(a!) out, Tensor input, Tensor xscale, Tensor(b!) yscale, "
              "Tensor? weight, float epsilon) -> ()", t_norm_quant, n_norm_quant),
        _same("rmsnorm2d_fwd_with_add_dynamicquant", "(Tensor(a!) out, Tensor input, Tensor residual_in, "
              "Tensor(b!) residual_out, Tensor(c!) yscale, Tensor? weight, float epsilon) -> ()", t_norm_quant,
              n_norm_quant),
        _same("rmsnorm2d_fwd_with_add_smoothquant", "(Tensor(a!) out, Tensor input, Tensor residual_in, "
              "Tensor(b!) residual_out, Tensor xscale, Tensor(c!) yscale, Tensor? weight, float epsilon) -> ()",
              t_norm_quant, n_norm_quant),
        _same("layernorm2d_fwd_with_dynamicquant", "(Tensor(a!) out, Tensor input, Tensor(b!) yscale, "
              f"Tensor? weight, Tensor? bias, float epsilon={LAYER_NORM_EPS}, Tensor? x_bias=None) -> ()",
              t_norm_quant, n_norm_quant),
        _same("layernorm2d_fwd_with_smoothquant", "(Tensor(a!) out, Tensor input, Tensor xscale, Tensor(b!) yscale, "
              f"Tensor? weight, Tensor? bias, float epsilon={LAYER_NORM_EPS}, Tensor? x_bias=None) -> ()",
              t_norm_quant, n_norm_quant),
        _same("layernorm2d_fwd_with_add_dynamicquant", "(Tensor(a!) out, Tensor input, Tensor residual_in, "
              "Tensor(b!) residual_out, Tensor(c!) yscale, Tensor? weight, Tensor? bias, "
              f"float epsilon={LAYER_NORM_EPS}, Tensor? x_bias=None) -> ()", t_norm_quant, n_norm_quant),
        _same("layernorm2d_fwd_with_add_smoothquant", "(Tensor(a!) out, Tensor input, Tensor residual_in, "
              "Tensor(b!) residual_out, Tensor xscale, Tensor(c!) yscale, Tensor? weight, Tensor? bias, "
              f"float epsilon={LAYER_NORM_EPS}, Tensor? x_bias=None) -> ()", t_norm_quant, n_norm_quant),
        _same("rms_norm_static_fp8_quant", "(Tensor(a!) out, Tensor input, Tensor? weight, Tensor scale, "
              "float epsilon) -> ()", t_norm_quant, n_norm_quant),
        _same("fused_add_rms_norm_static_fp8_quant", "(Tensor(a!) out, Tensor input, Tensor(b!) residual, "
              "Tensor? weight, Tensor scale, float epsilon) -> ()", t_norm_quant, n_norm_quant),
        _same("rms_norm_dynamic_per_token_quant", "(Tensor(a!) out, Tensor input, Tensor? weight, Tensor(b!) scales, "
              "float epsilon, Tensor? scale_ub=None, Tensor(c!)? residual=None) -> ()", t_norm_quant, n_norm_quant),
        OpSpec("act_mul_and_fp8_group_quant(Tensor x, str activation, int group_size, ScalarType? dtype_quant=None, "
               "bool column_major_scales=False) -> (Tensor, Tensor)",
               *(_kw(m.act_mul_and_fp8_group_quant, "column_major_scales") for m in (t_act_quant, n_act_quant))),
        OpSpec("act_mul_and_fp8_quant(Tensor x, str activation, Tensor? scale=None, ScalarType? dtype_quant=None, "
               "Tensor? scale_ub=None) -> (Tensor, Tensor)",
               *(_kw(m.act_mul_and_fp8_quant, "scale_ub") for m in (t_act_quant, n_act_quant))),
        _same("silu_and_mul_quant", "(Tensor(a!) out, Tensor input, Tensor scale) -> ()", t_act_quant, n_act_quant),
        # fusions
        _same("fused_qkv_split_qk_rope", "(Tensor qkv, Tensor cos, Tensor sin, Tensor positions, int qh, int kvh, "
              "int head_dim, bool is_neox=True, Tensor? offsets=None, bool reuse_freqs_front_part=True, "
              "bool nope_first=False) -> (Tensor, Tensor, Tensor)", t_fusions, n_fusions),
        OpSpec("fused_qk_rope_reshape_and_cache(Tensor q, Tensor k, Tensor v, Tensor(a!) key_cache, "
               "Tensor(b!) value_cache, Tensor slot_mapping, Tensor pos, Tensor cos, Tensor sin, Tensor? k_scale, "
               "Tensor? v_scale, bool is_neox, bool flash_layout, bool apply_scale, Tensor? offs, Tensor(c!) q_out, "
               "Tensor(d!) k_out, Tensor(e!)? zeros_out) -> ()",
               *(_rope_cache(m.fused_qk_rope_reshape_and_cache) for m in (t_fusions, n_fusions))),
        _same("fused_qk_cat", "(Tensor q1, Tensor q2, Tensor k1, Tensor k2) -> (Tensor, Tensor)", t_fusions,
              n_fusions),
        _same("fused_qk_rope_cat", "(Tensor q_nope, Tensor q_pe, Tensor k_nope, Tensor k_pe, Tensor pos, Tensor cos, "
              "Tensor sin, bool is_neox) -> (Tensor, Tensor)", t_fusions, n_fusions),
        _same("cat_and_cache_mla", "(Tensor k_nope, Tensor k_pe, Tensor(a!) kv_cache, Tensor slot_mapping, "
              "Tensor? k_scale, bool apply_scale=True) -> ()", t_fusions, n_fusions),
    ]
    return s + _rope_specs()


def _fresh(result, args):
    """``result`` as the op returns it: nothing, or tensors that are not arguments (an
    argument handed back is copied)."""
    outs = result if isinstance(result, tuple) else (result,)
    ids = {id(a) for a in args if isinstance(a, torch.Tensor)}
    outs = tuple(o.clone() if id(o) in ids else o for o in outs)
    return outs if isinstance(result, tuple) else outs[0]


def _binder(spec: OpSpec):
    """Every schema argument in order, the caller's or its default: the dispatcher leaves
    out trailing arguments that equal their defaults."""
    arguments = torch._C.parse_schema(f"aiter_lite::{spec.schema}").arguments
    names = [a.name for a in arguments]
    defaults = [a.default_value if a.has_default_value() else None for a in arguments]

    def bind(args, kwargs):
        return (*args, *(kwargs.get(n, d) for n, d in zip(names[len(args):], defaults[len(args):])))
    return bind


def _register(spec: OpSpec) -> None:
    bind = _binder(spec)

    def impl(*args, **kwargs):
        args = bind(args, kwargs)
        result = spec.triton(*args)
        return None if spec.returns_nothing else _fresh(result, args)

    def fake(*args, **kwargs):
        if spec.returns_nothing:
            return None
        args = bind(args, kwargs)
        return _fresh(spec.native(*args), args)

    op = torch.library.custom_op(f"aiter_lite::{spec.name}", impl, mutates_args=spec.mutates,
                                 schema="(" + spec.schema.split("(", 1)[1])
    op.register_fake(fake)


OPS: dict[str, OpSpec] = {spec.name: spec for spec in _specs()}
for _spec in OPS.values():
    _register(_spec)
del _spec
