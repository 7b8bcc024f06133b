"""fused_qk_cat and fused_qk_rope_cat (aiter_lite.ops.triton.fusions): MLA's q / k assembly
from a no-rope part and a rope part, k's rope part one head shared by every head.

fused_qk_cat equals torch.cat bit for bit (the rope part of one head broadcast); with a
second dtype, the reference's rounding to q1's dtype. fused_qk_rope_cat's nope channels
keep their bits and its pe channels equal the project's RoPE op
(rope_cached_thd_positions_2c_fwd) on q_pe / k_pe bit for bit, and the fp32 reference
(aiter_lite.ops.native.fusions.fused_qk_concat) within one rounding. Every tensor the ops
allocate starts as NaN, so an element they do not write fails.
"""

from __future__ import annotations

import pytest
import torch

from aiter_lite.ops.native.fusions import fused_qk_concat as native
from aiter_lite.ops.triton import fusions
from aiter_lite.ops.triton.rope import rope as tr
from op_tests.utils import DEVICE, DTYPES, ON_GPU, assert_close, by_device
from op_tests.utils.fusions import assert_bits, tol
from op_tests.utils.rope import angles

ROWS = 64  # cos / sin rows; positions below ROWS


def _rounded(x: torch.Tensor, dtype: torch.dtype):
    """(x rounded to ``dtype`` to nearest even, the other value allowed): Triton's interpreter
    converts to bf16 by truncation, so on the CPU a bf16 value may also be the truncated one."""
    want = x.to(dtype)
    if ON_GPU or dtype != torch.bfloat16 or x.dtype == dtype:
        return want, None
    return want, (x.float().view(torch.int32) & -65536).view(torch.float32).to(dtype)


def _parts(b, qh, kh, d1, d2, k2_heads, dtype, dtype2=None, strided=False):
    """q1 [b, qh, d1], q2 [b, qh, d2], k1 [b, kh, d1], k2 [b, k2_heads, d2]. strided: q1 / q2
    halves of one q [b, qh, d1 + d2]; k1 a view into a wider kv; k2 columns of MLA's kv_a
    output row [b, k2_heads * d2 + padding]."""
    dtype2 = dtype2 or dtype

    def r(*s, dt=dtype):
        return torch.randn(*s, device=DEVICE).to(dt)

    if not strided:
        return r(b, qh, d1), r(b, qh, d2, dt=dtype2), r(b, kh, d1), r(b, k2_heads, d2, dt=dtype2)
    q = r(b, qh, d1 + d2)
    kv = r(b, kh, d1 + 40)
    kva = r(b, 512 + k2_heads * d2 + 8, dt=dtype2)
    return q[..., :d1], q[..., d1:].to(dtype2), kv[..., 3:3 + d1], kva[:, 512:512 + k2_heads * d2].view(b, k2_heads, d2)


# (tokens, q heads, k heads, D1, D2, k2 heads): MLA prefill (k's rope part one head),
# latent decode 512 + 64, k2 with every head, odd widths
CAT_SHAPES = by_device(
    [(0, 4, 4, 128, 64, 1), (1, 4, 1, 512, 64, 1), (7, 4, 4, 128, 64, 1), (5, 2, 2, 32, 16, 2), (7, 3, 3, 7, 5, 1),
     (3, 2, 2, 100, 28, 2), (512, 1, 1, 32, 16, 1)],
    [(b, qh, kh, d1, d2, k2) for b in (0, 1, 7, 512, 4096) for qh, kh, d1, d2, k2 in
     ((128, 128, 128, 64, 1), (16, 16, 128, 64, 1), (128, 1, 512, 64, 1), (16, 16, 128, 64, 16), (3, 3, 7, 5, 1),
      (8, 8, 100, 28, 8))] + [(4096, 128, 128, 128, 64, 1)],
)


@pytest.mark.parametrize("strided", by_device([None], [False, True]))
@pytest.mark.parametrize("b,qh,kh,d1,d2,k2_heads", CAT_SHAPES)
def test_qk_cat(b, qh, kh, d1, d2, k2_heads, strided):
    if strided is None:
        strided = CAT_SHAPES.index((b, qh, kh, d1, d2, k2_heads)) % 2 == 1
    q1, q2, k1, k2 = _parts(b, qh, kh, d1, d2, k2_heads, torch.bfloat16, strided=strided)
    before = [x.clone() for x in (q1, q2, k1, k2)]
    q, k = fusions.fused_qk_cat(q1, q2, k1, k2)
    assert_bits("q", q, torch.cat([q1, q2], -1))
    assert_bits("k", k, torch.cat([k1, k2.expand(b, kh, d2)], -1))
    ref = native.fused_qk_cat(q1, q2, k1, k2)
    assert_bits("q vs reference", q, ref[0])
    assert_bits("k vs reference", k, ref[1])
    for name, x, y in zip(("q1", "q2", "k1", "k2"), (q1, q2, k1, k2), before):
        assert_bits(f"{name} (an input)", x, y)


@pytest.mark.parametrize("dtype,dtype2", by_device(
    [(torch.float16, torch.float32), (torch.bfloat16, torch.float32), (torch.float32, torch.bfloat16),
     (torch.float16, torch.float16)],
    [(a, b) for a in DTYPES for b in DTYPES]), ids=str)
def test_qk_cat_dtypes(dtype, dtype2):
    """q2 / k2 of another dtype: rounded to q1's dtype (the output's)."""
    b, qh, kh, d1, d2 = by_device((5, 2, 2, 64, 32), (1000, 16, 16, 128, 64))
    q1, q2, k1, k2 = _parts(b, qh, kh, d1, d2, 1, dtype, dtype2)
    q, k = fusions.fused_qk_cat(q1, q2, k1, k2)
    assert q.dtype == dtype and k.dtype == dtype
    assert_bits("q nope", q[..., :d1], q1)
    assert_bits("k nope", k[..., :d1], k1)
    assert_bits("q pe", q[..., d1:], *_rounded(q2, dtype))
    assert_bits("k pe", k[..., d1:], *_rounded(k2.expand(b, kh, d2), dtype))


def _tables(width, dtype=torch.float32):
    a = angles(ROWS, width)
    return torch.cos(a).to(dtype), torch.sin(a).to(dtype)


def _check_rope_cat(b, qh, kh, d1, dr, k_pe_heads, width, is_neox, dtype=torch.bfloat16, pe_dtype=None,
                    strided=False, index_dtype=torch.int64, table_dtype=torch.float32):
    pe_dtype = pe_dtype or dtype
    q_nope, q_pe, k_nope, k_pe = _parts(b, qh, kh, d1, dr, k_pe_heads, dtype, pe_dtype, strided=strided)
    cos, sin = _tables(width, table_dtype)
    pos = torch.randint(0, ROWS, (b,), device=DEVICE, dtype=index_dtype)
    before = [x.clone() for x in (q_nope, q_pe, k_nope, k_pe)]

    q, k = fusions.fused_qk_rope_cat(q_nope, q_pe, k_nope, k_pe, pos, cos, sin, is_neox)

    assert q.shape == (b, qh, d1 + dr) and k.shape == (b, kh, d1 + dr) and q.dtype == k.dtype == dtype
    rq, rk = tr.rope_cached_thd_positions_2c_fwd(q_pe, k_pe, cos, sin, pos, 0 if is_neox else 1, width != dr, False)
    assert_bits("q nope", q[..., :d1], q_nope)
    assert_bits("k nope", k[..., :d1], k_nope)
    assert_bits("q pe vs rope op", q[..., d1:], *_rounded(rq, dtype))
    assert_bits("k pe vs rope op", k[..., d1:], *_rounded(rk.expand(b, kh, dr), dtype))
    ref = native.fused_qk_rope_cat(q_nope, q_pe, k_nope, k_pe, pos, cos, sin, is_neox)
    t = tol(max(dtype, pe_dtype, key=lambda d: torch.finfo(d).eps))  # the coarser rounding
    assert_close(q, ref[0], name="q vs reference", **t)
    assert_close(k, ref[1], name="k vs reference", **t)
    for name, x, y in zip(("q_nope", "q_pe", "k_nope", "k_pe"), (q_nope, q_pe, k_nope, k_pe), before):
        assert_bits(f"{name} (an input)", x, y)


# (tokens, q heads, k heads, D1, Dr, k_pe heads, table width, is_neox): DeepSeek's 128 + 64
# with the half table reused or a full one, latent 512 + 64, a partial rotary part
ROPE_SHAPES = by_device(
    [(0, 4, 4, 128, 64, 1, 32, True), (1, 4, 1, 512, 64, 1, 32, False), (7, 4, 4, 128, 64, 1, 64, True),
     (3, 2, 2, 32, 16, 2, 8, False), (3, 4, 4, 48, 64, 1, 16, True), (512, 1, 1, 32, 16, 1, 8, True)],
    [(b, qh, kh, d1, dr, kp, w, nx) for b in (0, 1, 7, 512, 4096) for qh, kh, d1, dr, kp, w in
     ((128, 128, 128, 64, 1, 32), (16, 16, 128, 64, 1, 64), (128, 1, 512, 64, 1, 32), (16, 16, 128, 64, 16, 32),
      (8, 8, 48, 64, 1, 16), (3, 3, 100, 28, 3, 14)) for nx in (True, False)],
)


@pytest.mark.parametrize("b,qh,kh,d1,dr,k_pe_heads,width,is_neox", ROPE_SHAPES)
def test_qk_rope_cat(b, qh, kh, d1, dr, k_pe_heads, width, is_neox):
    _check_rope_cat(b, qh, kh, d1, dr, k_pe_heads, width, is_neox, strided=b % 2 == 1,
                    index_dtype=torch.int32 if b % 2 else torch.int64)


@pytest.mark.parametrize("dtype,pe_dtype", by_device(
    [(torch.float16, torch.float16), (torch.float32, torch.float32), (torch.bfloat16, torch.float32)],
    [(a, b) for a in DTYPES for b in DTYPES]), ids=str)
def test_qk_rope_cat_dtypes(dtype, pe_dtype):
    """The pe parts rotated in fp32, rounded to their own dtype, then to q_nope's (the output's)."""
    b = by_device(3, 1000)
    _check_rope_cat(b, 4, 4, 128, 64, 1, 32, dtype != torch.float16, dtype=dtype, pe_dtype=pe_dtype,
                    table_dtype=torch.bfloat16 if dtype == torch.float32 else torch.float32)


@pytest.mark.eager_host_checks
def test_positions_out_of_range_raise(monkeypatch):
    if ON_GPU:
        monkeypatch.setenv("AITER_ROPE_CHECK_POSITIONS", "1")
    q_nope, q_pe, k_nope, k_pe = _parts(3, 2, 2, 32, 16, 1, torch.bfloat16)
    cos, sin = _tables(8)
    with pytest.raises(ValueError, match="pos"):
        fusions.fused_qk_rope_cat(q_nope, q_pe, k_nope, k_pe, torch.tensor([0, ROWS, 2], device=DEVICE), cos, sin,
                                  True)


def _bad_cat_calls():
    def t(*s, dtype=torch.bfloat16):
        return torch.randn(*s, device=DEVICE).to(dtype)

    return [
        (ValueError, "q2", {"q2": t(3, 3, 16)}),  # heads differ from q1's
        (ValueError, "q2", {"q2": t(2, 2, 16)}),  # tokens differ
        (ValueError, "k2", {"k2": t(3, 3, 16)}),  # neither 1 head nor k1's 2
        (ValueError, "k2", {"k2": t(2, 1, 16)}),
        (ValueError, "k1", {"k1": t(3, 2, 24)}),  # D1 differs from q1's
        (ValueError, "k2", {"k2": t(3, 1, 8)}),   # D2 differs from q2's
        (ValueError, "q1", {"q1": t(3, 64)}),     # 2-D
        (TypeError, "q1", {"q1": t(3, 2, 32, dtype=torch.int32)}),
        (TypeError, "k2", {"k2": [1.0]}),
    ]


@pytest.mark.parametrize("case", range(len(_bad_cat_calls())))
def test_qk_cat_bad_arguments(case):
    exc, name, change = _bad_cat_calls()[case]
    q1, q2, k1, k2 = _parts(3, 2, 2, 32, 16, 1, torch.bfloat16)
    a = {"q1": q1, "q2": q2, "k1": k1, "k2": k2}
    a.update(change)
    with pytest.raises(exc, match=name):
        fusions.fused_qk_cat(**a)


def _bad_rope_cat_calls():
    def t(*s, dtype=torch.bfloat16):
        return torch.randn(*s, device=DEVICE).to(dtype)

    return [
        (ValueError, "q_pe", {"q_pe": t(3, 3, 16)}),
        (ValueError, "k_pe", {"k_pe": t(3, 3, 16)}),
        (ValueError, "k_pe", {"k_pe": t(3, 1, 8)}),  # Dr differs from q_pe's
        (ValueError, "cos", {"cos": t(ROWS, 12, dtype=torch.float32), "sin": t(ROWS, 12, dtype=torch.float32)}),
        (ValueError, "sin", {"sin": t(ROWS, 4, dtype=torch.float32)}),
        (TypeError, "pos", {"pos": torch.arange(3, device=DEVICE).float()}),
        (ValueError, "pos", {"pos": torch.arange(2, device=DEVICE)}),
        (TypeError, "q_nope", {"q_nope": t(3, 2, 32, dtype=torch.int32)}),
        (TypeError, "is_neox", {"is_neox": "yes"}),
    ]


@pytest.mark.parametrize("case", range(len(_bad_rope_cat_calls())))
def test_qk_rope_cat_bad_arguments(case):
    exc, name, change = _bad_rope_cat_calls()[case]
    q_nope, q_pe, k_nope, k_pe = _parts(3, 2, 2, 32, 16, 1, torch.bfloat16)
    cos, sin = _tables(8)
    a = {"q_nope": q_nope, "q_pe": q_pe, "k_nope": k_nope, "k_pe": k_pe, "pos": torch.arange(3, device=DEVICE),
         "cos": cos, "sin": sin, "is_neox": True}
    a.update(change)
    with pytest.raises(exc, match=name):
        fusions.fused_qk_rope_cat(**a)
