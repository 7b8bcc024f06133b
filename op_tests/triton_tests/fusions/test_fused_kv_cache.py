"""fused_qk_rope_reshape_and_cache and cat_and_cache_mla (aiter_lite.ops.triton.fusions) against
the fp32 reference (aiter_lite.ops.native.fusions.fused_kv_cache) and the project's own RoPE op.

* q_out / k_out equal rope_cached_thd_positions(_offsets)_2c_fwd on the same inputs bit for
  bit, and the fp32 reference within one rounding, for every token, with a slot or not.
* Every cache starts as random bytes (finite values): exactly the addressed slots change,
  every other byte keeps its bits.
* bf16 / fp16 / fp32 caches hold the reference's rounding (``_to_cache``: scaled in fp32,
  one rounding) of the op's own rotated k and of v, bit for bit; fp8 caches hold v bit for
  bit and k within one fp8 step (the rotated value may be quantized from fp32 rather than
  from its rounding to k's dtype), never NaN or inf.
* Caller outputs, and every tensor the ops allocate, start as NaN.
"""

from __future__ import annotations

import dataclasses

import pytest
import torch

from aiter_lite.ops.native.fusions import fused_kv_cache as native
from aiter_lite.ops.triton import fusions
from aiter_lite.ops.triton.fusions import fused_kv_cache
from aiter_lite.ops.triton.quant import quant_range, supported_quant_dtypes
from aiter_lite.ops.triton.rope import rope as tr
from aiter_lite.utils import fast_launch
from op_tests.utils import DEVICE, DTYPES, ON_GPU, assert_close, by_device
from op_tests.utils.fusions import FP8, assert_bits, bits, sentinel, tol
from op_tests.utils.inputs import poison
from op_tests.utils.rope import angles

CACHE_DTYPES = (torch.bfloat16, torch.float16, *FP8)
SUPPORTED = supported_quant_dtypes(DEVICE)
SCALES = ("none", "scaled", "unapplied")
ROWS = 64  # cos / sin rows; positions and offsets each below ROWS / 2


# ---------------------------------------------------------------------------
# helpers


def _storable(dtype: torch.dtype) -> None:
    if dtype in FP8 and dtype not in SUPPORTED:
        pytest.skip(f"{dtype} cannot be stored on this device")


def _sentinel(shape, dtype) -> torch.Tensor:
    return sentinel(shape, dtype, DEVICE)


def _poisoned(shape, dtype) -> torch.Tensor:
    return poison(torch.zeros(shape, dtype=dtype, device=DEVICE))


def _tables(width, dtype=torch.float32, layout="2d"):
    a = angles(ROWS, width)
    cos, sin = torch.cos(a).to(dtype), torch.sin(a).to(dtype)
    if layout == "4d":  # aiter's (rows, 1, 1, F)
        cos, sin = cos[:, None, None, :], sin[:, None, None, :]
    return cos, sin


def _indices(t, dtype, offsets):
    pos = torch.randint(0, ROWS // 2, (t,), device=DEVICE, dtype=dtype)
    offs = torch.randint(0, ROWS // 2, (t,), device=DEVICE, dtype=dtype) if offsets else None
    return pos, offs


def _rope_2c(q, k, cos, sin, pos, offs, is_neox):
    """The project's RoPE op on the same inputs: the bits q_out and k_out must have."""
    style, reuse = (0 if is_neox else 1), cos.shape[-1] != q.shape[-1]
    if offs is None:
        return tr.rope_cached_thd_positions_2c_fwd(q, k, cos, sin, pos, style, reuse, False)
    return tr.rope_cached_thd_positions_offsets_2c_fwd(q, k, cos, sin, pos, offs, style, reuse, False)


def _codes(b: torch.Tensor) -> torch.Tensor:
    """fp8 bytes as integers in value order (sign and magnitude)."""
    b = b.long()
    return torch.where(b >= 128, -(b & 0x7F), b & 0x7F)


def _slot_index(slots, bs, heads, width, layout, x=1):
    """Index tensors, broadcasting to (tokens, heads, width), of the cache elements the
    tokens at ``slots`` own. flash / paged: [nb, bs, heads, width]; key: [nb, heads,
    width // x, bs, x]; value: [nb, heads, width, bs]; value_shuffled: [nb, heads, bs // x,
    width, x] (aiter's); flat: [slots, heads, width]."""
    s = slots.long().view(-1, 1, 1)
    blk, off = s // bs, s % bs
    h = torch.arange(heads, device=DEVICE).view(1, -1, 1)
    c = torch.arange(width, device=DEVICE).view(1, 1, -1)
    return {"flash": (blk, off, h, c), "key": (blk, h, c // x, off, c % x), "value": (blk, h, c, off),
            "value_shuffled": (blk, h, off // x, c, off % x), "flat": (s, h, c)}[layout]


def _cache_values(x, scale, apply, dtype):
    """(the reference's value of ``x`` in a ``dtype`` cache, the other value allowed). The
    reference rounds to nearest even; Triton's interpreter converts fp32 to bf16 by
    truncation, so on the CPU a bf16 value may also be the truncated one."""
    want = native._to_cache(x, scale, apply, dtype)
    if ON_GPU or dtype != torch.bfloat16:
        return want, want
    y = x.float() * (1.0 / scale.reshape(()).float()) if scale is not None and apply else x.float()
    return want, (y.view(torch.int32) & -65536).view(torch.float32).to(dtype)


def _assert_cache(name, got, before, index, want, *, one_step=False):
    """``got`` holds ``want`` (tokens, heads, width) at ``index`` and ``before``'s bits
    elsewhere. ``want``: a tensor, or a pair of allowed values (see _cache_values). fp8
    compared by value (+-0 alike; the interpreter's fp8 rounding drops the sign of zero),
    ``one_step``: codes at most one apart, finite where ``want`` is."""
    assert got.shape == before.shape and got.dtype == before.dtype, name
    want, alt = want if isinstance(want, tuple) else (want, want)
    written = torch.zeros(got.shape, dtype=torch.bool, device=got.device)
    written[index] = True
    changed = (bits(got) != bits(before)) & ~written
    if changed.any():
        raise AssertionError(f"{name}: {int(changed.sum())} elements outside the addressed slots changed, first at "
                             f"{changed.nonzero()[:6].tolist()}")
    if not want.numel():
        return
    g = bits(got)[index].view(got.dtype)
    if got.dtype in FP8:
        far = (_codes(bits(g)) - _codes(bits(want))).abs() > (1 if one_step else 0)
        far |= ~torch.isfinite(g.float()) & torch.isfinite(want.float())
    else:
        far = (bits(g) != bits(want)) & (bits(g) != bits(alt))
    if far.any():
        where = far.nonzero()[:6].tolist()
        raise AssertionError(f"{name}: {int(far.sum())} of {far.numel()} written elements wrong (token, head, "
                             f"channel) first at {where}: got {g[far][:6].float().tolist()}, expected "
                             f"{want[far][:6].float().tolist()}")


def _written(slot_mapping, n_tokens):
    """(tokens, slots) that write: an entry in slot_mapping, a slot >= 0."""
    s = slot_mapping.long()[:n_tokens]
    t = torch.nonzero(s >= 0).flatten()
    return t, s[t]


def _prefill_slots(t, bs, n_slots):
    """Slots of a prefill batch for ``t`` tokens: sequences of random lengths, each in cache
    blocks of its own (random, distinct), token i of a sequence at its blocks' slot start + i;
    every other sequence starts in the middle of its first block (a chunked prefill going on),
    and a padding token (-1) follows every third. Tiles of consecutive slots of one block
    (the classic layout's transposed stores) and tiles that are not, side by side."""
    blocks = iter(torch.randperm(n_slots // bs).tolist())
    out, seq = [], 0
    while len(out) < t:
        start = (bs // 2 + 1) % bs if seq % 2 else 0
        n = int(torch.randint(1, 3 * bs, ()))
        table = [next(blocks) for _ in range((start + n + bs - 1) // bs)]
        out += [table[(start + i) // bs] * bs + (start + i) % bs for i in range(n)]
        if seq % 3 == 2:
            out.append(-1)
        seq += 1
    return torch.tensor(out[:t], device=DEVICE)


def _slot_mapping(t, n_slots, mode, dtype, bs=16):
    """Distinct random slots for ``t`` tokens. padded: some tokens -1 or another negative;
    short: no entry for the last 3 tokens (T_slot < T); empty: no entries; negative: all padding;
    prefill: _prefill_slots (``n_slots`` at least 4 t + 4 bs)."""
    if mode == "prefill":
        return _prefill_slots(t, bs, n_slots).to(dtype)
    s = torch.randperm(n_slots, device=DEVICE)[:t]
    if mode == "padded":
        s[1::3] = -1
        s[2::3] = -n_slots - 17
    elif mode == "short":
        s = s[: max(t - 3, 0)]
    elif mode == "empty":
        s = s[:0]
    elif mode == "negative":
        s = torch.full_like(s, -1)
    return s.to(dtype)


def _scales(mode):
    if mode == "none":
        return None, None, True
    ks, vs = torch.tensor([0.37], device=DEVICE), torch.tensor([1.9], device=DEVICE)
    return ks, vs, mode == "scaled"


def _kv_caches(nb, bs, kh, d, dtype, flash, x=0, shuffled=False):
    """Sentinel-filled key / value caches: flash [nb, bs, kh, d] both; else the x-split
    key [nb, kh, d // x, bs, x] (x: 16 bytes of elements unless given) and value [nb, kh, d, bs]
    (``shuffled``: aiter's [nb, kh, bs // x, d, x])."""
    if flash:
        return _sentinel((nb, bs, kh, d), dtype), _sentinel((nb, bs, kh, d), dtype)
    x = x or 16 // dtype.itemsize
    value = (nb, kh, bs // x, d, x) if shuffled else (nb, kh, d, bs)
    return _sentinel((nb, kh, d // x, bs, x), dtype), _sentinel(value, dtype)


# ---------------------------------------------------------------------------
# fused_qk_rope_reshape_and_cache


@dataclasses.dataclass(frozen=True)
class Case:
    t: int = 7
    qh: int = 4
    kh: int = 2
    d: int = 64
    bs: int = 16
    dtype: torch.dtype = torch.bfloat16          # q, k, v
    cache_dtype: torch.dtype = torch.bfloat16
    flash: bool = True
    is_neox: bool = True
    scale: str = "none"                          # none, scaled, unapplied (scales given, apply_scale=False)
    width: int = 0                               # cos / sin width; 0: d / 2
    table_dtype: torch.dtype = torch.float32
    table_layout: str = "2d"                     # (rows, F) or (rows, 1, 1, F)
    offsets: bool = False
    index_dtype: torch.dtype = torch.int64       # slot_mapping, pos, offs
    slots: str = "all"                           # all, padded, short, empty, negative, prefill
    outs: str = "given"                          # given (poisoned q_out / k_out), new (None), inplace (q_out=q)
    zeros: str = "flag"                          # flag (output_zeros), given (a poisoned zeros_out), off
    strided: bool = False                        # q, k, v column views of one qkv with a padded row
    x: int = 0                                   # the x-split key cache's last dim; 0: 16 bytes of elements
    shuffled: bool = False                       # not flash: aiter's shuffled 5-D value cache


def _qkv(c: Case):
    if not c.strided:
        return (torch.randn(c.t, c.qh, c.d, device=DEVICE).to(c.dtype),
                torch.randn(c.t, c.kh, c.d, device=DEVICE).to(c.dtype),
                torch.randn(c.t, c.kh, c.d, device=DEVICE).to(c.dtype))
    qw, kw = c.qh * c.d, c.kh * c.d
    qkv = torch.randn(c.t, qw + 2 * kw + 24, device=DEVICE).to(c.dtype)
    return (qkv[:, :qw].view(c.t, c.qh, c.d), qkv[:, qw:qw + kw].view(c.t, c.kh, c.d),
            qkv[:, qw + kw:qw + 2 * kw].view(c.t, c.kh, c.d))


def _check(c: Case):
    """One call against the RoPE op and the reference; every output and both caches checked."""
    _storable(c.cache_dtype)
    q, k, v = _qkv(c)
    cos, sin = _tables(c.width or c.d // 2, c.table_dtype, c.table_layout)
    pos, offs = _indices(c.t, c.index_dtype, c.offsets)
    nb = (c.t + 3) // c.bs + 2 if c.slots != "prefill" else 4 * c.t // c.bs + 4
    key_cache, value_cache = _kv_caches(nb, c.bs, c.kh, c.d, c.cache_dtype, c.flash, c.x, c.shuffled)
    slot_mapping = _slot_mapping(c.t, nb * c.bs, c.slots, c.index_dtype, c.bs)
    k_scale, v_scale, apply = _scales(c.scale)
    common = (slot_mapping, pos, cos, sin, k_scale, v_scale, c.is_neox, c.flash, apply, offs)

    # references first: q may be rotated in place
    want_q, want_k = _rope_2c(q, k, cos, sin, pos, offs, c.is_neox)
    ref_kc, ref_vc = key_cache.clone(), value_cache.clone()
    ref = native.fused_qk_rope_reshape_and_cache(q, k, v, ref_kc, ref_vc, *common)
    before_q, before_k, before_v = q.clone(), k.clone(), v.clone()
    before_kc, before_vc = key_cache.clone(), value_cache.clone()

    q_out = {"given": _poisoned(q.shape, q.dtype), "new": None, "inplace": q}[c.outs]
    k_out = _poisoned(k.shape, k.dtype) if c.outs == "given" else None
    zeros_out = _poisoned(q.shape, q.dtype) if c.zeros == "given" else None
    out = fusions.fused_qk_rope_reshape_and_cache(q, k, v, key_cache, value_cache, *common, q_out=q_out, k_out=k_out,
                                                  output_zeros=c.zeros == "flag", zeros_out=zeros_out)

    assert isinstance(out, tuple) and len(out) == (4 if c.zeros == "off" else 5), f"{len(out)} results"
    assert out[2] is key_cache and out[3] is value_cache
    assert q_out is None or out[0] is q_out
    assert k_out is None or out[1] is k_out
    assert_bits("q_out vs rope op", out[0], want_q)
    assert_bits("k_out vs rope op", out[1], want_k)
    assert_close(out[0], ref[0], name="q_out vs reference", **tol(c.dtype))
    assert_close(out[1], ref[1], name="k_out vs reference", **tol(c.dtype))
    if c.zeros != "off":
        z = out[4]
        assert z.shape == q.shape and z.dtype == q.dtype and (zeros_out is None or z is zeros_out)
        assert (bits(z) == 0).all(), "zeros_out not zeroed"
    if c.outs != "inplace":
        assert_bits("q (an input)", q, before_q)
    assert_bits("k (an input)", k, before_k)
    assert_bits("v (an input)", v, before_v)

    toks, slots = _written(slot_mapping, c.t)
    x = c.x or 16 // c.cache_dtype.itemsize
    kidx = _slot_index(slots, c.bs, c.kh, c.d, "flash" if c.flash else "key", x)
    vidx = _slot_index(slots, c.bs, c.kh, c.d, "flash" if c.flash else "value_shuffled" if c.shuffled else "value",
                       x)
    want_kc = _cache_values(out[1][toks], k_scale, apply, c.cache_dtype)
    want_vc = _cache_values(v[toks], v_scale, apply, c.cache_dtype)
    # the index arithmetic here agrees with the reference's layout
    _assert_cache("reference key_cache", ref_kc, before_kc, kidx,
                  native._to_cache(ref[1][toks], k_scale, apply, c.cache_dtype))
    _assert_cache("reference value_cache", ref_vc, before_vc, vidx, want_vc[0])
    _assert_cache("key_cache", key_cache, before_kc, kidx, want_kc, one_step=c.cache_dtype in FP8)
    _assert_cache("value_cache", value_cache, before_vc, vidx, want_vc)


@pytest.mark.parametrize("cache_dtype", [torch.bfloat16, torch.float16, *FP8])
@pytest.mark.parametrize("t,bs,slots", [(7, 16, "padded"), (40, 32, "all"), (3, 16, "short")])
def test_shuffled_value_cache(cache_dtype, t, bs, slots):
    """aiter's 5-D value cache [blocks, heads, block_size // x, head_dim, x] (gpt-oss on gfx950)."""
    _check(Case(t=t, qh=8, kh=2, d=64, bs=bs, dtype=_io_dtype(cache_dtype), cache_dtype=cache_dtype, flash=False,
                shuffled=True, slots=slots, scale="scaled" if cache_dtype in FP8 else "none"))


def test_shuffled_value_cache_needs_whole_chunks():
    a = _cache_args(flash=False)
    a["value_cache"] = _sentinel((2, 2, 2, 64, 8), torch.bfloat16)  # 2 chunks of 8 offsets: 16 = block_size, ok
    fusions.fused_qk_rope_reshape_and_cache(**a)
    a["value_cache"] = _sentinel((2, 2, 3, 64, 8), torch.bfloat16)  # 24 offsets, the key cache's block holds 16
    with pytest.raises(ValueError, match="value_cache"):
        fusions.fused_qk_rope_reshape_and_cache(**a)


def _io_dtype(cache_dtype):
    return torch.float16 if cache_dtype == torch.float16 else torch.bfloat16


# (cache dtype, scales, flash layout): every dtype with k_scale / v_scale, without, and given
# but not applied (apply_scale=False), in both layouts; on the CPU each dtype scaled in one
# layout and unscaled or unapplied in the other
CACHE_CASES = by_device(
    [c for i, dt in enumerate(CACHE_DTYPES) for c in ((dt, "scaled", i % 2 == 0), (dt, SCALES[i % 2 * 2], i % 2 == 1))],
    [(dt, sc, fl) for dt in CACHE_DTYPES for sc in SCALES for fl in (True, False)],
)


@pytest.mark.parametrize("cache_dtype,scale,flash", CACHE_CASES, ids=str)
@pytest.mark.parametrize("dtype", by_device([None], DTYPES), ids=str)
def test_cache_dtypes(cache_dtype, scale, flash, dtype):
    dtype = dtype or _io_dtype(cache_dtype)
    t, qh, kh, d = by_device((3, 2, 1, 64), (300, 32, 8, 128))
    _check(Case(t=t, qh=qh, kh=kh, d=d, bs=16, dtype=dtype, cache_dtype=cache_dtype, flash=flash, scale=scale,
                is_neox=scale != "scaled", slots="padded", offsets=flash))


# (tokens, q heads, kv heads, head dim, block size, flash layout, is_neox): GQA ratios 1 to
# 16, decode and prefill; on the CPU a cross-section, on a GPU every combination
SHAPES = by_device(
    [(0, 4, 1, 64, 16, True, True), (1, 8, 1, 128, 16, False, True), (7, 4, 4, 64, 64, True, False),
     (3, 8, 4, 128, 16, False, False), (3, 16, 4, 64, 64, False, True), (4, 16, 2, 64, 16, True, True),
     (3, 16, 1, 64, 16, True, False), (512, 2, 1, 64, 16, False, True)],
    [(t, qh, kh, d, bs, fl, nx) for t in (0, 1, 7, 512, 4096)
     for qh, kh in ((1, 1), (8, 8), (16, 8), (32, 8), (16, 4), (64, 8), (16, 1))
     for d in (64, 128) for bs in (16, 64) for fl in (True, False) for nx in (True, False)],
)


@pytest.mark.parametrize("t,qh,kh,d,bs,flash,is_neox", SHAPES)
def test_shapes(t, qh, kh, d, bs, flash, is_neox):
    cache_dtype = torch.bfloat16 if (t + qh) % 2 else torch.float8_e4m3fn
    if cache_dtype not in SUPPORTED:
        cache_dtype = torch.bfloat16
    _check(Case(t=t, qh=qh, kh=kh, d=d, bs=bs, flash=flash, is_neox=is_neox, cache_dtype=cache_dtype,
                scale="scaled" if t % 2 else "none", slots="padded" if t >= 4 else "all",
                index_dtype=torch.int32 if qh % 3 == 1 else torch.int64))


@pytest.mark.skipif(not ON_GPU, reason="serving sizes: too slow for the interpreter")
@pytest.mark.parametrize("cache_dtype", CACHE_DTYPES, ids=str)
@pytest.mark.parametrize("flash", [True, False])
def test_llama3_8b_prefill(cache_dtype, flash):
    _check(Case(t=4096, qh=32, kh=8, d=128, bs=16, cache_dtype=cache_dtype, flash=flash, scale="scaled",
                offsets=True, slots="padded", index_dtype=torch.int32))
    _check(Case(t=4096, qh=32, kh=8, d=128, bs=16, cache_dtype=cache_dtype, flash=flash, scale="scaled",
                slots="prefill", index_dtype=torch.int32))


@pytest.mark.parametrize("cache_dtype", [torch.bfloat16, torch.float32, *FP8], ids=str)
@pytest.mark.parametrize("bs", [8, 16, 32])
def test_classic_slot_tiles(cache_dtype, bs, monkeypatch):
    """Classic caches: a prefill's tiles (at most two runs of consecutive slots, each in one
    block) are stored run by run, tokens across the lanes (SLOT_TILES); with the RoPE and
    unrotated (kv_cache_write) they give the token-by-token stores' bits, on fresh values, with
    padding tokens, odd head counts and a head dim that is not a power of 2, and the launches
    take them."""
    _storable(cache_dtype)
    t, kh, d = by_device(70, 3000), 3, 80
    nb = 4 * t // bs + 4
    slots = _prefill_slots(t, bs, nb * bs)
    q, k, v = (torch.randn(t, h, d, device=DEVICE, dtype=torch.float16) for h in (2 * kh, kh, kh))
    cos, sin = _tables(d // 2)
    pos = torch.randint(0, ROWS // 2, (t,), device=DEVICE)
    flags = []
    real_launch = fused_kv_cache.launch
    monkeypatch.setattr(fused_kv_cache, "launch", lambda *a, **kw: flags.append(kw.get("SLOT_TILES", False))
                        or real_launch(*a, **kw))
    out = {}
    sentinels = [_kv_caches(nb, bs, kh, d, cache_dtype, False) for _ in range(2)]
    for tiles in (True, False):
        monkeypatch.setattr(fused_kv_cache, "_SLOT_TILES", tiles)
        fast_launch.reset()
        caches = [[c.clone() for c in pair] for pair in sentinels]
        fusions.fused_qk_rope_reshape_and_cache(q, k, v, *caches[0], slots, pos, cos, sin, None, None, True, False,
                                                False)
        fusions.kv_cache_write(k, v, *caches[1], slots, torch.tensor([0.37], device=DEVICE),
                               torch.tensor([1.7], device=DEVICE), False)
        out[tiles] = [c for pair in caches for c in pair]
    tiled = cache_dtype.itemsize >= 2  # fp8 caches write token by token
    assert flags == [tiled, tiled, False, False]
    for name, got, want in zip(("rope key_cache", "rope value_cache", "key_cache", "value_cache"), out[True],
                               out[False]):
        assert_bits(name, got, want)


# (slot_mapping, its dtype): padding slots (< 0), T_slot < T, no entries, all padding
PADDING = by_device([("padded", torch.int32), ("short", torch.int64), ("empty", torch.int64),
                     ("negative", torch.int32)],
                    [(s, i) for s in ("padded", "short", "empty", "negative") for i in (torch.int32, torch.int64)])


@pytest.mark.parametrize("slots,index_dtype", PADDING, ids=str)
@pytest.mark.parametrize("flash", by_device([None], [True, False]))
def test_padding(slots, index_dtype, flash):
    """Negative slots and tokens past the end of slot_mapping write nothing to the caches;
    q_out and k_out are still written for every token."""
    if flash is None:
        flash = PADDING.index((slots, index_dtype)) % 2 == 0
    _check(Case(t=by_device(5, 1000), qh=2, kh=1, slots=slots, flash=flash, index_dtype=index_dtype, bs=16,
                cache_dtype=torch.float8_e5m2 if flash else torch.float16, scale="scaled"))


# (head dim, table width): a full table (F = d), the half table reused, partial rotary
# parts (F < d / 2: channels from 2F pass through), a width that is not a power of 2
WIDTHS = by_device([(64, 64), (64, 32), (64, 16), (128, 24)],
                   [(64, 64), (64, 32), (64, 16), (64, 8), (128, 128), (128, 64), (128, 32), (128, 24), (128, 2)])


@pytest.mark.parametrize("offsets", by_device([None], [False, True]))
@pytest.mark.parametrize("d,width", WIDTHS)
def test_rotary_tables(d, width, offsets):
    """Tables fp32 or bf16, (rows, F) or (rows, 1, 1, F); positions int32 or int64, with offsets or not."""
    if offsets is None:
        offsets = WIDTHS.index((d, width)) % 2 == 1
    i = d // 16 + width // 8 + offsets
    _check(Case(t=3, qh=2, kh=1, d=d, width=width, offsets=offsets, is_neox=i % 2 == 0, flash=bool(i // 2 % 2),
                table_dtype=(torch.float32, torch.bfloat16)[i % 2], table_layout=("2d", "4d")[(i // 2) % 2],
                index_dtype=(torch.int32, torch.int64)[(i // 4) % 2], cache_dtype=torch.float8_e4m3fn
                if torch.float8_e4m3fn in SUPPORTED and i % 3 == 0 else torch.bfloat16, scale="scaled"))


@pytest.mark.parametrize("outs,zeros", by_device(
    [("given", "given"), ("new", "flag"), ("inplace", "given"), ("inplace", "off")],
    [("given", "flag"), ("given", "given"), ("given", "off"), ("new", "flag"), ("new", "off"), ("inplace", "given"),
     ("inplace", "off"), ("inplace", "flag")]))
@pytest.mark.parametrize("dtype", by_device([torch.bfloat16], DTYPES), ids=str)
def test_outputs(outs, zeros, dtype):
    """Caller outputs, new outputs, q rotated in place (q_out=q), zeros_out given or not."""
    _check(Case(t=3, qh=2, kh=1, outs=outs, zeros=zeros, dtype=dtype, cache_dtype=dtype, flash=outs != "new",
                slots="padded"))


@pytest.mark.parametrize("flash", [True, False])
def test_strided_inputs(flash):
    """q, k and v as column views of one qkv tensor whose rows are padded."""
    _check(Case(t=by_device(3, 777), qh=by_device(4, 32), kh=by_device(1, 8), d=128, strided=True, flash=flash,
                slots="padded", cache_dtype=torch.bfloat16 if flash else torch.float8_e5m2, scale="scaled"))


@pytest.mark.parametrize("dtype,cache_dtype", by_device(
    [(torch.float16, torch.bfloat16), (torch.float32, torch.float32), (torch.float32, torch.float8_e4m3fn),
     (torch.float16, torch.float8_e5m2)],
    [(torch.float16, torch.bfloat16), (torch.bfloat16, torch.float16), (torch.float32, torch.float32),
     (torch.bfloat16, torch.float32), (torch.float32, torch.float8_e4m3fn), (torch.float16, torch.float8_e5m2),
     (torch.float32, torch.bfloat16)]), ids=str)
def test_cache_dtype_differs(dtype, cache_dtype):
    """A cache dtype other than q's: k rounded to k's dtype, then scaled and rounded to the cache's."""
    _check(Case(t=3, qh=2, kh=1, dtype=dtype, cache_dtype=cache_dtype, flash=dtype != torch.float32,
                scale="scaled", slots="padded"))


@pytest.mark.parametrize("x", by_device([4], [4, 2]))
def test_classic_layout_other_x(x):
    """The x-split key cache takes x from its last dim (here not 16 bytes of elements)."""
    _check(Case(t=3, qh=2, kh=1, flash=False, x=x, slots="padded", scale="scaled", is_neox=x == 4))


@pytest.mark.parametrize("qdtype", by_device([torch.float8_e4m3fn], [torch.float8_e4m3fn, torch.float8_e5m2]), ids=str)
def test_fp8_q_out(qdtype):
    """An fp8 q_out: q rotated, saturated to the format, no scale (within one fp8 step of
    the reference's rounding, which rounds to q's dtype first)."""
    _storable(qdtype)
    t, qh, kh, d, bs = 3, 4, 1, 64, 16
    lo, hi = quant_range(qdtype)
    q = (torch.randn(t, qh, d, device=DEVICE) * (hi / 2)).to(torch.bfloat16)  # some beyond the format's max
    k, v = (torch.randn(t, kh, d, device=DEVICE).to(torch.bfloat16) for _ in range(2))
    cos, sin = _tables(d // 2)
    pos, _ = _indices(t, torch.int64, False)
    kc, vc = _kv_caches(2, bs, kh, d, torch.bfloat16, True)
    slot_mapping = torch.randperm(2 * bs, device=DEVICE)[:t]
    q_out = _poisoned(q.shape, qdtype)
    out = fusions.fused_qk_rope_reshape_and_cache(q, k, v, kc, vc, slot_mapping, pos, cos, sin, None, None, True,
                                                  True, q_out=q_out, output_zeros=False)
    assert out[0] is q_out
    want_q, want_k = _rope_2c(q, k, cos, sin, pos, None, True)
    want = native._to_cache(want_q, None, False, qdtype)
    got = q_out.float()
    assert torch.isfinite(got).all(), "an fp8 q_out must saturate, not overflow"
    far = (_codes(bits(q_out)) - _codes(bits(want))).abs() > 1
    assert not far.any(), f"fp8 q_out: {int(far.sum())} values more than a step off, first at {far.nonzero()[:4]}"
    assert (got.abs() == hi).any() and got.min() >= lo and got.max() <= hi
    assert_bits("k_out", out[1], want_k)


@pytest.mark.parametrize("cache_dtype,scaled", by_device(
    [(torch.float8_e4m3fn, True), (torch.float8_e5m2, False), (torch.float8_e4m3fnuz, True)],
    [(dt, sc) for dt in FP8 for sc in (True, False)]), ids=str)
def test_fp8_saturation(cache_dtype, scaled):
    """k and v far beyond the format's range store +-max, never NaN or inf."""
    _storable(cache_dtype)
    t, qh, kh, d, bs, flash = 2, 2, 2, 64, 16, scaled
    mag = 100.0 if scaled else 1e6  # over a scale of 1e-4, or unscaled: both beyond e5m2's 57344

    def big(h):
        x = torch.rand(t, h, d, device=DEVICE) * mag + mag
        return (x * torch.where(torch.rand(t, h, d, device=DEVICE) < 0.5, -1.0, 1.0)).to(torch.bfloat16)

    q, k, v = big(qh), big(kh), big(kh)
    scale = torch.tensor([1e-4], device=DEVICE) if scaled else None
    cos, sin = _tables(d // 2)
    pos, _ = _indices(t, torch.int64, False)
    kc, vc = _kv_caches(2, bs, kh, d, cache_dtype, flash)
    slot_mapping = torch.randperm(2 * bs, device=DEVICE)[:t]
    out = fusions.fused_qk_rope_reshape_and_cache(q, k, v, kc, vc, slot_mapping, pos, cos, sin, scale, scale,
                                                  True, flash, output_zeros=False)
    lo, hi = quant_range(cache_dtype)
    x = 16 // cache_dtype.itemsize
    for name, cache, src, layout in (("key_cache", kc, out[1], "flash" if flash else "key"),
                                     ("value_cache", vc, v, "flash" if flash else "value")):
        got = bits(cache)[_slot_index(slot_mapping, bs, kh, d, layout, x)].view(cache_dtype).float()
        assert torch.isfinite(got).all(), f"{name}: NaN or inf from overflow"
        y = src.float() / (1e-4 if scaled else 1.0)
        beyond = y.abs() > 2 * hi
        assert beyond.float().mean() > 0.5
        assert torch.equal(got[beyond], torch.where(y[beyond] > 0, hi, lo)), f"{name}: not saturated to +-{hi}"


@pytest.mark.skipif(not ON_GPU, reason="slot_mapping on the CPU is always checked on the host")
@pytest.mark.parametrize("flash", [True, False])
def test_slot_out_of_range_unchecked(flash):
    """Unchecked slots past the cache write nothing out of bounds (guard blocks either side keep their bits)."""
    t, qh, kh, d, bs, nb = 6, 4, 2, 64, 16, 3
    q, k, v = (torch.randn(t, h, d, device=DEVICE).to(torch.bfloat16) for h in (qh, kh, kh))
    cos, sin = _tables(d // 2)
    pos, _ = _indices(t, torch.int64, False)
    bk, bv = _kv_caches(nb + 2, bs, kh, d, torch.bfloat16, flash)
    before_k, before_v = bk.clone(), bv.clone()
    kc, vc = bk[1:nb + 1], bv[1:nb + 1]
    slot_mapping = torch.tensor([5, nb * bs, 17, nb * bs + 40, 2 ** 30, nb * bs - 1], device=DEVICE)
    out = fusions.fused_qk_rope_reshape_and_cache(q, k, v, kc, vc, slot_mapping, pos, cos, sin, None, None, True,
                                                  flash, output_zeros=False)
    ok = torch.tensor([0, 2, 5], device=DEVICE)
    slots = slot_mapping[ok] + bs  # in the guarded buffer, one block on
    x = 16 // 2
    _assert_cache("key buffer", bk, before_k, _slot_index(slots, bs, kh, d, "flash" if flash else "key", x),
                  out[1][ok])
    _assert_cache("value buffer", bv, before_v, _slot_index(slots, bs, kh, d, "flash" if flash else "value"), v[ok])


def _cache_args(flash=True, t=4, qh=4, kh=2, d=64, bs=16, nb=2, dtype=torch.bfloat16):
    q, k, v = (torch.randn(t, h, d, device=DEVICE).to(dtype) for h in (qh, kh, kh))
    kc, vc = _kv_caches(nb, bs, kh, d, dtype, flash)
    cos, sin = _tables(d // 2)
    return {"q": q, "k": k, "v": v, "key_cache": kc, "value_cache": vc, "slot_mapping": torch.arange(t, device=DEVICE),
            "pos": torch.arange(t, device=DEVICE), "cos": cos, "sin": sin, "k_scale": None, "v_scale": None,
            "is_neox": True, "flash_layout": flash}


@pytest.mark.eager_host_checks
def test_slot_out_of_range_raises(monkeypatch):
    if ON_GPU:
        monkeypatch.setenv("AITER_KV_CACHE_CHECK_SLOTS", "1")
    for flash in (True, False):
        a = _cache_args(flash)
        a["slot_mapping"] = torch.tensor([0, 2 * 16, -1, 3], device=DEVICE)
        with pytest.raises(ValueError, match="slot_mapping"):
            fusions.fused_qk_rope_reshape_and_cache(**a)
    kv = _sentinel((10, 1, 576), torch.bfloat16)
    with pytest.raises(ValueError, match="slot_mapping"):
        fusions.cat_and_cache_mla(torch.randn(2, 512, device=DEVICE).to(torch.bfloat16),
                                  torch.randn(2, 64, device=DEVICE).to(torch.bfloat16), kv,
                                  torch.tensor([3, 10], device=DEVICE), None)


def _bad_cache_calls():
    """(exception, argument named, change to the valid arguments)."""
    def t(*s, dtype=torch.bfloat16):
        return torch.randn(*s, device=DEVICE).to(dtype)

    one = torch.ones(1, device=DEVICE)
    return [
        (ValueError, "key_cache", {"key_cache": t(2, 16, 2 * 64)}),                      # rank 3
        (ValueError, "value_cache", {"value_cache": t(2, 16, 1, 64)}),                   # heads differ from k's
        (ValueError, "key_cache", {"key_cache": t(2, 16, 2, 32)}),                       # head dim
        (ValueError, "key_cache|value_cache", {"key_cache": t(2, 8, 2, 64)}),            # block sizes differ
        (TypeError, "key_cache", {"key_cache": t(2, 16, 2, 64).to(torch.int32)}),
        (ValueError, r"\bq\b|\bk\b", {"q": t(4, 3, 64)}),                                # QH % KH != 0
        (ValueError, r"\bv\b", {"v": t(4, 1, 64)}),                                      # v's heads differ from k's
        (ValueError, r"\bk\b|\bv\b", {"k": t(4, 2, 32), "v": t(4, 2, 32)}),              # head dim differs from q's
        (ValueError, r"\bk\b|\bv\b", {"v": t(3, 2, 64)}),                                # token counts differ
        (TypeError, r"\bq\b", {"q": t(4, 4, 64).to(torch.int32)}),
        (ValueError, "cos", {"cos": t(64, 40, dtype=torch.float32), "sin": t(64, 40, dtype=torch.float32)}),
        (ValueError, "sin", {"sin": t(64, 16, dtype=torch.float32)}),
        (TypeError, "k_scale", {"k_scale": 0.5}),
        (ValueError, "k_scale", {"k_scale": torch.ones(2, device=DEVICE)}),
        (TypeError, "v_scale", {"v_scale": 1}),
        (ValueError, "v_scale", {"v_scale": torch.ones(1, 2, device=DEVICE)}),
        (TypeError, "slot_mapping", {"slot_mapping": torch.arange(4, device=DEVICE).float()}),
        (TypeError, "slot_mapping", {"slot_mapping": torch.arange(4, device=DEVICE).to(torch.int16)}),
        (ValueError, "slot_mapping", {"slot_mapping": torch.arange(5, device=DEVICE)}),  # T_slot > T
        (TypeError, "pos", {"pos": torch.arange(4, device=DEVICE).float()}),
        (ValueError, "pos", {"pos": torch.arange(3, device=DEVICE)}),
        (ValueError, "pos", {"pos": torch.tensor([0, 1, 2, 64], device=DEVICE)}),        # beyond the table
        (ValueError, "offs", {"offs": torch.arange(5, device=DEVICE)}),
        (ValueError, "q_out", {"q_out": t(4, 4, 32)}),
        (ValueError, "k_out", {"k_out": t(4, 4, 64)}),
        (ValueError, "zeros_out", {"zeros_out": t(4, 2, 64)}),
        (TypeError, "k_scale", {"k_scale": one.to(torch.int32)}),
    ]


@pytest.mark.parametrize("case", range(len(_bad_cache_calls())))
def test_bad_arguments(case, monkeypatch):
    exc, name, change = _bad_cache_calls()[case]
    # Indices on a GPU are checked against the table on the host only when asked to.
    monkeypatch.setenv("AITER_ROPE_CHECK_POSITIONS", "1")
    a = _cache_args()
    a.update(change)
    with pytest.raises(exc, match=name):
        fusions.fused_qk_rope_reshape_and_cache(**a)


def test_bad_classic_layout():
    a = _cache_args(flash=False)
    a["key_cache"] = _sentinel((2, 2, 3, 16, 8), torch.bfloat16)  # d // x * x = 24, not 64
    with pytest.raises(ValueError, match="key_cache"):
        fusions.fused_qk_rope_reshape_and_cache(**a)
    a = _cache_args(flash=False)
    a["value_cache"] = _sentinel((2, 2, 16, 64), torch.bfloat16)  # [nb, kh, bs, d]: d and bs swapped
    with pytest.raises(ValueError, match="value_cache"):
        fusions.fused_qk_rope_reshape_and_cache(**a)


@pytest.mark.skipif(all(d in SUPPORTED for d in FP8), reason="every fp8 dtype is supported here")
def test_unsupported_cache_dtype():
    for dtype in FP8:
        if dtype in SUPPORTED:
            continue
        a = _cache_args()
        a["key_cache"], a["value_cache"] = (_sentinel((2, 16, 2, 64), dtype) for _ in range(2))
        with pytest.raises(ValueError, match=str(dtype)):
            fusions.fused_qk_rope_reshape_and_cache(**a)
        with pytest.raises(ValueError, match=str(dtype)):
            fusions.cat_and_cache_mla(torch.randn(2, 512, device=DEVICE), torch.randn(2, 64, device=DEVICE),
                                      _sentinel((8, 1, 576), dtype), torch.arange(2, device=DEVICE), None)


# ---------------------------------------------------------------------------
# cat_and_cache_mla


def _mla_inputs(b, kh, d1, d2, form, dtype):
    """k_nope / k_pe as MLA makes them. latent: [B, D1] and [B, D2], column views of the
    kv_a output (a padded row); shared: [B, KH, D1] and one k_pe head [B, 1, D2]; heads:
    [B, KH, D1] and [B, KH, D2]."""
    if form == "latent":
        kv = torch.randn(b, d1 + d2 + 40, device=DEVICE).to(dtype)
        return kv[:, :d1], kv[:, d1:d1 + d2]
    k_nope = torch.randn(b, kh, d1, device=DEVICE).to(dtype)
    return k_nope, torch.randn(b, 1 if form == "shared" else kh, d2, device=DEVICE).to(dtype)


def _check_mla(b, kh, d1, d2, form, cache_dtype, paged, scale, slots="padded", bs=16, dtype=None,
               index_dtype=torch.int64):
    _storable(cache_dtype)
    dtype = dtype or _io_dtype(cache_dtype)
    k_nope, k_pe = _mla_inputs(b, kh, d1, d2, form, dtype)
    nb = (b + 3) // bs + 2
    kv_cache = _sentinel((nb, bs, kh, d1 + d2) if paged else (nb * bs, kh, d1 + d2), cache_dtype)
    slot_mapping = _slot_mapping(b, nb * bs, slots, index_dtype)
    k_scale, _, apply = _scales(scale)
    before, before_in = kv_cache.clone(), (k_nope.clone(), k_pe.clone())
    ref_cache = kv_cache.clone()
    native.cat_and_cache_mla(k_nope, k_pe, ref_cache, slot_mapping, k_scale, apply)
    assert fusions.cat_and_cache_mla(k_nope, k_pe, kv_cache, slot_mapping, k_scale, apply) is None
    assert_bits("k_nope (an input)", k_nope, before_in[0])
    assert_bits("k_pe (an input)", k_pe, before_in[1])
    toks, s = _written(slot_mapping, b)
    kn = k_nope if k_nope.dim() == 3 else k_nope[:, None]
    kp = k_pe if k_pe.dim() == 3 else k_pe[:, None]
    kv = torch.cat([kn, kp.expand(b, kn.shape[1], d2)], -1)
    want = _cache_values(kv[toks], k_scale, apply, cache_dtype)
    index = _slot_index(s, bs, kh, d1 + d2, "flash" if paged else "flat")
    _assert_cache("reference kv_cache", ref_cache, before, index, want[0])
    _assert_cache("kv_cache", kv_cache, before, index, want)


@pytest.mark.parametrize("scale", SCALES)
@pytest.mark.parametrize("paged", [True, False])
@pytest.mark.parametrize("cache_dtype", CACHE_DTYPES, ids=str)
def test_mla_cache_dtypes(cache_dtype, paged, scale):
    """DeepSeek's latent cache: one head of 512 + 64, every cache dtype, paged or flat."""
    _check_mla(by_device(7, 1000), 1, 512, 64, "latent", cache_dtype, paged, scale)


# (tokens, kv heads, D1, D2, input form)
MLA_SHAPES = by_device(
    [(0, 1, 512, 64, "latent"), (1, 1, 512, 64, "shared"), (7, 2, 128, 64, "shared"), (5, 4, 32, 16, "heads"),
     (7, 3, 48, 24, "heads"), (512, 1, 64, 32, "latent")],
    [(b, kh, d1, d2, form) for b in (0, 1, 7, 512, 4096) for kh, d1, d2, form in
     ((1, 512, 64, "latent"), (1, 512, 64, "shared"), (8, 128, 64, "shared"), (16, 128, 64, "heads"),
      (3, 48, 24, "heads"))] + [(512, 128, 512, 64, "shared"), (64, 128, 512, 64, "heads")],
)


@pytest.mark.parametrize("bs", [16, 64])
@pytest.mark.parametrize("b,kh,d1,d2,form", MLA_SHAPES)
def test_mla_shapes(b, kh, d1, d2, form, bs):
    cache_dtype = (torch.bfloat16, torch.float8_e4m3fn)[(b + kh) % 2]
    if cache_dtype not in SUPPORTED:
        cache_dtype = torch.bfloat16
    _check_mla(b, kh, d1, d2, form, cache_dtype, paged=bs == 16 or b % 2 == 0, scale="scaled", bs=bs,
               index_dtype=torch.int32 if b % 2 else torch.int64)


@pytest.mark.parametrize("slots,index_dtype", PADDING, ids=str)
def test_mla_padding(slots, index_dtype):
    _check_mla(11, 1, 512, 64, "latent", torch.bfloat16, paged=index_dtype == torch.int64, scale="none",
               slots=slots, index_dtype=index_dtype)


@pytest.mark.parametrize("dtype,cache_dtype", [(torch.float32, torch.bfloat16), (torch.bfloat16, torch.float32),
                                               (torch.float16, torch.float8_e5m2)], ids=str)
def test_mla_cache_dtype_differs(dtype, cache_dtype):
    _check_mla(7, 2, 64, 32, "shared", cache_dtype, paged=True, scale="scaled", dtype=dtype)


@pytest.mark.parametrize("scaled", [True, False])
@pytest.mark.parametrize("cache_dtype", FP8, ids=str)
def test_mla_fp8_saturation(cache_dtype, scaled):
    _storable(cache_dtype)
    b, d1, d2 = 6, 64, 32
    mag = 100.0 if scaled else 1e6
    x = (torch.rand(b, d1 + d2, device=DEVICE) * mag + mag) * torch.where(
        torch.rand(b, d1 + d2, device=DEVICE) < 0.5, -1.0, 1.0)
    x = x.to(torch.bfloat16)
    kv_cache = _sentinel((b + 2, 1, d1 + d2), cache_dtype)
    slots = torch.randperm(b + 2, device=DEVICE)[:b]
    scale = torch.tensor([1e-4], device=DEVICE) if scaled else None
    fusions.cat_and_cache_mla(x[:, :d1], x[:, d1:], kv_cache, slots, scale)
    lo, hi = quant_range(cache_dtype)
    got = bits(kv_cache)[slots, 0].view(cache_dtype).float()
    assert torch.isfinite(got).all(), "NaN or inf from overflow"
    assert torch.equal(got, torch.where(x.float() > 0, hi, lo)), f"not saturated to +-{hi}"


def _bad_mla_calls():
    def t(*s):
        return torch.randn(*s, device=DEVICE).to(torch.bfloat16)

    return [
        (ValueError, "kv_cache", {"kv_cache": t(32, 576)}),     # rank 2
        (ValueError, "kv_cache", {"kv_cache": t(32, 1, 512)}),  # width != D1 + D2
        (ValueError, "kv_cache", {"kv_cache": t(32, 2, 576)}),  # heads != k_nope's
        (TypeError, "kv_cache", {"kv_cache": t(32, 1, 576).to(torch.int32)}),
        # k_pe of 3 heads for k_nope's 2
        (ValueError, "k_pe", {"k_nope": t(3, 2, 512), "k_pe": t(3, 3, 64), "kv_cache": t(32, 2, 576)}),
        (ValueError, "k_pe", {"k_pe": t(2, 64)}),                                                 # tokens differ
        (TypeError, "k_nope", {"k_nope": t(3, 512).to(torch.int32)}),
        (TypeError, "k_scale", {"k_scale": 2.0}),
        (ValueError, "k_scale", {"k_scale": torch.ones(2, device=DEVICE)}),
        (TypeError, "slot_mapping", {"slot_mapping": torch.arange(3, device=DEVICE).to(torch.int16)}),
        (TypeError, "slot_mapping", {"slot_mapping": [0, 1, 2]}),
        (ValueError, "slot_mapping", {"slot_mapping": torch.arange(4, device=DEVICE)}),           # B_slot > B
        (ValueError, "slot_mapping", {"slot_mapping": torch.tensor([0, 1, 32], device=DEVICE)}),  # beyond the cache
    ]


@pytest.mark.parametrize("case", range(len(_bad_mla_calls())))
def test_mla_bad_arguments(case, monkeypatch):
    if ON_GPU:
        monkeypatch.setenv("AITER_KV_CACHE_CHECK_SLOTS", "1")
    exc, name, change = _bad_mla_calls()[case]
    a = {"k_nope": torch.randn(3, 512, device=DEVICE).to(torch.bfloat16),
         "k_pe": torch.randn(3, 64, device=DEVICE).to(torch.bfloat16),
         "kv_cache": _sentinel((32, 1, 576), torch.bfloat16), "slot_mapping": torch.arange(3, device=DEVICE),
         "k_scale": None}
    a.update(change)
    with pytest.raises(exc, match=name):
        fusions.cat_and_cache_mla(**a)


# ---------------------------------------------------------------------------
# cat_and_cache_mla into aiter's preshuffled cache (shuffled_kv_cache=True)


def _unshuffle(cache: torch.Tensor, d1: int) -> torch.Tensor:
    """A preshuffled cache (nb, kh, bs, d) decoded to the plain (nb, bs, kh, d), independently of
    the op and its reference: each (block, head)'s plane read as the two parts aiter's
    ``shuffle_kv_buffer`` (op_tests/triton_tests/attention/test_mla.py) builds, each part's
    (bs / 16, width / E, 16, E) tiles permuted back to (bs, width), E = 16 bytes."""
    nb, kh, bs, d = cache.shape
    e = 16 // cache.element_size()
    plane = bits(cache).reshape(nb, kh, bs * d)
    parts = [plane[..., bs * lo:bs * hi].reshape(nb, kh, bs // 16, (hi - lo) // e, 16, e).permute(0, 1, 2, 4, 3, 5)
             .reshape(nb, kh, bs, hi - lo) for lo, hi in ((0, d1), (d1, d))]
    return torch.cat(parts, -1).permute(0, 2, 1, 3).contiguous().view(cache.dtype)


def _aiter_shuffle(plain: torch.Tensor, d1: int) -> torch.Tensor:
    """aiter's own reference of the layout, ``shuffle_kv_buffer`` (its MLA test, at e4048607), on a
    plain (nb, bs, kh, d) cache: lanes of 16 tokens, two groups of E-wide chunks (its d // 2E)."""
    nb, bs, kh, d = plain.shape
    e = 16 // plain.element_size()

    def shuffle(part):
        w = part.shape[-1]
        part = part.reshape(-1, kh, bs // 16, 16, w // (2 * e), 2, e).permute(0, 1, 2, 4, 5, 3, 6).contiguous()
        return part.view(-1, kh, bs * w)

    s = bits(plain).permute(0, 2, 1, 3)
    return torch.cat([shuffle(s[..., :d1]), shuffle(s[..., d1:])], -1).contiguous().view(nb, kh, bs, d) \
        .view(plain.dtype)


# (tokens, kv heads, D1, D2, input form, block size): DeepSeek's 512 + 64 latent in aiter's block of
# 64, narrower parts in blocks of 16, shared / per-head k_pe, no tokens, one token
SHUFFLED = by_device(
    [(37, 1, 512, 64, "latent", 64), (9, 2, 32, 16, "shared", 16), (0, 1, 512, 64, "latent", 16),
     (1, 3, 48, 16, "heads", 32)],
    [(b, kh, d1, d2, form, bs) for b in (0, 1, 7, 512, 4096) for kh, d1, d2, form in
     ((1, 512, 64, "latent"), (16, 128, 64, "heads"), (3, 48, 16, "shared")) for bs in (16, 64)],
)


@pytest.mark.parametrize("cache_dtype", (torch.bfloat16, torch.float16, *FP8), ids=str)
@pytest.mark.parametrize("b,kh,d1,d2,form,bs", SHUFFLED, ids=str)
def test_mla_shuffled(b, kh, d1, d2, form, bs, cache_dtype):
    """The Triton op and the reference write the same bits (fp8: the same values); decoded
    independently, exactly the tokens' slots hold their values, every other element its
    sentinel bits."""
    _storable(cache_dtype)
    if (d1 | d2) % (16 // cache_dtype.itemsize):
        pytest.skip("parts not made of 16-byte chunks of this dtype")
    k_nope, k_pe = _mla_inputs(b, kh, d1, d2, form, _io_dtype(cache_dtype))
    nb = (b + 3) // bs + 2
    kv_cache = _sentinel((nb, kh, bs, d1 + d2), cache_dtype)
    slot_mapping = _slot_mapping(b, nb * bs, "padded", torch.int64 if b % 2 else torch.int32)
    k_scale, _, apply = _scales("scaled" if cache_dtype in FP8 else "none")
    before = kv_cache.clone()
    ref_cache = kv_cache.clone()
    native.cat_and_cache_mla(k_nope, k_pe, ref_cache, slot_mapping, k_scale, apply, shuffled_kv_cache=True)
    assert fusions.cat_and_cache_mla(k_nope, k_pe, kv_cache, slot_mapping, k_scale, apply, True) is None
    toks, s = _written(slot_mapping, b)
    kn = k_nope if k_nope.dim() == 3 else k_nope[:, None]
    kp = k_pe if k_pe.dim() == 3 else k_pe[:, None]
    want = _cache_values(torch.cat([kn, kp.expand(b, kn.shape[1], d2)], -1)[toks], k_scale, apply, cache_dtype)
    index = _slot_index(s, bs, kh, d1 + d2, "flash")
    plain_before = _unshuffle(before, d1)
    _assert_cache("reference kv_cache, decoded", _unshuffle(ref_cache, d1), plain_before, index, want[0])
    _assert_cache("kv_cache, decoded", _unshuffle(kv_cache, d1), plain_before, index, want)
    if cache_dtype not in FP8 and (ON_GPU or cache_dtype != torch.bfloat16):
        assert_bits("kv_cache", kv_cache, ref_cache)


@pytest.mark.parametrize("cache_dtype", (torch.bfloat16, torch.float8_e4m3fn, torch.float8_e4m3fnuz), ids=str)
def test_mla_shuffled_is_aiters_layout(cache_dtype):
    """As aiter's test checks its kernel: a zeroed cache written at random slots equals aiter's
    shuffle of the plain cache holding the same values (DeepSeek's 512 + 64, blocks of 64)."""
    _storable(cache_dtype)
    t, kh, d1, d2, bs = by_device(40, 2048), 1, 512, 64, 64
    nb = by_device(2, 32)
    k_nope, k_pe = _mla_inputs(t, kh, d1, d2, "latent", torch.bfloat16)
    slot_mapping = torch.randperm(nb * bs, device=DEVICE)[:t]
    k_scale = torch.tensor([0.37], device=DEVICE) if cache_dtype in FP8 else None
    plain = torch.zeros(nb * bs, kh, d1 + d2, dtype=cache_dtype, device=DEVICE)
    fusions.cat_and_cache_mla(k_nope, k_pe, plain, slot_mapping, k_scale)
    shuffled = torch.zeros(nb, kh, bs, d1 + d2, dtype=cache_dtype, device=DEVICE)
    fusions.cat_and_cache_mla(k_nope, k_pe, shuffled, slot_mapping, k_scale, shuffled_kv_cache=True)
    assert_bits("kv_cache", shuffled, _aiter_shuffle(plain.view(nb, bs, kh, d1 + d2), d1))


def _bad_shuffled_calls():
    def t(*s, dtype=torch.bfloat16):
        return torch.zeros(*s, device=DEVICE, dtype=dtype)

    return [
        (ValueError, "not supported", {"kv_cache": t(2, 1, 16, 576, dtype=torch.float32)}),  # no 16-byte chunks
        (ValueError, "kv_cache must be", {"kv_cache": t(32, 1, 576)}),      # the plain flat layout
        (ValueError, "kv_cache must be", {"kv_cache": t(2, 16, 1, 576)}),   # the plain paged layout
        (ValueError, "block_size must be a multiple of 16", {"kv_cache": t(4, 1, 8, 576)}),
        (ValueError, "multiples of 8", {"k_nope": t(3, 500), "kv_cache": t(2, 1, 16, 564)}),
        (ValueError, "multiples of 8", {"k_pe": t(3, 60), "kv_cache": t(2, 1, 16, 572)}),
        (ValueError, "plane of each block and head must be contiguous", {"kv_cache": t(2, 1, 16, 600)[..., :576]}),
        (ValueError, "plane of each block and head must be contiguous",  # the plain paged cache, transposed
         {"k_nope": t(3, 2, 512), "k_pe": t(3, 1, 64), "kv_cache": t(2, 16, 2, 576).transpose(1, 2)}),
        (TypeError, "shuffled_kv_cache must be a bool", {"shuffled_kv_cache": "yes"}),
    ]


@pytest.mark.parametrize("case", range(len(_bad_shuffled_calls())))
def test_mla_shuffled_bad_arguments(case):
    exc, what, change = _bad_shuffled_calls()[case]
    a = {"k_nope": torch.randn(3, 512, device=DEVICE).to(torch.bfloat16),
         "k_pe": torch.randn(3, 64, device=DEVICE).to(torch.bfloat16),
         "kv_cache": torch.zeros(2, 1, 16, 576, device=DEVICE, dtype=torch.bfloat16),
         "slot_mapping": torch.arange(3, device=DEVICE), "k_scale": None, "shuffled_kv_cache": True}
    a.update(change)
    with pytest.raises(exc, match=f"cat_and_cache_mla: .*{what}"):
        fusions.cat_and_cache_mla(**a)


# ---------------------------------------------------------------------------
# kv_cache_write and convert_kv_cache (vLLM's cache writes: unrotated, divided by the scale)


@pytest.mark.parametrize("cache_dtype", [torch.bfloat16, torch.float32, *FP8])
@pytest.mark.parametrize("flash", [True, False])
@pytest.mark.parametrize("scaled", [False, True])
@pytest.mark.parametrize("t,kh,d,bs", [(0, 2, 16, 4), (1, 1, 16, 1), (9, 3, 48, 5)])
def test_kv_cache_write(cache_dtype, flash, scaled, t, kh, d, bs):
    _storable(cache_dtype)
    nb = 4
    _, k, v = torch.randn(t, 3, kh, d, device=DEVICE, dtype=torch.float16).unbind(1)
    slots = torch.randperm(nb * bs, device=DEVICE)[:max(t - 1, 0)]
    if slots.numel() > 1:
        slots[1] = -1
    x = 16 // cache_dtype.itemsize
    kshape, vshape = ((nb, bs, kh, d), (nb, bs, kh, d)) if flash else ((nb, kh, d // x, bs, x), (nb, kh, d, bs))
    kc, vc = _sentinel(kshape, cache_dtype), _sentinel(vshape, cache_dtype)
    ks, vs = (torch.tensor([0.37], device=DEVICE), torch.tensor([1.7], device=DEVICE)) if scaled else (None, None)
    want_k, want_v = kc.clone(), vc.clone()
    native.kv_cache_write(k, v, want_k, want_v, slots, ks, vs, flash)
    alts = (None, None)
    if cache_dtype == torch.bfloat16 and not ON_GPU:  # the interpreter truncates fp32 to bf16
        alts = kc.float(), vc.float()
        native.kv_cache_write(k, v, *alts, slots, ks, vs, flash)
        alts = tuple((a.view(torch.int32) & -65536).view(torch.float32).to(cache_dtype) for a in alts)
    assert fusions.kv_cache_write(k, v, kc, vc, slots, ks, vs, flash) is None
    for name, got, want, alt in (("key_cache", kc, want_k, alts[0]), ("value_cache", vc, want_v, alts[1])):
        if cache_dtype in FP8:  # +-0 alike (the interpreter's fp8 rounding drops the sign of zero)
            b = bits(want)
            alt = torch.where((b & 0x7F) == 0, torch.zeros_like(b), b).view(cache_dtype)
        assert_bits(name, got, want, alt)


# An fp8 destination's x / scale in multiplies and FMAs (Markstein's correction): scales in
# [2^-84, 2^126) directly, others scaled into [1, 2) first. Scales at both ends and just past
# them, subnormal ones, zero, inf and NaN, powers of 2 and significands of all ones; values at
# each fp8 rounding midpoint times the scale and the fp32 values either side of it, random
# quotients, fp32 subnormals, zeros of both signs, inf and NaN.
DIV_SCALES = [1.0, 0.05, 0.37, -0.5, 2.0**-84, 2.0**-84 * 0.75, 2.0**125 * 1.999, 2.0**126, -(2.0**127) * 1.5,
              2.0**-100 * 1.3, 2.0**-130, 3 * 2.0**-148, 7.0e-13, 0.0625 * (1 - 2**-24), 3.1e9, 0.0, float("inf"),
              float("nan")]


def _div_inputs(shape, scale, fmt):
    """fp32 values whose quotients by ``scale`` sit on and beside ``fmt``'s rounding midpoints,
    span its range, or are special."""
    n = torch.tensor(shape).prod().item()
    sc = abs(scale) if 0 < abs(scale) < float("inf") else 1.0  # zero, inf, NaN: unit-scale values
    q = torch.arange(256, dtype=torch.int32).to(torch.uint8).view(fmt).float()
    q = q[q.isfinite() & (q >= 0)].unique()
    mid = ((q[1:] + q[:-1]) / 2).to(DEVICE) * sc
    x = torch.cat([mid, mid.nextafter(mid + 1), mid.nextafter(mid - 1)])
    x = torch.cat([x, -x, torch.tensor([2**-130, -(2**-140), 0.0, -0.0, float("inf"), float("-inf"), float("nan")],
                                       device=DEVICE) * min(sc, 1.0)])[:n]
    rand = torch.randn(n - x.numel(), device=DEVICE) * torch.exp2(torch.randint(-12, 9, (n - x.numel(),), device=DEVICE))
    return torch.cat([x, rand * sc])[torch.randperm(n, device=DEVICE)].reshape(shape)


def _assert_quotients(name, got, want):
    """Bit for bit, NaN for NaN (any NaN's bits); fp8's +-0 alike on the interpreter (its fp8
    rounding drops the sign of zero)."""
    nan = want.float().isnan()
    assert torch.equal(got.float().isnan(), nan), f"{name}: NaN where there was none, or none for NaN"
    b = bits(want)
    alt = torch.where((b & 0x7F) == 0, torch.zeros_like(b), b).view(want.dtype) if want.dtype in FP8 else None
    assert_bits(name, torch.where(nan, b, bits(got)).view(want.dtype), want, alt)


@pytest.mark.parametrize("scale", DIV_SCALES)
@pytest.mark.parametrize("cache_dtype", [torch.float32, *FP8])
def test_kv_cache_write_divides_by_scale(scale, cache_dtype):
    """The division's fast path (a power-of-2 scale) and its general path, bit for bit against
    fp32 division, through kv_cache_write's runtime scale and convert_kv_cache's float."""
    _storable(cache_dtype)
    t, kh, d, bs = 40, 2, 32, 8
    fmt = cache_dtype if cache_dtype in FP8 else torch.float8_e4m3fn
    k, v = _div_inputs((t, kh, d), scale, fmt), _div_inputs((t, kh, d), scale, fmt)
    slots = torch.randperm(5 * bs, device=DEVICE)[:t]
    kc, vc = _sentinel((5, bs, kh, d), cache_dtype), _sentinel((5, bs, kh, d), cache_dtype)
    s = torch.tensor([scale], device=DEVICE)
    want_k, want_v = kc.clone(), vc.clone()
    native.kv_cache_write(k, v, want_k, want_v, slots, s, s, True)
    fusions.kv_cache_write(k, v, kc, vc, slots, s, s, True)
    got = [("key_cache", kc, want_k), ("value_cache", vc, want_v)]
    if cache_dtype in FP8 and 0 < scale < float("inf"):  # convert_kv_cache takes positive finite scales only
        q, want_q = _sentinel(k.shape, cache_dtype), _sentinel(k.shape, cache_dtype)
        native.convert_kv_cache(want_q, k, scale)
        fusions.convert_kv_cache(q, k, scale)
        got.append(("converted", q, want_q))
    for name, g, want in got:
        _assert_quotients(name, g, want)


@pytest.mark.parametrize("fp8", FP8)
def test_convert_kv_cache_every_bf16(fp8):
    """Every bf16 value (NaN, inf, subnormals, both zeros) divided by fresh scales across
    [2^-70, 2^70], each into fp8 bit for bit as fp32 division and saturation give."""
    _storable(fp8)
    x = torch.arange(-(2**15), 2**15, dtype=torch.int32).to(torch.int16).view(torch.bfloat16).to(DEVICE).reshape(64, 1024)
    for scale in torch.exp2(torch.rand(6) * 140 - 70).tolist():
        q, want = _sentinel(x.shape, fp8), _sentinel(x.shape, fp8)
        native.convert_kv_cache(want, x, scale)
        fusions.convert_kv_cache(q, x, scale)
        _assert_quotients(f"scale {scale!r}", q, want)


@pytest.mark.parametrize("fp8", FP8)
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
def test_convert_kv_cache(fp8, dtype):
    _storable(fp8)
    hi = quant_range(fp8)[1]
    x = ((torch.rand(3, 4, 2, 24, device=DEVICE) * 2 - 1) * hi * 0.7).to(dtype)
    q, want = _poisoned(x.shape, torch.float32).to(fp8), torch.empty(x.shape, device=DEVICE, dtype=fp8)
    native.convert_kv_cache(want, x, 0.5)
    assert fusions.convert_kv_cache(q, x, 0.5) is None
    b = bits(want)
    assert_bits("quantized", q, want, torch.where((b & 0x7F) == 0, torch.zeros_like(b), b).view(fp8))
    back, want_back = _poisoned(x.shape, dtype), _poisoned(x.shape, dtype)
    native.convert_kv_cache(want_back, q, 0.5)
    fusions.convert_kv_cache(back, q, 0.5)
    if dtype == torch.bfloat16 and not ON_GPU:  # the interpreter truncates fp32 to bf16
        exact = q.float() * 0.5
        assert_bits("dequantized", back, want_back, (exact.view(torch.int32) & -65536).view(torch.float32).to(dtype))
    else:
        assert_bits("dequantized", back, want_back)
