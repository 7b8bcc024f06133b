"""aiter_lite.vllm.ops' launch plans against their checked path: every op, called as vLLM
calls it, replayed from its plan with fresh values of the same signature, bit for bit (the
returned tensors and every written argument).

A vLLM-form op takes the same plans as the aiter-form op it wraps (``utils.fast_launch``):
a serving loop's repeated call skips the checks and the launcher's argument binding. The
GPU run also asserts which calls are planned: one launch and nothing but allocations. On
the CPU (the interpreter) every call takes the checked path."""

from __future__ import annotations

import pytest
import torch

from aiter_lite.ops.triton.quant import supported_quant_dtypes
from aiter_lite.spec.quant import get_fp8_e4m3_dtype
from aiter_lite.utils import fast_launch as fl
from aiter_lite.vllm import ops
from op_tests.utils import DEVICE, ON_GPU
from op_tests.utils.fusions import sentinel
from op_tests.utils.registry import assert_same_bits, clone_args

TRIALS = 3 if ON_GPU else 1
BF16 = torch.bfloat16
E4M3 = get_fp8_e4m3_dtype(DEVICE)
INT8 = torch.int8 if torch.int8 in supported_quant_dtypes(DEVICE) else None


def _x(*shape, dtype=BF16):
    return torch.randn(*shape, device=DEVICE, dtype=dtype)


def _f32(value: float) -> torch.Tensor:
    return torch.tensor(value, dtype=torch.float32, device=DEVICE)


def _slots(t: int, n: int) -> torch.Tensor:
    s = torch.randperm(n)[:t]
    s[::3] = -1  # padded tokens
    return s.to(DEVICE)


def _cos_sin(rows: int, rot: int) -> torch.Tensor:
    f = torch.rand(rows, rot // 2, device=DEVICE) * 6.3
    return torch.cat((f.cos(), f.sin()), -1).to(BF16)


def _gated(name, *extra):
    return lambda: (torch.full((5, 48), float("nan"), device=DEVICE, dtype=BF16), _x(5, 96), *extra)


def _plain(name):
    return lambda: (torch.full((5, 48), float("nan"), device=DEVICE, dtype=BF16), _x(5, 48))


def _flash(kv_cache_dtype):
    def make():
        qkv = _x(7, 3, 2, 32)
        cache_dtype = BF16 if kv_cache_dtype == "auto" else E4M3
        kc, vc = (sentinel((4, 4, 2, 32), cache_dtype, DEVICE) for _ in range(2))
        if kv_cache_dtype != "auto":
            kc, vc = kc.view(torch.uint8), vc.view(torch.uint8)
        return qkv[:, 1], qkv[:, 2], kc, vc, _slots(7, 16), kv_cache_dtype, _f32(0.11), _f32(0.07)
    return make


def _paged():
    qkv = _x(7, 3, 2, 32)
    kc, vc = sentinel((4, 2, 4, 4, 8), BF16, DEVICE), sentinel((4, 2, 32, 4), BF16, DEVICE)
    return qkv[:, 1], qkv[:, 2], kc, vc, _slots(7, 16), "auto", _f32(1.0), _f32(1.0)


def _mla():
    kv = sentinel((3, 4, 80), E4M3, DEVICE).view(torch.uint8)
    return _x(6, 64), _x(6, 16), kv, _slots(6, 12), "fp8", _f32(0.05)


def _route(n_experts=16, k=4, *extra):
    def make():
        w = torch.full((9, k), float("nan"), device=DEVICE)
        ids = torch.full((9, k), -7, device=DEVICE, dtype=torch.int32)
        return (w, ids, torch.full_like(ids, -7), _x(9, n_experts), True, *extra)
    return make


# (case, op, arguments of one signature, fresh values each call, planned on a GPU)
CASES = [
    *((n, n, _gated(n), True) for n in ("silu_and_mul", "mul_and_silu", "gelu_and_mul", "gelu_tanh_and_mul",
                                         "swigluoai_and_mul")),
    ("fatrelu_and_mul", "fatrelu_and_mul", _gated("fatrelu_and_mul", 0.2), True),
    *((n, n, _plain(n), True) for n in ("gelu_new", "gelu_fast", "gelu_quick")),
    ("reshape_and_cache_flash", "reshape_and_cache_flash", _flash("auto"), True),
    ("reshape_and_cache_flash fp8", "reshape_and_cache_flash", _flash("fp8"), True),
    ("reshape_and_cache", "reshape_and_cache", _paged, True),
    ("concat_and_cache_mla fp8", "concat_and_cache_mla", _mla, True),
    ("convert_fp8", "convert_fp8",
     lambda: (torch.empty(3, 4, 64, device=DEVICE, dtype=BF16), sentinel((3, 4, 64), E4M3, DEVICE).view(torch.uint8),
              0.5, "fp8"), True),
    ("rms_norm", "rms_norm", lambda: (torch.empty(5, 64, device=DEVICE, dtype=BF16), _x(5, 64), _x(64), 1e-6), True),
    ("fused_add_rms_norm", "fused_add_rms_norm", lambda: (_x(5, 64), _x(5, 64), _x(64), 1e-6), True),
    ("rotary_embedding", "rotary_embedding",
     lambda: (torch.randint(0, 32, (5,), device=DEVICE), _x(5, 4 * 32), _x(5, 2 * 32), 32, _cos_sin(32, 32), True),
     True),
    ("rotary_embedding partial gptj", "rotary_embedding",
     lambda: (torch.randint(0, 32, (2, 3), device=DEVICE), _x(2, 3, 4, 32), None, 32, _cos_sin(32, 16), False, 8),
     True),
    ("topk_softmax", "topk_softmax", _route(), True),
    ("topk_sigmoid", "topk_sigmoid", _route(16, 4, _x(16, dtype=torch.float32)), True),
    ("grouped_topk", "grouped_topk",
     lambda: (_x(9, 64, dtype=torch.float32), 8, 4, 6, True, 2.5, _x(64, dtype=torch.float32), 1), True),
    ("scaled_fp8_quant static", "scaled_fp8_quant", lambda: (_x(5, 64), _f32(0.02)), True),
    ("scaled_fp8_quant per token", "scaled_fp8_quant", lambda: (_x(5, 64), None, None, None, True), True),
    ("scaled_fp8_quant per tensor", "scaled_fp8_quant", lambda: (_x(5, 64),), True),
    ("per_token_group_quant_fp8", "per_token_group_quant_fp8", lambda: (_x(5, 256), 128), True),
    ("per_token_group_quant_fp8 column major", "per_token_group_quant_fp8",
     lambda: (_x(5, 256), 128, 1e-10, None, True), True),
    ("rms_norm_dynamic_per_token_quant", "rms_norm_dynamic_per_token_quant",
     lambda: (_x(5, 64), _x(64), 1e-6, E4M3), True),
    ("rms_norm_per_block_quant", "rms_norm_per_block_quant",
     lambda: (_x(5, 256), _x(256), 1e-6, E4M3, [1, 128]), True),
    ("silu_and_mul_per_block_quant", "silu_and_mul_per_block_quant", lambda: (_x(5, 512), 128, E4M3), True),
]
if INT8 is not None:
    CASES += [
        ("scaled_int8_quant static", "scaled_int8_quant", lambda: (_x(5, 64), _f32(0.02)), True),
        ("scaled_int8_quant dynamic", "scaled_int8_quant", lambda: (_x(5, 64),), True),
        ("scaled_int8_quant dynamic azp", "scaled_int8_quant", lambda: (_x(5, 64), None, None, False), True),
        ("scaled_int8_quant static azp", "scaled_int8_quant",
         lambda: (_x(5, 64), _f32(0.02), torch.tensor([3], device=DEVICE, dtype=torch.int32), False), True),
    ]


def test_every_op_has_a_case():
    assert {op for _, op, _, _ in CASES} | ({"scaled_int8_quant"} if INT8 is None else set()) == set(ops.__all__)


@pytest.mark.parametrize("op, make, planned", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_a_plan_answers_as_the_checked_path(op, make, planned):
    fn = getattr(ops, op)
    fl.reset()
    for _ in range(fl.RECORD_AT):  # seen, then recorded
        fn(*make())
    held = len([p for p in fn.plans.entries.values() if callable(p)])
    for trial in range(TRIALS):
        args = make()
        ref = clone_args(args)
        got = fn(*args)
        with fl.plans_off():
            want = fn(*ref)
        what = f"{op}, call {fl.RECORD_AT + trial + 1}"
        assert_same_bits(got, want, what)
        assert_same_bits(args, ref, f"{what}: arguments")
    fl.reset()
    if ON_GPU:
        assert held == int(planned), f"{op}: {held} plans, expected {int(planned)}"
