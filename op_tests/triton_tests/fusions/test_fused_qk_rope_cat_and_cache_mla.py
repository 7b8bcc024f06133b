"""aiter's fused_qk_rope_cat_and_cache_mla (aiter_lite.ops.triton.fusions) against the fp32
reference: q_out (bf16 / fp16 / fp8), the cache (flat, paged, aiter's preshuffled; bf16 / fp8;
scaled or not), decode_q_pe_out and the zeros of the first N tokens, k_pe_out; decode-only
batches and mixed ones (slot_mapping longer than q: the prefill tokens written unrotated),
negative slots, shared and per-head keys, NEOX and GPT-J pairs, half and full tables,
upcast_operand. The cache starts as random bytes: exactly the addressed slots change. Values
within one rounding of the output dtype (fp8: one step); bad arguments raise naming the op
and the argument."""

from __future__ import annotations

import pytest
import torch

from aiter_lite.ops.native.fusions import fused_qk_rope_cat_and_cache_mla as native_op
from aiter_lite.ops.triton.fusions import fused_qk_rope_cat_and_cache_mla
from aiter_lite.ops.triton.quant import supported_quant_dtypes
from op_tests.triton_tests.quant.test_quant import _assert_codes
from op_tests.utils import DEVICE, assert_close, by_device
from op_tests.utils.fusions import bits

SUPPORTED = supported_quant_dtypes(DEVICE)
E4M3 = torch.float8_e4m3fn if torch.float8_e4m3fn in SUPPORTED else torch.float8_e4m3fnuz
# (B decode tokens, BK k tokens, slot_mapping length, QH, KH, D1, D2)
SHAPES = by_device(cpu=[(3, 3, 3, 4, 1, 32, 16), (2, 5, 5, 4, 1, 32, 16), (1, 4, 3, 2, 2, 16, 16),
                        (0, 3, 3, 4, 1, 32, 16)],
                   gpu=[(3, 3, 3, 4, 1, 32, 16), (2, 5, 5, 4, 1, 32, 16), (1, 4, 3, 2, 2, 16, 16),
                        (0, 3, 3, 4, 1, 32, 16), (64, 64, 64, 128, 1, 512, 64), (16, 300, 300, 16, 1, 512, 64)])
ROWS = 64


def _case(b, bk, ns, qh, kh, d1, d2, dtype=torch.bfloat16, full_table=False):
    g = torch.Generator(device="cpu").manual_seed(b * 131 + bk)
    r = lambda *s: torch.randn(*s, generator=g).to(dtype).to(DEVICE)  # noqa: E731
    w = d2 if full_table else d2 // 2
    cos, sin = torch.randn(ROWS, w, generator=g).to(DEVICE), torch.randn(ROWS, w, generator=g).to(DEVICE)
    pos = torch.randint(0, ROWS, (b,), generator=g).to(DEVICE)
    return r(b, qh, d1), r(b, qh, d2), r(bk, kh, d1), r(bk, kh, d2), pos, cos, sin


def _cache(layout, n_slots, kh, d, dtype):
    shape = {"flat": (n_slots, kh, d), "paged": (n_slots // 16, 16, kh, d),
             "shuffled": (n_slots // 16, kh, 16, d)}[layout]
    t = torch.randint(-100, 100, shape, device=DEVICE).to(torch.float32).mul_(0.25).to(dtype)
    return t


def _compare(name, got, want):
    if got.dtype.is_floating_point and got.element_size() == 1:
        _assert_codes(got, want, name)
    else:
        assert_close(got, want, name=name)


@pytest.mark.parametrize("cache_dtype", [torch.bfloat16, "fp8"], ids=str)
@pytest.mark.parametrize("layout", ["flat", "paged", "shuffled"])
@pytest.mark.parametrize("case", SHAPES, ids=str)
def test_against_the_reference(case, layout, cache_dtype):
    b, bk, ns, qh, kh, d1, d2 = case
    cdt = E4M3 if cache_dtype == "fp8" else cache_dtype
    qn, qp, kn, kp, pos, cos, sin = _case(*case)
    slots = torch.randperm(64, device=DEVICE)[:ns]
    if ns > 1:
        slots[1] = -1  # a token that writes nothing
    cache = _cache(layout, 64, kh, d1 + d2, cdt)
    ref_cache = cache.clone()
    k_scale = torch.tensor([0.5], device=DEVICE)
    nz = min(b, 2)
    kw = dict(num_decode_toks_for_zeros=nz, q_out_dtype=cdt if cache_dtype == "fp8" else None,
              shuffled_kv_cache=layout == "shuffled")
    got = fused_qk_rope_cat_and_cache_mla(qn, qp, kn, kp, cache, slots, pos, cos, sin, k_scale, True, **kw)
    want = native_op(qn, qp, kn, kp, ref_cache, slots, pos, cos, sin, k_scale, True, **kw)
    for name, g, w in zip(("q_out", "decode_q_pe_out", "k_pe_out", "zeros"), got, want):
        assert g.shape == w.shape and g.dtype == w.dtype, f"{name}: {tuple(g.shape)} {g.dtype}"
        if name == "k_pe_out":
            g, w = g[:ns], w[:ns]
        _compare(name, g, w)
    changed = bits(cache) != bits(ref_cache)
    if cdt.itemsize == 1:
        _assert_codes(cache, ref_cache, "cache")
    else:
        assert_close(cache, ref_cache, name="cache")
    assert changed.float().mean() < 1.0 or ns == 0


@pytest.mark.parametrize("is_neox", [True, False])
@pytest.mark.parametrize("full_table", [False, True])
@pytest.mark.parametrize("upcast", [False, True])
def test_pairs_tables_and_upcast(is_neox, full_table, upcast):
    case = (3, 4, 4, 4, 1, 32, 16)
    qn, qp, kn, kp, pos, cos, sin = _case(*case, full_table=full_table)
    slots = torch.tensor([5, 9, 1, 30], device=DEVICE)
    cache, ref_cache = _cache("flat", 64, 1, 48, torch.bfloat16), None
    ref_cache = cache.clone()
    got = fused_qk_rope_cat_and_cache_mla(qn, qp, kn, kp, cache, slots, pos, cos, sin, None, is_neox, 3,
                                          upcast_operand=upcast)
    want = native_op(qn, qp, kn, kp, ref_cache, slots, pos, cos, sin, None, is_neox, 3, upcast_operand=upcast)
    for name, g, w in zip(("q_out", "decode_q_pe_out", "k_pe_out", "zeros"), got, want):
        assert_close(g, w, name=name)
    assert_close(cache, ref_cache, name="cache")
    untouched = torch.ones(64, dtype=torch.bool, device=DEVICE)
    untouched[slots] = False
    assert torch.equal(bits(cache[untouched]), bits(ref_cache[untouched]))


def test_into_callers_buffers_and_unscaled():
    qn, qp, kn, kp, pos, cos, sin = _case(2, 2, 2, 4, 1, 32, 16)
    slots = torch.tensor([3, 4], device=DEVICE)
    cache = _cache("flat", 16, 1, 48, torch.bfloat16)
    ref = cache.clone()
    q_out = torch.empty(2, 4, 48, dtype=torch.float16, device=DEVICE)
    dq = torch.empty(1, 4, 16, dtype=torch.bfloat16, device=DEVICE)
    kpo = torch.empty(2, 1, 16, dtype=torch.bfloat16, device=DEVICE)
    got = fused_qk_rope_cat_and_cache_mla(qn, qp, kn, kp, cache, slots, pos, cos, sin, torch.tensor([4.0],
                                          device=DEVICE), False, 1, False, q_out, dq, kpo)
    assert got[0] is q_out and got[1] is dq and got[2] is kpo
    want = native_op(qn, qp, kn, kp, ref, slots, pos, cos, sin, torch.tensor([4.0], device=DEVICE), False, 1,
                     False, torch.empty_like(q_out))
    assert_close(q_out, want[0], dtype=torch.bfloat16, name="q_out")  # (its rope part rounded to bf16 first)
    assert_close(cache, ref, name="cache (apply_scale=False)")


@pytest.mark.parametrize("i", range(7))
def test_bad_arguments_raise(i):
    qn, qp, kn, kp, pos, cos, sin = _case(2, 2, 2, 4, 1, 32, 16)
    slots = torch.tensor([3, 4], device=DEVICE)
    cache = _cache("flat", 16, 1, 48, torch.bfloat16)
    f = fused_qk_rope_cat_and_cache_mla
    calls = [
        (lambda: f(qn, qp[:, :, :8], kn, kp, cache, slots, pos, cos, sin, None, True), "k_pe|q_pe"),
        (lambda: f(qn, qp, kn[:1], kp[:1], cache, slots[:1], pos, cos, sin, None, True), "q_nope"),
        (lambda: f(qn, qp, kn, kp, cache[:, :, :40], slots, pos, cos, sin, None, True), "kv_cache"),
        (lambda: f(qn, qp, kn, kp, cache, slots[:1], pos, cos, sin, None, True), "slot_mapping"),
        (lambda: f(qn, qp, kn, kp, cache, slots, pos, cos, sin, None, True, 3), "num_decode_toks_for_zeros"),
        (lambda: f(qn, qp, kn.float(), kp, cache, slots, pos, cos, sin, None, True), "k_nope"),
        (lambda: f(qn, qp, kn, kp, cache, slots, pos, cos, sin, None, True, shuffled_kv_cache=True), "kv_cache"),
    ]
    call, name = calls[i]
    with pytest.raises((TypeError, ValueError), match=f"fused_qk_rope_cat_and_cache_mla: ({name})"):
        call()
