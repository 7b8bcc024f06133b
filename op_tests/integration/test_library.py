"""Every public op registered as ``torch.ops.aiter_lite.<name>``: ``torch.library.opcheck``
(schema, fake kernel, autograd registration, AOT dispatch) passes for each, the registered
op gives the Python function's result, and every public function of the Triton backend
has its registered op."""

from __future__ import annotations

import importlib

import pytest
import torch
from torch.library import opcheck

import aiter_lite.library as library
from op_tests.utils import ON_GPU, registry
from op_tests.utils.registry import clone_args, tensors

# Python-side names that are not ops: classes, launch configurations, the autograd functions.
NOT_OPS = {"RotateStyle", "RoPE", "RoPETHD", "RoPECached", "RoPE2D", "get_fp8_min_max_bounds",
           "fused_add_rmsnorm_pad",  # aiter's dispatcher over rmsnorm_pad / add_rmsnorm_pad (a tensor or a pair)
           # sampling's draws take a torch.Generator, which no op schema types (torch.library's infer_schema)
           "sampling_from_probs", "sampling_from_logits", "top_p_sampling_from_probs", "top_k_sampling_from_probs",
           "min_p_sampling_from_probs", "top_k_top_p_sampling_from_logits", "top_k_top_p_sampling_from_probs"}
MODULES = ("activation", "normalization.rmsnorm", "normalization.layernorm", "softmax", "cross_entropy", "topk",
           "normalization.fused_add_rmsnorm_pad", "moe.moe_routing_sigmoid_top1_fused",
           "moe_routing", "quant.quant", "quant.norm_quant", "quant.act_quant", "quant.fused_fp8_quant",
           "quant.mx_quant", "rope.rope", "fusions", "sampling")


def sample(name: str) -> tuple:
    """Small valid arguments for the registered op ``name``: fp32 in, int8 quantized out
    (opcheck compares written arguments with arithmetic fp8 lacks)."""
    return registry.sample(name, gpu_dtypes=False)


def test_every_public_op_is_registered():
    missing = []
    for mod_name in MODULES:
        mod = importlib.import_module(f"aiter_lite.ops.triton.{mod_name}")
        for name in mod.__all__:
            if name in NOT_OPS or name.endswith(("launch_config", "LaunchConfig")):
                continue
            if not hasattr(torch.ops.aiter_lite, name):
                missing.append(f"{mod_name}.{name}")
    assert not missing, f"public ops with no torch.ops.aiter_lite registration: {missing}"
    assert set(library.OPS) <= {n for n in dir(torch.ops.aiter_lite)}


# opcheck's AOT-dispatch check traces each op twice through aot_autograd: most of this
# file's time on the CPU, where one op of each family carries it; a GPU checks every op.
_CPU_AOT = {"silu_and_mul", "rms_norm", "fused_add_rms_norm", "log_softmax", "cross_entropy", "topk",
            "moe_biased_grouped_topk",
            "dynamic_per_token_quant_fp8_i8", "rmsnorm2d_fwd_with_add_dynamicquant", "act_mul_and_fp8_group_quant",
            "rope_cached_positions_fwd_inplace", "rope_thd_fwd", "fused_qkv_split_qk_rope",
            "fused_qk_rope_reshape_and_cache", "cat_and_cache_mla", "fused_routing_from_topk"}
_CHECKS = ("test_schema", "test_autograd_registration", "test_faketensor", "test_aot_dispatch_dynamic")
# Ops that take or write fp8 tensors: torch's schema check compares each input before and after the call
# with torch.allclose, which has no fp8 kernel; the other checks run.
_FP8_INPUTS = {"fused_fp8_bmm_rope_cat_and_cache_mla", "convert_kv_cache"}


@pytest.mark.parametrize("name", sorted(library.OPS))
def test_opcheck(name):
    checks = _CHECKS if ON_GPU or name in _CPU_AOT else _CHECKS[:3]
    if name in _FP8_INPUTS:
        checks = tuple(c for c in checks if c != "test_schema")
    opcheck(getattr(torch.ops.aiter_lite, name), sample(name), test_utils=checks)


@pytest.mark.parametrize("name", sorted(library.OPS))
def test_registered_op_matches_python_function(name):
    """The op writes what the Python function writes and returns its new tensors."""
    spec = library.OPS[name]
    args = sample(name)
    mine, ref = clone_args(args), clone_args(args)
    got = getattr(torch.ops.aiter_lite, name)(*mine)
    want = spec.triton(*ref)
    if spec.returns_nothing:
        assert got is None
    else:
        for a, b in zip(tensors(got), tensors(want)):
            assert a.dtype == b.dtype and a.shape == b.shape
            assert torch.equal(a.view(torch.uint8) if a.dtype.itemsize == 1 else a,
                               b.view(torch.uint8) if b.dtype.itemsize == 1 else b)
    for name_, a, b in zip(range(len(args)), mine, ref):
        if isinstance(a, torch.Tensor) and a.dtype.is_floating_point and a.dtype.itemsize > 1:
            assert torch.equal(torch.nan_to_num(a, 7.0), torch.nan_to_num(b, 7.0)), f"argument {name_} differs"


def test_mutation_declared():
    """In-place and out-parameter ops declare what they write; allocating ops write nothing."""
    ops = library.OPS
    assert ops["fused_add_rms_norm"].mutates == ("input", "residual")
    assert ops["silu_and_mul"].mutates == ("out",)
    assert ops["rope_cached_thd_positions_2c_fwd_inplace"].mutates == ("x", "y")
    assert ops["fused_qk_rope_reshape_and_cache"].mutates == ("key_cache", "value_cache", "q_out", "k_out",
                                                              "zeros_out")
    assert ops["rms_norm"].mutates == () and ops["topk"].mutates == ()
