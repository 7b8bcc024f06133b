"""fused_qk_rope_cosine_cache_llama (aiter_lite.ops.triton.fusions): RoPE + a per-sequence
KV cache (token t writes row t at offset slot_mapping[t]), against the project's RoPE op
(q_out bit for bit) and the fp32 reference (aiter_lite.ops.native.fusions.fused_kv_cache).

The caches start as random finite bytes: every entry the tokens do not address keeps its
bits, every addressed one holds the reference's value; q_out starts as NaN.
"""

from __future__ import annotations

import pytest
import torch

from aiter_lite.ops.native import fusions as native
from aiter_lite.ops.triton import fusions
from aiter_lite.ops.triton.quant import supported_quant_dtypes
from op_tests.triton_tests.fusions.test_fused_kv_cache import _indices, _rope_2c, _sentinel, _tables
from op_tests.utils import DEVICE, ON_GPU, assert_close, by_device
from op_tests.utils.fusions import FP8, assert_bits, tol

SUPPORTED = supported_quant_dtypes(DEVICE)


def _caches(rows, bs, kh, d, dtype, flash, x=None):
    if flash:
        return _sentinel((rows, bs, kh, d), dtype), _sentinel((rows, bs, kh, d), dtype)
    x = x or max(1, 16 // dtype.itemsize)
    return _sentinel((rows, kh, d // x, bs, x), dtype), _sentinel((rows, kh, d, bs), dtype)


def _check(t, qh, kh, d, *, bs=16, flash=True, dtype=torch.bfloat16, cache_dtype=None, scales=False, is_neox=True,
           offsets=False, n_slots=None, rows=None, inplace=False, width=0):
    cache_dtype = cache_dtype or dtype
    q, k, v = (torch.randn(t, h, d, device=DEVICE).to(dtype) for h in (qh, kh, kh))
    cos, sin = _tables(width or d // 2)
    pos, offs = _indices(t, torch.int64, offsets)
    slots = torch.randint(0, bs, (t if n_slots is None else n_slots,), device=DEVICE)
    kc, vc = _caches(rows or t + 1, bs, kh, d, cache_dtype, flash)
    want_kc, want_vc = kc.clone(), vc.clone()
    scale = (torch.tensor([0.75], device=DEVICE), torch.tensor([1.5], device=DEVICE)) if scales else (None, None)
    q_in, k_in, v_in = q.clone(), k.clone(), v.clone()
    q_out = q if inplace else None
    got = fusions.fused_qk_rope_cosine_cache_llama(q, k, v, kc, vc, slots, pos, cos, sin, *scale, is_neox, flash,
                                                   True, offs, q_out)
    ref = native.fused_qk_rope_cosine_cache_llama(q_in, k_in, v_in, want_kc, want_vc, slots, pos, cos, sin, *scale,
                                                  is_neox, flash, True, offs)
    assert len(got) == 3 and got[1] is kc and got[2] is vc
    if inplace:
        assert got[0] is q
    want_q, _ = _rope_2c(q_in, k_in, cos, sin, pos, offs, is_neox)
    assert_bits("q_out vs the RoPE op", got[0], want_q)
    assert_close(got[0], ref[0], name="q_out vs reference", **tol(dtype))
    for name, c, w in (("key_cache", kc, want_kc), ("value_cache", vc, want_vc)):
        if cache_dtype in FP8:
            step = 2.0 ** -(3 if torch.finfo(cache_dtype).max < 1000 else 2)
            floor = 4 * torch.finfo(dtype).eps * float(w.float().abs().max())
            diff = (c.float() - w.float()).abs()
            assert (diff <= step * w.float().abs() * 1.01 + floor).all(), f"{name}: off by {float(diff.max())}"
        else:
            assert_close(c, w, name=name, **tol(max(cache_dtype, dtype, key=lambda x: torch.finfo(x).eps)))
    assert_bits("k (the input)", k, k_in)
    assert_bits("v (the input)", v, v_in)
    return got


SHAPES = by_device(
    [(0, 4, 2, 64, True), (1, 8, 1, 128, False), (7, 4, 4, 64, False), (5, 8, 2, 96, True)],
    [(t, qh, kh, d, nx) for t in (0, 1, 7, 64, 512) for qh, kh in ((8, 8), (32, 8), (16, 1))
     for d in (64, 96, 128) for nx in (True, False)],
)


@pytest.mark.parametrize("t,qh,kh,d,is_neox", SHAPES)
@pytest.mark.parametrize("flash", [True, False])
def test_shapes(t, qh, kh, d, is_neox, flash):
    _check(t, qh, kh, d, is_neox=is_neox, flash=flash)


@pytest.mark.parametrize("cache_dtype", [torch.float16, torch.float32, *FP8])
@pytest.mark.parametrize("scales", [False, True])
def test_cache_dtypes(cache_dtype, scales):
    if cache_dtype in FP8 and cache_dtype not in SUPPORTED:
        pytest.skip(f"{cache_dtype} cannot be stored on this device")
    _check(6, 4, 2, 64, cache_dtype=cache_dtype, scales=scales)
    _check(3, 4, 2, 64, cache_dtype=cache_dtype, scales=scales, flash=False)


def test_in_place_offsets_partial_rotary():
    _check(5, 4, 2, 64, inplace=True, offsets=True, width=16)


def test_padding():
    """A slot_mapping shorter than the tokens, and negative slots: no cache entry for those
    tokens, every token's q rotated (aiter leaves the last tokens' last heads unwritten)."""
    _check(8, 4, 2, 64, n_slots=5)
    got = _check(8, 4, 2, 64, n_slots=0, rows=2)
    assert not got[0].isnan().any()


def test_slot_past_the_row():
    """A slot at or past block_size: a ValueError where slot_mapping is on the host; unchecked
    on a GPU it writes nothing."""
    q, k, v = (torch.randn(3, 2, 64, device=DEVICE).to(torch.bfloat16) for _ in range(3))
    cos, sin = _tables(32)
    kc, vc = _caches(3, 16, 2, 64, torch.bfloat16, True)
    before = kc.clone()
    slots = torch.tensor([0, 16, 3], device=DEVICE)
    pos = torch.arange(3, device=DEVICE)
    if not ON_GPU:
        with pytest.raises(ValueError, match="slot_mapping"):
            fusions.fused_qk_rope_cosine_cache_llama(q, k, v, kc, vc, slots, pos, cos, sin, None, None, True, True)
        return
    fusions.fused_qk_rope_cosine_cache_llama(q, k, v, kc, vc, slots, pos, cos, sin, None, None, True, True)
    assert_bits("row 1 (its slot past the row)", kc[1], before[1])


def _bad_calls():
    def r(*s, dtype=torch.bfloat16):
        return torch.randn(*s, device=DEVICE).to(dtype)

    return [
        (ValueError, r"\bk\b", {"k": r(4, 3, 64)}),
        (ValueError, r"\bv\b", {"v": r(4, 1, 64)}),
        (TypeError, r"\bv\b", {"v": r(4, 2, 64, dtype=torch.float16)}),
        (ValueError, "key_cache", {"key_cache": r(5, 16, 2, 32), "value_cache": r(5, 16, 2, 32)}),
        (ValueError, "value_cache", {"value_cache": r(5, 8, 2, 64)}),
        (ValueError, "slot_mapping", {"slot_mapping": torch.arange(5, device=DEVICE)}),
        (ValueError, "slot_mapping", {"key_cache": r(3, 16, 2, 64), "value_cache": r(3, 16, 2, 64)}),  # rows < T
        (TypeError, "slot_mapping", {"slot_mapping": torch.arange(4, device=DEVICE).float()}),
        (ValueError, "pos", {"pos": torch.arange(3, device=DEVICE)}),
        (ValueError, "cos", {"cos": r(64, 40, dtype=torch.float32), "sin": r(64, 40, dtype=torch.float32)}),
        (TypeError, "k_scale", {"k_scale": 0.5}),
        (ValueError, "q_out", {"q_out": r(4, 4, 32)}),
        (TypeError, "flash_layout", {"flash_layout": "yes"}),
    ]


@pytest.mark.parametrize("case", range(len(_bad_calls())))
def test_bad_arguments(case, monkeypatch):
    exc, name, change = _bad_calls()[case]
    monkeypatch.setenv("AITER_ROPE_CHECK_POSITIONS", "1")
    cos, sin = _tables(32)
    a = dict(q=torch.randn(4, 4, 64, device=DEVICE).to(torch.bfloat16),
             k=torch.randn(4, 2, 64, device=DEVICE).to(torch.bfloat16),
             v=torch.randn(4, 2, 64, device=DEVICE).to(torch.bfloat16),
             key_cache=_sentinel((5, 16, 2, 64), torch.bfloat16), value_cache=_sentinel((5, 16, 2, 64), torch.bfloat16),
             slot_mapping=torch.arange(4, device=DEVICE), pos=torch.arange(4, device=DEVICE), cos=cos, sin=sin,
             k_scale=None, v_scale=None, is_neox=True, flash_layout=True)
    a.update(change)
    with pytest.raises(exc, match=name):
        fusions.fused_qk_rope_cosine_cache_llama(**a)
