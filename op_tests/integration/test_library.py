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
from aiter_lite.ops.triton.quant import get_fp8_e4m3_dtype
from op_tests.utils.device import DEVICE

FP8 = get_fp8_e4m3_dtype()
# Written quantized tensors are int8 where an op takes int8: opcheck's schema check compares
# a written argument before and after with arithmetic that fp8 tensors do not support.
Q = torch.int8
# Python-side names that are not ops: classes, launch configurations, the autograd functions.
NOT_OPS = {"RotateStyle", "RoPE", "RoPETHD", "RoPECached", "RoPE2D"}
MODULES = ("activation", "normalization.rmsnorm", "normalization.layernorm", "softmax", "topk", "moe_routing",
           "quant.quant", "quant.norm_quant", "quant.act_quant", "rope.rope", "fusions")


def _r(*shape, dtype=torch.float32):
    return torch.randn(*shape, device=DEVICE, dtype=dtype)


def _e(*shape, dtype=torch.float32):
    return torch.empty(*shape, device=DEVICE, dtype=dtype)


def _i(hi, *shape):
    return torch.randint(0, hi, shape, device=DEVICE)


def _tab(rows, f):
    a = torch.rand(rows, f, device=DEVICE) * 6
    return torch.cos(a), torch.sin(a)


def _rope_args(name: str):
    """x (and y), the tables and indices of one RoPE op; style NEOX, tables reused, nope last."""
    tail = (0, True, False, False)
    f = 4  # d = 8, reused
    if name.startswith("rope_fwd_2d") or name == "rope_bwd_2d":
        ch, sh = _tab(3, f)
        cw, sw = _tab(2, f)
        return (_r(2, 6, 2, 16), ch, sh, cw, sw, 3, 2, *tail)
    if name.startswith("rope_thd"):
        return (_r(7, 2, 8), torch.tensor([0, 3, 7], device=DEVICE, dtype=torch.int32), _r(8, 1, 1, f), *tail)
    if name.startswith("rope_cached_thd"):
        cos, sin = _tab(16, f)
        xs = (_r(5, 4, 8), _r(5, 2, 8), cos, sin, _i(8, 5))
        return (*xs, _i(8, 5), *tail) if "offsets" in name else (*xs, *tail)
    if name.startswith("rope_cached"):
        cos, sin = (t.view(16, 1, 1, f) for t in _tab(16, f))
        xs = (_r(6, 2, 3, 8), cos, sin)
        if "positions" in name:
            xs = (*xs, _i(8, 6, 2))
        if "offsets" in name:
            xs = (*xs, _i(8, 6, 2))
        return (*xs, *tail)
    return (_r(6, 2, 3, 8), _r(8, 1, 1, f), *tail)


def _norm_quant_args(name: str):
    m, n = 5, 32
    x, w = _r(m, n), _r(n)
    q, ys = _e(m, n, dtype=Q), _e(m, 1)
    if name == "rmsnorm2d_fwd_with_dynamicquant":
        return (q, x, ys, w, 1e-6)
    if name == "rmsnorm2d_fwd_with_smoothquant":
        return (q, x, _r(n).abs() + 0.5, ys, w, 1e-6)
    if name == "rmsnorm2d_fwd_with_add_dynamicquant":
        return (q, x, _r(m, n), _e(m, n), ys, w, 1e-6)
    if name == "rmsnorm2d_fwd_with_add_smoothquant":
        return (q, x, _r(m, n), _e(m, n), _r(n).abs() + 0.5, ys, w, 1e-6)
    if name == "layernorm2d_fwd_with_dynamicquant":
        return (q, x, ys, w, _r(n), 1e-5)
    if name == "layernorm2d_fwd_with_smoothquant":
        return (q, x, _r(n).abs() + 0.5, ys, w, _r(n), 1e-5)
    if name == "layernorm2d_fwd_with_add_dynamicquant":
        return (q, x, _r(m, n), _e(m, n), ys, w, _r(n), 1e-5)
    if name == "layernorm2d_fwd_with_add_smoothquant":
        return (q, x, _r(m, n), _e(m, n), _r(n).abs() + 0.5, ys, w, _r(n), 1e-5)
    if name == "rms_norm_static_fp8_quant":
        return (q, x, w, torch.tensor([0.05], device=DEVICE), 1e-6)
    if name == "fused_add_rms_norm_static_fp8_quant":
        return (q, x, _r(m, n), w, torch.tensor([0.05], device=DEVICE), 1e-6)
    return (q, x, w, ys, 1e-6, None, _r(m, n))  # rms_norm_dynamic_per_token_quant


def _cache_args():
    t, qh, kh, d, bs = 5, 4, 2, 16, 4
    cos, sin = _tab(16, d // 2)
    q, k, v = _r(t, qh, d), _r(t, kh, d), _r(t, kh, d)
    kc, vc = torch.zeros(3, bs, kh, d, device=DEVICE), torch.zeros(3, bs, kh, d, device=DEVICE)
    slots = torch.tensor([0, 5, 2, -1, 9], device=DEVICE)
    return (q, k, v, kc, vc, slots, _i(16, t), cos, sin, None, None, True, True, False, None, _e(t, qh, d),
            _e(t, kh, d), None)


def sample(name: str) -> tuple:
    """Small valid arguments for the registered op ``name``."""
    x, x2 = _r(5, 24), _r(5, 48)
    if name in ("silu_and_mul", "gelu_and_mul", "gelu_tanh_and_mul"):
        return (_e(5, 24), x2)
    table = {
        "act_and_mul": lambda: (_e(5, 24), x2, "gelu_tanh"),
        "fused_silu_mul": lambda: (x2,),
        "silu": lambda: (x,), "relu": lambda: (x,), "gelu": lambda: (x, "tanh"),
        "rms_norm": lambda: (x, _r(24), 1e-6, 0.0),
        "rmsnorm2d_fwd_with_add": lambda: (_e(5, 24), x, _r(5, 24), _e(5, 24), _r(24), 1e-6, 0.0),
        "fused_add_rms_norm": lambda: (x, _r(5, 24), _r(24), 1e-6, 0.0),
        "layer_norm": lambda: (x, _r(24), _r(24), 1e-5, None, 0.0),
        "layernorm2d_fwd_with_add": lambda: (_e(5, 24), x, _r(5, 24), _e(5, 24), _r(24), _r(24), 1e-5),
        "softmax": lambda: (x, -1), "log_softmax": lambda: (x, 0),
        "topk": lambda: (_r(3, 40), 5, -1, True, True),
        "topk_softmax": lambda: (_r(4, 8), 2, True),
        "grouped_topk": lambda: (_r(4, 16), 4, 4, 2, True, "sigmoid", 2.0),
        "biased_grouped_topk": lambda: (_r(4, 16), _r(16), 4, 4, 2, True, 2.5),
        "moe_routing": lambda: (_r(4, 16), 2, "softmax", True, 4, 2, _r(16), 1.5),
        "static_per_tensor_quant_fp8_i8": lambda: (_e(5, 24, dtype=Q), x, torch.tensor([0.05], device=DEVICE)),
        "dynamic_per_tensor_quant_fp8_i8": lambda: (_e(5, 24, dtype=Q), x, _e(1)),
        "dynamic_per_token_quant_fp8_i8": lambda: (_e(5, 24, dtype=Q), x, _e(5, 1), None),
        "per_token_group_quant": lambda: (_e(5, 24, dtype=Q), x, _e(5, 3), 8, 1e-10),
        "scaled_fp8_quant": lambda: (x, None, None, True, None),
        "per_token_group_quant_fp8": lambda: (x, 8, 1e-10, None, True),
        "per_token_group_quant_int8": lambda: (x, 8, 1e-10, None),
        "act_mul_and_fp8_group_quant": lambda: (_r(5, 32), "silu", 8, None, False),
        "act_mul_and_fp8_quant": lambda: (_r(5, 32), "gelu", torch.tensor([0.05], device=DEVICE), None, None),
        "silu_and_mul_quant": lambda: (_e(5, 24, dtype=Q), x2, torch.tensor([0.05], device=DEVICE)),
        "fused_qkv_split_qk_rope": lambda: (_r(5, (4 + 2 * 2) * 8), *_tab(16, 4), _i(16, 5), 4, 2, 8),
        "fused_qk_rope_reshape_and_cache": _cache_args,
        "fused_qk_cat": lambda: (_r(5, 4, 16), _r(5, 4, 8), _r(5, 1, 16), _r(5, 1, 8)),
        "fused_qk_rope_cat": lambda: (_r(5, 4, 16), _r(5, 4, 8), _r(5, 1, 16), _r(5, 1, 8), _i(16, 5),
                                      *_tab(16, 4), False),
        "cat_and_cache_mla": lambda: (_r(5, 1, 16), _r(5, 1, 8), torch.zeros(12, 1, 24, device=DEVICE),
                                      torch.tensor([3, 0, -1, 11, 7], device=DEVICE), None, True),
    }
    if name in table:
        return table[name]()
    if "quant" in name:
        return _norm_quant_args(name)
    return _rope_args(name)


def _clone(args):
    return tuple(a.clone() if isinstance(a, torch.Tensor) else a for a in args)


def _flat(result):
    return [t for t in (result if isinstance(result, tuple) else (result,)) if isinstance(t, torch.Tensor)]


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


@pytest.mark.parametrize("name", sorted(library.OPS))
def test_opcheck(name):
    opcheck(getattr(torch.ops.aiter_lite, name), sample(name))


@pytest.mark.parametrize("name", sorted(library.OPS))
def test_registered_op_matches_python_function(name):
    """The op writes what the Python function writes and returns its new tensors."""
    spec = library.OPS[name]
    args = sample(name)
    mine, ref = _clone(args), _clone(args)
    got = getattr(torch.ops.aiter_lite, name)(*mine)
    want = spec.triton(*ref)
    if spec.returns_nothing:
        assert got is None
    else:
        for a, b in zip(_flat(got), _flat(want)):
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
