"""fused_qkv_split_qk_rope (aiter_lite.ops.triton.fusions) against the project's own RoPE op
and the fp32 reference (aiter_lite.ops.native.fusions.fused_qkv_split_qk_rope).

q and k equal rope_cached_thd_positions(_offsets)_2c_fwd on the q / k column views of qkv
bit for bit (any even rotary width, nope_first, reuse or not), and the reference within one
rounding; v is qkv's v part bit for bit; qkv is left alone. Every tensor the op allocates
starts as NaN, so an element it does not write fails.
"""

from __future__ import annotations

import pytest
import torch

from aiter_lite.ops.native import fusions as native
from aiter_lite.ops.triton import fusions
from aiter_lite.ops.triton.rope import rope as tr
from op_tests.utils import DEVICE, DTYPES, ON_GPU, assert_close, by_device
from op_tests.utils.fusions import assert_bits, tol
from op_tests.utils.rope import angles

ROWS = 64  # cos / sin rows; positions and offsets each below ROWS / 2


def _qkv(t, qh, kvh, d, dtype, pad=0, lead=0):
    """qkv (t, (qh + 2 kvh) d); ``pad`` extra columns per row (a row stride past the width),
    ``lead`` columns before it (a column view that does not start a row)."""
    w = (qh + 2 * kvh) * d
    big = torch.randn(t, lead + w + pad, device=DEVICE).to(dtype)
    return big[:, lead:lead + w]


def _check(qkv, qh, kvh, d, *, width=0, is_neox=True, reuse=True, nope_first=False, offsets=False,
           index_dtype=torch.int64, table_dtype=torch.float32, table_layout="2d"):
    """One call against the RoPE op and the reference: shapes, bits, q / k / v, qkv untouched."""
    t = qkv.shape[0]
    width = width or (d // 2 if reuse else d)
    a = angles(ROWS, width)
    cos, sin = torch.cos(a).to(table_dtype), torch.sin(a).to(table_dtype)
    if table_layout == "4d":  # aiter's (rows, 1, 1, F)
        cos, sin = cos[:, None, None, :], sin[:, None, None, :]
    pos = torch.randint(0, ROWS // 2, (t,), device=DEVICE, dtype=index_dtype)
    offs = torch.randint(0, ROWS // 2, (t,), device=DEVICE, dtype=index_dtype) if offsets else None
    before = qkv.clone()

    q, k, v = fusions.fused_qkv_split_qk_rope(qkv, cos, sin, pos, qh, kvh, d, is_neox, offs, reuse, nope_first)

    for name, x, h in (("q", q, qh), ("k", k, kvh), ("v", v, kvh)):
        assert x.shape == (t, h, d) and x.dtype == qkv.dtype and x.is_contiguous(), \
            f"{name}: {tuple(x.shape)} {x.dtype} contiguous={x.is_contiguous()}"
    qv = qkv[:, : qh * d].view(t, qh, d)
    kv = qkv[:, qh * d: (qh + kvh) * d].view(t, kvh, d)
    style = 0 if is_neox else 1
    if offs is None:
        want_q, want_k = tr.rope_cached_thd_positions_2c_fwd(qv, kv, cos, sin, pos, style, reuse, nope_first)
    else:
        want_q, want_k = tr.rope_cached_thd_positions_offsets_2c_fwd(qv, kv, cos, sin, pos, offs, style, reuse,
                                                                      nope_first)
    assert_bits("q vs rope op", q, want_q)
    assert_bits("k vs rope op", k, want_k)
    assert_bits("v", v, qkv[:, (qh + kvh) * d:].view(t, kvh, d))
    ref = native.fused_qkv_split_qk_rope(qkv, cos, sin, pos, qh, kvh, d, is_neox, offs, reuse, nope_first)
    assert_close(q, ref[0], name="q vs reference", **tol(qkv.dtype))
    assert_close(k, ref[1], name="k vs reference", **tol(qkv.dtype))
    assert_bits("qkv (the input)", qkv, before)
    return q, k, v


# (tokens, q heads, kv heads, head dim, is_neox): GQA ratios 1 to 16, decode and prefill,
# head dims 64, 128 and ones that are not powers of 2; on the CPU a cross-section
SHAPES = by_device(
    [(0, 4, 1, 64, True), (1, 8, 1, 128, False), (7, 4, 4, 64, False), (3, 8, 4, 128, True),
     (3, 16, 4, 96, False), (2, 16, 2, 80, True), (3, 16, 1, 64, True), (512, 2, 1, 64, False)],
    [(t, qh, kvh, d, nx) for t in (0, 1, 7, 512, 4096)
     for qh, kvh in ((1, 1), (8, 8), (16, 8), (32, 8), (16, 4), (64, 8), (16, 1))
     for d in (64, 80, 96, 128, 256) for nx in (True, False)],
)


@pytest.mark.parametrize("t,qh,kvh,d,is_neox", SHAPES)
def test_shapes(t, qh, kvh, d, is_neox):
    _check(_qkv(t, qh, kvh, d, torch.bfloat16), qh, kvh, d, is_neox=is_neox, offsets=t % 2 == 1,
           index_dtype=torch.int32 if qh % 3 == 1 else torch.int64)


# (head dim, table width, reuse_freqs_front_part): a full rotation from a half table or a
# full one, a quarter and a half rotary part, widths that are not powers of 2
WIDTHS = by_device(
    [(64, 32, True), (64, 64, False), (128, 16, True), (80, 20, False), (96, 24, True)],
    [(64, 32, True), (64, 64, False), (64, 32, False), (64, 16, True), (128, 64, True), (128, 128, False),
     (128, 16, True), (128, 32, False), (80, 40, True), (80, 20, False), (96, 24, True), (192, 32, True),
     (256, 64, True), (64, 1, True)],
)


@pytest.mark.parametrize("nope_first", [False, True])
@pytest.mark.parametrize("d,width,reuse", WIDTHS)
@pytest.mark.parametrize("is_neox", by_device([None], [True, False]))
def test_rotary_widths(d, width, reuse, nope_first, is_neox):
    """Any even rotary width up to the head dim, at the front or (nope_first) at the back;
    the other channels keep their bits."""
    i = WIDTHS.index((d, width, reuse)) + nope_first
    is_neox = i % 2 == 0 if is_neox is None else is_neox
    t, qh, kvh = by_device((3, 4, 2), (300, 32, 8))
    _check(_qkv(t, qh, kvh, d, torch.bfloat16), qh, kvh, d, width=width, reuse=reuse, nope_first=nope_first,
           is_neox=is_neox, offsets=i % 3 == 0)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("table", by_device([None], [(torch.float32, "2d"), (torch.float32, "4d"),
                                                     (torch.bfloat16, "2d"), (torch.bfloat16, "4d")]), ids=str)
def test_dtypes_and_tables(dtype, table):
    """fp32 / fp16 / bf16 activations; fp32 or bf16 tables laid out (rows, F) or (rows, 1, 1, F)."""
    if table is None:
        i = DTYPES.index(dtype)
        table = ((torch.float32, "4d"), (torch.bfloat16, "2d"), (torch.bfloat16, "4d"))[i]
    t, qh, kvh, d = by_device((3, 4, 1, 64), (1000, 32, 8, 128))
    _check(_qkv(t, qh, kvh, d, dtype), qh, kvh, d, table_dtype=table[0], table_layout=table[1],
           offsets=dtype != torch.float32, is_neox=dtype != torch.float16)


@pytest.mark.parametrize("pad,lead", [(24, 0), (5, 3)])
def test_strided_qkv(pad, lead):
    """qkv a view with a row stride past its width (and not starting a row)."""
    t, qh, kvh, d = by_device((3, 8, 2, 128), (777, 32, 8, 128))
    qkv = _qkv(t, qh, kvh, d, torch.bfloat16, pad=pad, lead=lead)
    assert qkv.stride(0) != qkv.shape[1]
    _check(qkv, qh, kvh, d, index_dtype=torch.int32, offsets=lead > 0, is_neox=lead == 0)


@pytest.mark.skipif(not ON_GPU, reason="serving sizes: too slow for the interpreter")
@pytest.mark.parametrize("is_neox", [True, False])
def test_llama3_8b_prefill(is_neox):
    _check(_qkv(4096, 32, 8, 128, torch.bfloat16, pad=64), 32, 8, 128, is_neox=is_neox, offsets=True)


def test_v_and_passthrough_bits():
    """v, and the channels that do not rotate, keep every bit: NaN payloads, inf, -0.0, subnormals."""
    t, qh, kvh, d = 4, 2, 1, 64
    qkv = _qkv(t, qh, kvh, d, torch.float16)
    special = torch.tensor([0x7E01, 0xFE00, 0x7C00, 0xFC00, 0x8000, 0x0001, 0x83FF, 0x7BFF], dtype=torch.int32)
    special = special.to(torch.int16).to(DEVICE).view(torch.float16)
    qkv[:, (qh + kvh) * d:(qh + kvh) * d + 8] = special  # v's first channels
    qkv[:, d - 8:d] = special                            # q head 0's last channels (passthrough with R = d / 2)
    _check(qkv, qh, kvh, d, width=16, reuse=True)


@pytest.mark.eager_host_checks
def test_positions_out_of_range_raise(monkeypatch):
    if ON_GPU:
        monkeypatch.setenv("AITER_ROPE_CHECK_POSITIONS", "1")
    qkv = _qkv(3, 2, 1, 64, torch.bfloat16)
    cos = sin = torch.randn(ROWS, 32, device=DEVICE)
    with pytest.raises(ValueError, match="positions"):
        fusions.fused_qkv_split_qk_rope(qkv, cos, sin, torch.tensor([0, ROWS, 1], device=DEVICE), 2, 1, 64)
    with pytest.raises(ValueError, match="positions|offsets"):
        fusions.fused_qkv_split_qk_rope(qkv, cos, sin, torch.tensor([0, 5, 1], device=DEVICE), 2, 1, 64,
                                        offsets=torch.tensor([0, -6, 0], device=DEVICE))


def _bad_calls():
    """(exception, what the message names, keyword arguments replaced)."""
    def t(*s, dtype=torch.bfloat16):
        return torch.randn(*s, device=DEVICE).to(dtype)

    return [
        (ValueError, "qkv", {"qkv": t(4, 4, 64)}),                         # 3-D
        (ValueError, "qkv", {"qkv": t(4, 4 * 64 + 8)}),                    # width != (qh + 2 kvh) d
        (TypeError, "qkv", {"qkv": t(4, 256, dtype=torch.int32)}),
        (ValueError, "qkv", {"qkv": t(256, 4).t()}),                       # channels not unit-stride
        (ValueError, "qh|kvh", {"qh": 3, "kvh": 2, "qkv": t(4, 7 * 64)}),  # qh % kvh != 0
        (ValueError, "head_dim", {"head_dim": 63, "qkv": t(4, 4 * 63)}),   # odd
        (ValueError, "cos", {"cos": t(ROWS, 48, dtype=torch.float32), "sin": t(ROWS, 48, dtype=torch.float32)}),
        (ValueError, "sin", {"sin": t(ROWS, 16, dtype=torch.float32)}),
        (TypeError, "positions", {"positions": torch.arange(4, device=DEVICE).float()}),
        (ValueError, "positions", {"positions": torch.arange(3, device=DEVICE)}),
        (ValueError, "offsets", {"offsets": torch.arange(5, device=DEVICE)}),
        (TypeError, "offsets", {"offsets": torch.arange(4, device=DEVICE).to(torch.int16)}),
        (TypeError, "nope_first", {"nope_first": "yes"}),
    ]


@pytest.mark.parametrize("case", range(len(_bad_calls())))
def test_bad_arguments(case):
    exc, name, change = _bad_calls()[case]
    a = {"qkv": torch.randn(4, 4 * 64, device=DEVICE).to(torch.bfloat16),
         "cos": torch.randn(ROWS, 32, device=DEVICE), "sin": torch.randn(ROWS, 32, device=DEVICE),
         "positions": torch.arange(4, device=DEVICE), "qh": 2, "kvh": 1, "head_dim": 64}
    a.update(change)
    with pytest.raises(exc, match=name):
        fusions.fused_qkv_split_qk_rope(**a)
