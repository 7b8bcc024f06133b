"""Launch plans against the checked path, for every registered op: the same argument
signature with fresh values, replayed from the plan and run through the checks, bit for bit.

Beside fresh tensor values, the variants change the values an op reads on the host: the
index-check switches on (positions, offsets, cu_seqlens, slot_mapping checked against the
table or cache), and RoPE 2-D's image sizes given as one-element tensors whose values
change from call to call (a plan made with (3, 2) must not answer (2, 3)). Such calls
must never be replayed (``aiter_lite.utils.fast_launch``); fresh-value calls must be.

Plans hold compiled GPU kernels: on the CPU (the interpreter) the calls all take the
checked path, and the variants run once each, checking only that their arguments are valid."""

from __future__ import annotations

import contextlib
import inspect

import pytest
import torch

from aiter_lite.utils import fast_launch as fl
from op_tests.utils import DEVICE, ON_GPU
from op_tests.utils.registry import OPS, SIZES, assert_same_bits, clone_args, sample

TRIALS = 4 if ON_GPU else 1
_POSITIONS = {"positions", "pos", "offsets", "offs", "cu_seqlens"}
_SLOTS = {"slot_mapping"}
# Image sizes (height, width) of op_args' 2-D RoPE inputs (6 tokens an image), call after call.
_IMAGE_SIZES = [(3, 2), (2, 3), (6, 1), (1, 6)]
# At these sizes a call makes more than one launch, or a copy, so it has no plan.
_UNPLANNED = {"tiny": {"log_softmax"}}  # over dim 0: a gathered copy first
# At every size: the fused linear + cross-entropy multiplies with torch. Work buffers a call
# allocates and does not return (the losses' per-row results, the MLA matmul + RoPE + cache ops'
# zeros companion of decode_q_pe_out) are allocated anew by each replay: those ops are planned.
_NEVER_PLANNED = {"fused_linear_cross_entropy"}


def _params(name: str) -> list[str]:
    return list(inspect.signature(OPS[name].triton).parameters)


def _variants(name: str) -> list[str]:
    """The variants of an op: fresh values, and each way it reads values on the host."""
    params = set(_params(name))
    out = ["values"] if ON_GPU else []
    if params & _POSITIONS:
        out.append("positions checked")
    if params & _SLOTS:
        out.append("slots checked")
    if "img_height" in params:
        out += ["image size tensors", "image size tensors on the cpu"]
    return out


CASES = [(name, variant, size) for name in sorted(OPS) for variant in _variants(name) for size in SIZES
         if variant == "values" or size == "tiny"]


@contextlib.contextmanager
def _switches(variant: str, monkeypatch):
    if variant == "positions checked":
        monkeypatch.setenv("AITER_ROPE_CHECK_POSITIONS", "1")
    if variant == "slots checked":
        monkeypatch.setenv("AITER_KV_CACHE_CHECK_SLOTS", "1")
    yield


def _arguments(name: str, variant: str, size: str, call: int) -> tuple:
    """Fresh arguments of one signature; image sizes as tensors, different call after call."""
    args = sample(name, SIZES[size])
    if variant.startswith("image size tensors"):
        at = _params(name).index("img_height")
        device = "cpu" if variant.endswith("cpu") else DEVICE
        h, w = _IMAGE_SIZES[call % len(_IMAGE_SIZES)]
        args = (*args[:at], torch.tensor(h, device=device), torch.tensor(w, device=device), *args[at + 2:])
    return args


@pytest.mark.parametrize("name, variant, size", CASES, ids=[f"{n}-{v}-{s}" for n, v, s in CASES])
def test_a_plan_answers_as_the_checked_path(name, variant, size, monkeypatch):
    fn = OPS[name].triton
    with _switches(variant, monkeypatch):
        fl.reset()
        for call in range(fl.RECORD_AT):  # seen, then recorded
            fn(*_arguments(name, variant, size, call))
        planned = fl.plan_count()
        for trial in range(TRIALS):
            args = _arguments(name, variant, size, fl.RECORD_AT + trial)
            ref = clone_args(args)
            got = fn(*args)
            with fl.plans_off():
                want = fn(*ref)
            if ON_GPU:
                torch.cuda.synchronize()
            what = f"{name} ({variant}, {size}), call {fl.RECORD_AT + trial + 1}"
            assert_same_bits(got, want, what)
            assert_same_bits(args, ref, f"{what}: arguments")
    if not ON_GPU:
        return
    if variant == "values":
        expect = int(name not in _UNPLANNED.get(size, ()) and name not in _NEVER_PLANNED)
        assert planned == expect, f"{name} ({size}): {planned} plans, expected {expect}"
    else:  # host-read values: never replayed
        assert planned == 0, f"{name} ({variant}): {planned} plans; a call reading values on the host has none"
    fl.reset()


@pytest.mark.skipif(not ON_GPU, reason="plans hold compiled GPU kernels; the interpreter has none")
def test_a_switch_turned_on_after_a_plan_is_made_checks(monkeypatch):
    # A plan made with the positions check off does not skip the check once it is on: a
    # position past the table raises.
    name = "rope_cached_positions_fwd"
    fn, params = OPS[name].triton, _params(name)
    fl.reset()
    for _ in range(fl.RECORD_AT):
        fn(*sample(name))
    assert fl.plan_count() == 1
    args = list(sample(name))
    args[params.index("positions")][0, 0] = args[params.index("cos")].shape[0]  # one row past the table
    monkeypatch.setenv("AITER_ROPE_CHECK_POSITIONS", "1")
    with pytest.raises(ValueError, match="positions must lie in"):
        fn(*args)


@pytest.mark.skipif(not ON_GPU, reason="plans hold compiled GPU kernels; the interpreter has none")
def test_a_launch_on_tensor_descriptors_is_never_planned():
    """The MLA matmul's TMA tiles (Hopper and later) take tensor descriptors, which hold the
    call's own tensors: a plan would replay them on the first call's. Every call recomputes,
    each on fresh values, and none is planned."""
    from op_tests.triton_tests.fusions.test_fused_bmm_rope_kv_cache import _args, _check

    fl.reset()
    for _ in range(fl.RECORD_AT + 2):  # 200 tokens: one launch, on descriptors where the GPU has TMA
        _check(_args(4, 200, 128, 64, 16, fp8=None), False)
    assert fl.plan_count() == 0
    fl.reset()
