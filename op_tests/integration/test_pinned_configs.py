"""Every family's launcher under torch.compile(fullgraph=True) with a pinned launch config:
the same launcher eager, compiled and pinned calls use (``utils.launcher``), its config
carried into the registered op, giving eager's bits.

A pinned config is what a test or a tuning script passes; each case pins one that the
default choice would not make at this size, so the config demonstrably reaches the launch."""

from __future__ import annotations

import importlib

import pytest
import torch

from aiter_lite.ops.triton import activation, cross_entropy, moe_routing, softmax, topk
from aiter_lite.ops.triton._triton_kernels.rope.rope import RowMode
from aiter_lite.ops.triton.fusions import fused_kv_cache, fused_qk_concat
from aiter_lite.ops.triton.moe import moe_routing_sigmoid_top1_fused as sigmoid_top1
from aiter_lite.ops.triton.normalization import norm
from aiter_lite.ops.triton.quant import act_quant, fused_fp8_quant, mx_quant, norm_quant, quant
from aiter_lite.ops.triton.quant.quant import QuantLaunchConfig
from aiter_lite.ops.triton.rope import rope
from aiter_lite.ops.triton.rope.rope import RopeLaunchConfig
from aiter_lite.utils.launcher import LAUNCHERS
from op_tests.utils import DEVICE, ON_GPU
from op_tests.utils.registry import assert_same_bits, clone_args

# (the fusions package's attribute of this name is the op)
qkv_split = importlib.import_module("aiter_lite.ops.triton.fusions.fused_qkv_split_qk_rope")
mul_add = importlib.import_module("aiter_lite.ops.triton.fusions.fused_mul_add")
routing = importlib.import_module("aiter_lite.ops.triton.fusions.fused_routing_from_topk")
qk_norm = importlib.import_module("aiter_lite.ops.triton.fusions.fused_qkv_split_qk_norm_rope_cache")
swa_write = importlib.import_module("aiter_lite.ops.triton.fusions.fused_reduce_qk_norm_rope_swa_write")
rope_3d = importlib.import_module("aiter_lite.ops.triton.rope.rope_3d")
bmm = importlib.import_module("aiter_lite.ops.triton.fusions.fused_bmm_rope_kv_cache")
BACKEND = "inductor" if ON_GPU else "aot_eager"
FAMILIES = ["activation", "activation backward", "activation, gate and up apart",
            "activation backward, gate and up apart", "normalization", "normalization backward", "softmax",
            "softmax backward", "cross entropy", "cross entropy reduced", "cross entropy backward",
            "cross entropy in place", "cross entropy scale", "topk", "moe routing", "moe routing sigmoid top1",
            "quant", "quant static",
            "quant dynamic per tensor", "quant group", "act + quant", "norm + quant", "fused rms + quant",
            "fused gated rms + quant", "mx quant", "rope",
            "rope in place", "fusions", "fusions q/k concat", "fusions MLA cache", "fusions KV cache",
            "fusions MLA rope cat cache", "fusions mul add", "fusions routing from top-k",
            "fusions QK-norm rope cache", "fusions reduce QK-norm rope SWA write", "rope 3-D",
            "activation, vLLM's forms", "quant int8 with zero point", "fusions KV cache write",
            "fusions KV cache convert", "fusions MLA bmm"]
F8 = torch.float8_e4m3fn if ON_GPU else torch.int8


def _r(*shape, dtype=torch.float32):
    return torch.randn(*shape, device=DEVICE, dtype=dtype)


def _e(*shape, dtype=torch.float32):
    return torch.full(shape, float("nan"), device=DEVICE).to(dtype) if dtype.is_floating_point else \
        torch.full(shape, -1, device=DEVICE, dtype=dtype)


def _tables(rows: int, f: int):
    a = torch.rand(rows, f, device=DEVICE) * 6
    return torch.cos(a), torch.sin(a)


def _ce_targets(rows: int, n: int) -> torch.Tensor:
    t = torch.randint(0, n, (rows,), device=DEVICE)
    t[1] = -100
    return t


def _cases():
    """(family, launcher call taking (args..., config), args, config)."""
    t, n = 7, 96
    x2, gated = _r(t, n), _r(t, 2 * n)
    cos, sin = _tables(16, 8)
    pos = torch.randint(0, 16, (t,), device=DEVICE)
    cases = {
        "activation": (activation._launch_act_and_mul, (gated, _e(t, n), "silu", True),
                       activation.ActLaunchConfig(2, 32, 1)),
        "activation backward": (activation._launch_act_and_mul_bwd, (gated, _r(t, n), _e(t, 2 * n), "gelu_tanh", True),
                                activation.ActLaunchConfig(2, 32, 1)),
        "activation, gate and up apart": (activation._launch_act_mul, (_r(t, n), x2, _e(t, n), "gelu"),
                                          activation.ActLaunchConfig(2, 32, 1)),
        "activation backward, gate and up apart": (activation._launch_act_mul_bwd,
                                                   (_r(t, n), x2, _r(t, n), _e(t, n), _e(t, n), "silu"),
                                                   activation.ActLaunchConfig(2, 32, 1)),
        "normalization": (norm._launch_norm_fwd,
                          (x2, _e(t, n), _r(n), None, 1e-6, True, None, None, None, 0.0, None, None),
                          norm.NormLaunchConfig(1, 32, 1, True, PREFETCH=True)),
        "normalization backward": (norm._launch_norm_bwd,
                                   (_r(t, n), x2, _r(n), None, torch.rand(t, device=DEVICE) + 0.5, _e(t, n),
                                    _e(n), None, True, 0.0),
                                   norm.NormBwdLaunchConfig(norm.NormLaunchConfig(2, 32, 1, True), 3)),
        "softmax": (softmax._launch_softmax, (x2, _e(t, n), True), softmax.SoftmaxLaunchConfig(1, 32, 1, True)),
        "softmax backward": (softmax._launch_softmax_bwd, (x2, _r(t, n), _e(t, n), True),
                             softmax.SoftmaxLaunchConfig(1, 32, 1, True)),
        "cross entropy": (cross_entropy._launch_cross_entropy, (x2, _ce_targets(t, n), _e(t), _e(t), -100, 0.1, 5.0),
                          cross_entropy.CrossEntropyLaunchConfig(32, 1)),
        "cross entropy reduced": (cross_entropy._launch_cross_entropy_reduced,
                                  (x2, _ce_targets(t, n), _e(t), _e(t + 1), _e(dtype=torch.bfloat16), -100, 0.1, 5.0,
                                   True),
                                  cross_entropy.CrossEntropyLaunchConfig(32, 1)),
        "cross entropy backward": (cross_entropy._launch_cross_entropy_bwd,
                                   (x2, _ce_targets(t, n), torch.cat([torch.logsumexp(x2, 1), torch.full(
                                       (1,), 5.0, device=DEVICE)]), torch.rand(t, device=DEVICE), _e(t, n), -100, 0.0,
                                    0.0, True),
                                   cross_entropy.CrossEntropyLaunchConfig(32, 1)),
        "cross entropy in place": (cross_entropy._launch_cross_entropy_inplace,
                                   (_r(t, n), _ce_targets(t, n), _e(t), _e(t), torch.rand(1, device=DEVICE), -100,
                                    0.0, 0.0, True),
                                   cross_entropy.CrossEntropyLaunchConfig(32, 1)),
        "cross entropy scale": (cross_entropy._launch_scale, (_r(t, n), torch.rand(1, device=DEVICE) + 2),
                                cross_entropy.CrossEntropyLaunchConfig(64, 1)),
        "topk": (topk._launch_topk, (x2, _e(t, 3), _e(t, 3, dtype=torch.int64), 3, 1, True),
                 topk.TopkLaunchConfig(2, 128, 4, True, 2)),
        "moe routing": (moe_routing._launch_moe_routing,
                        (_r(t, 66), _r(64), _e(t, 6), _e(t, 4, dtype=torch.int32), _e(t, 4, dtype=torch.int32), 8,
                         2, True, True, 2.5, 2, False),
                        moe_routing.MoeRoutingLaunchConfig(4, 1)),
        "moe routing sigmoid top1": (sigmoid_top1._launch_routing_sigmoid_top1,
                                     (_r(t, 40), _r(40, 12), _e(t, 2, dtype=torch.int32), _e(t, 2), True),
                                     sigmoid_top1.RoutingSigmoidTop1LaunchConfig(32, 16, 1, 1)),
        "quant": (quant._launch_per_token_quant, (x2, _e(t, n, dtype=F8), _e(t), None),
                  QuantLaunchConfig(1, 32, 1, LOOPED=True)),
        "quant static": (quant._launch_static_quant, (x2, _e(t, n, dtype=F8), torch.full((1,), 0.05, device=DEVICE)),
                         QuantLaunchConfig(2, 32, 1)),
        "quant dynamic per tensor": (quant._launch_dynamic_per_tensor, (x2, _e(t, n, dtype=F8), _e(1)),
                                     QuantLaunchConfig(1, 32, 1)),
        "quant group": (quant._launch_group_quant, (x2, _e(t, n, dtype=F8), _e(t, 3), 32, 1e-10),
                        QuantLaunchConfig(2, 32, 1)),
        "act + quant": (act_quant._launch_act_quant,
                        (gated, _e(t, n, dtype=F8), _e(t, 3), None, "gelu", "group", 32, True),
                        QuantLaunchConfig(1, 32, 1)),
        "norm + quant": (norm_quant._launch_norm_quant,
                         (x2, _e(t, n, dtype=F8), _e(t), None, None, None, _r(n), None, None, None, None, 1e-6, 0.0,
                          True, True),
                         norm_quant.NormQuantLaunchConfig(1, 32, 1, LOOPED=True)),
        "fused rms + quant": (fused_fp8_quant._launch_fused_rms_quant,
                              (x2, _r(n), _r(t, n), _e(t, n), _e(t, n), _e(t, n, dtype=F8), _e(t, 3), _r(t, 40),
                               _r(40), _e(t, 40), 1e-6, 1e-5, 32, False, None, None, ""),
                              fused_fp8_quant.FusedRmsQuantLaunchConfig(2)),
        "fused gated rms + quant": (fused_fp8_quant._launch_fused_rms_gated_quant,
                                    (_r(t, 64), _r(t, 64), _r(64), _r(64), _e(t, 64, dtype=F8), _e(t, 2), 32, 1e-6,
                                     -100.0, 100.0, 1e-4, "silu", True, True),
                                    fused_fp8_quant.GatedRmsQuantLaunchConfig(2, 1)),
        "mx quant": (mx_quant._launch_mx_quant,  # RMSNorm, residual, second input, shuffled MXFP4 scales
                     (x2, torch.zeros(t, n // 2, device=DEVICE, dtype=torch.uint8),
                      torch.zeros(256, 8, device=DEVICE, dtype=torch.uint8), "rms", "mxfp4", n, "even", "", True,
                      256, 8, _r(n), _r(t, n), _e(t, n), _e(t, n), _r(t, 40), _r(40), _e(t, 40), None, 1e-6, 1e-5),
                     mx_quant.MxQuantLaunchConfig(2, 256, 1)),
        "rope": (rope._launch_rope,
                 (_r(t, 4, 16), _e(t, 4, 16), None, None, cos, sin, None, None, pos, None, None,
                  [int(RowMode.POSITIONS), 8, 16, 16, cos.stride(0), cos.stride(1), cos.stride(0), cos.stride(1), 1,
                   1], [False, True, True, False, False]),
                 RopeLaunchConfig(1, 2, 1)),
        "rope in place": (rope._launch_rope_inplace,
                          (_r(t, 4, 16), None, cos, sin, None, None, pos, None, None,
                           [int(RowMode.POSITIONS), 8, 16, 16, cos.stride(0), cos.stride(1), cos.stride(0),
                            cos.stride(1), 1, 1], [False, False, True, False, False]),
                          RopeLaunchConfig(2, 1, 1)),
        "fusions": (qkv_split._launch_qkv_split_rope,
                    (_r(t, 8 * 16), _e(t, 4, 16), _e(t, 2, 16), _e(t, 2, 16), cos, sin, pos, None,
                     [16, cos.stride(0), cos.stride(1), 8], [True, True, False]),
                    RopeLaunchConfig(2, 1, 1)),
        "fusions q/k concat": (fused_qk_concat._launch_qk_cat,
                               (_r(t, 4, 24), _r(t, 4, 8), _r(t, 1, 24), _r(t, 1, 8), _e(t, 4, 32), _e(t, 1, 32),
                                None, None, None, [1, 0, 0, 0], [True, False]),
                               RopeLaunchConfig(1, 1, 1)),
        "fusions MLA cache": (fused_kv_cache._launch_cat_and_cache_mla,
                              (_r(t, 1, 24), _r(t, 1, 8), _e(12, 1, 32), torch.randperm(12, device=DEVICE)[:t],
                               None, [12, 1, 32, 0, 32, 1]),
                              RopeLaunchConfig(1, 1, 1)),
        "fusions KV cache": (fused_kv_cache._launch_rope_cache,
                             (_r(t, 4, 16), _r(t, 2, 16), _r(t, 2, 16), _e(t, 4, 16), _e(t, 2, 16), None,
                              _e(3, 4, 2, 16), _e(3, 4, 2, 16), torch.randperm(12, device=DEVICE)[:t], pos, None,
                              cos, sin, None, None, [16, cos.stride(0), cos.stride(1), 8, 12, 4, 1],
                              [True, True, True]),
                             RopeLaunchConfig(2, 1, 1)),
        "fusions MLA rope cat cache": (fused_kv_cache._launch_qk_rope_cat_and_cache_mla,
                                       (_r(t, 4, 24), _r(t, 4, 8), _r(t + 1, 1, 24), _r(t + 1, 1, 8), _e(t, 4, 32),
                                        _e(16, 1, 32), torch.randperm(16, device=DEVICE)[:t + 1], pos, cos, sin,
                                        None, _e(1, 4, 8), _e(t + 1, 1, 8), _e(1, 4, 24),
                                        [16, cos.stride(0), cos.stride(1), 4, 16, 1, 32, 0, 32, 1, 0, 1],
                                        [True, True, False]),
                                       RopeLaunchConfig(2, 2, 1)),
        "fusions mul add": (mul_add._launch_mul_add, (_r(t, 40), _r(t, 40), None, _e(t, 40), 0.0, 0.5),
                            mul_add.MulAddLaunchConfig(64, 1)),
        "fusions routing from top-k": (routing._launch_routing,
                                       (torch.randint(0, 8, (t, 2), device=DEVICE, dtype=torch.int32), _r(t, 2),
                                        None, torch.empty(8, device=DEVICE, dtype=torch.int32),
                                        torch.empty(2 * t, device=DEVICE, dtype=torch.int32),
                                        torch.empty(2 * t, device=DEVICE, dtype=torch.int32), _e(2 * t)),
                                       routing.RoutingLaunchConfig(2)),
        "fusions QK-norm rope cache": (qk_norm._launch_qkv_norm_rope_cache,
                                       (_r(t, 12 * 16), _r(16), _r(16), _e(t, 4, 16), _e(t, 4, 16), _e(t, 2, 16),
                                        _e(t, 2, 16), _e(3, 4, 2, 16), _e(3, 4, 2, 16),
                                        torch.randperm(12, device=DEVICE)[:t], pos, None, cos, sin, None, None,
                                        [16, cos.stride(0), cos.stride(1), 8, 32, 16, 12, 4,
                                         *[128, 32, 16, 1] * 2], 1e-6, [True, True]),
                                       RopeLaunchConfig(2, 2, 1)),
        "fusions reduce QK-norm rope SWA write": (swa_write._launch_reduce_qk_norm_rope_swa,
                                                  (_r(2, t, 3 * 16), _e(t, 3, 16), _r(t, 16), _r(16), None, pos,
                                                   cos, sin, torch.arange(t, device=DEVICE),
                                                   # a sequence (window) a token: two tokens on one entry race
                                                   torch.arange(t, device=DEVICE), torch.arange(t, device=DEVICE),
                                                   _e(t, 8, 16),
                                                   [16, cos.stride(0), cos.stride(1), 8, 8], [1e-6, 1e-6], [True]),
                                                  RopeLaunchConfig(2, 2, 1)),
        "rope 3-D": (rope_3d._launch_rope_3d,
                     (_r(1, t, 2, 16), _r(8, 8, 2), torch.tensor([[1, 1, t]], device=DEVICE), _e(1, t, 2, 16),
                      0),
                     RopeLaunchConfig(2, 1, 1)),
        "activation, vLLM's forms": (activation._launch_act_ex,
                                     (_r(t, 2 * n), None, _e(t, n), "swish", True, 1.702, 7.0, True, True, False),
                                     activation.ActLaunchConfig(2, 32, 1)),
        "quant int8 with zero point": (quant._launch_int8_azp_quant,
                                       (x2, _e(t, n, dtype=torch.int8), _e(t), _e(t, dtype=torch.int32), True),
                                       QuantLaunchConfig(1, 32, 1, LOOPED=True)),
        "fusions KV cache write": (fused_kv_cache._launch_kv_cache_write,
                                   (_r(t, 2, 16), _r(t, 2, 16), _e(3, 4, 2, 16), _e(3, 4, 2, 16),
                                    torch.randperm(12, device=DEVICE)[:t], None, None, [12, 4, 1], True),
                                   RopeLaunchConfig(2, 1, 1)),
        "fusions KV cache convert": (fused_kv_cache._launch_cache_convert, (_e(3, 64, dtype=F8), _r(3, 64), 0.5),
                                     fused_kv_cache.ConvertLaunchConfig(32, 1)),
        "fusions MLA bmm": (bmm._launch_mla_bmm_rope_cat_cache,
                            (_r(4, t, 40), (_r(4, 24, 40) * 0.1).to(F8), _r(1), _r(t, 4, 8), _r(t + 1, 1, 24),
                             _r(t + 1, 1, 8), _e(t, 4, 32), _e(16, 1, 32), torch.randperm(16, device=DEVICE)[:t + 1],
                             pos, cos, sin, None, _e(1, 4, 8), _e(t + 1, 1, 8), _e(1, 4, 24),
                             [16, cos.stride(0), cos.stride(1), 4, 16, 1, 32, 0, 32, 1, 0, 1], [True, True, False],
                             16, True),
                            bmm.BmmLaunchConfig(16, 16, 1)),
    }
    return cases


def test_every_launcher_is_covered():
    launchers = {getattr(case[0], "op", None) for case in _cases().values()}
    missing = sorted(name for name, fn in LAUNCHERS.items() if fn.op not in launchers)
    assert list(_cases()) == FAMILIES and not missing, f"launchers without a pinned-config case: {missing}"


@pytest.mark.parametrize("family", FAMILIES)
def test_a_pinned_launch_compiles_whole(family):
    launch, args, config = _cases()[family]
    eager, mine = clone_args(args), clone_args(args)
    launch(*eager, config)
    torch._dynamo.reset()
    torch.compile(lambda *a: launch(*a, config), backend=BACKEND, fullgraph=True, dynamic=False)(*mine)
    assert_same_bits(mine, eager, f"{family}: compiled with config {config}")
    written = [a for a, b in zip(eager, args) if isinstance(a, torch.Tensor) and not torch.equal(
        a.view(torch.uint8) if a.element_size() == 1 else a, b.view(torch.uint8) if b.element_size() == 1 else b)]
    assert written, f"{family}: the pinned launch wrote nothing"


@pytest.mark.parametrize("name", ["act_and_mul", "topk", "dynamic_per_tensor_quant_fp8_i8",
                                  "dynamic_per_token_quant_fp8_i8", "act_mul_and_fp8_group_quant",
                                  "act_mul_and_fp8_quant"])
def test_a_public_op_with_a_pinned_config_compiles_whole(name):
    # The public ops that take config= (tests, tuning) compile with it, as without.
    x, gated = _r(7, 96), _r(7, 192)
    cfg = QuantLaunchConfig(1, 32, 1, LOOPED=True)
    calls = {
        "act_and_mul": (lambda o, c: activation.act_and_mul(o, gated, "gelu", c), (_e(7, 96),),
                        activation.ActLaunchConfig(1, 64, 1)),
        "topk": (lambda c: topk.topk(x, 5, config=c), (), topk.TopkLaunchConfig(1, 128, 8, False, 2)),
        "dynamic_per_tensor_quant_fp8_i8": (
            lambda q, s, c: quant.dynamic_per_tensor_quant_fp8_i8(q, x, s, config=c), (_e(7, 96, dtype=F8), _e(1)),
            QuantLaunchConfig(1, 0, 1, LOOPED=True)),
        "dynamic_per_token_quant_fp8_i8": (
            lambda q, s, c: quant.dynamic_per_token_quant_fp8_i8(q, x, s, config=c), (_e(7, 96, dtype=F8), _e(7)),
            cfg),
        "act_mul_and_fp8_group_quant": (
            lambda c: act_quant.act_mul_and_fp8_group_quant(gated, "silu", 32, F8, config=c), (),
            QuantLaunchConfig(1, 32, 1)),
        "act_mul_and_fp8_quant": (lambda c: act_quant.act_mul_and_fp8_quant(gated, "silu", None, F8, config=c), (),
                                  cfg),
    }
    call, outs, config = calls[name]
    eager, mine = clone_args(outs), clone_args(outs)
    want = call(*eager, config)
    torch._dynamo.reset()
    got = torch.compile(lambda *a: call(*a, config), backend=BACKEND, fullgraph=True, dynamic=False)(*mine)
    assert_same_bits(got, want, f"{name} compiled with config {config}")
    assert_same_bits(mine, eager, f"{name} compiled with config {config}: written arguments")
