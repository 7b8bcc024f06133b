"""aiter_lite.vllm.ops' KV-cache ops against references written from vLLM's semantics (its
tests/kernels/attention/test_cache.py: a per-token loop writing each token at its block and
offset; fp8 as vLLM's kernels convert, ``x / scale`` in fp32, saturated).

* Every cache starts as random bytes: exactly the addressed slots change, bit for bit.
* fp8 caches are uint8 tensors, as vLLM allocates them (and fp8 tensors of the format).
* key / value are views of a qkv tensor, as vLLM passes them.
"""

from __future__ import annotations

import pytest
import torch

from aiter_lite.ops.triton.quant import supported_quant_dtypes
from aiter_lite.spec.quant import get_fp8_e4m3_dtype, quant_range
from aiter_lite.vllm import ops
from op_tests.utils import DEVICE, ON_GPU
from op_tests.utils.fusions import assert_bits, bits, sentinel

KV_CACHE_DTYPES = ("auto", "fp8", "fp8_e4m3", "fp8_e5m2")
IN_DTYPES = (torch.bfloat16, torch.float16, torch.float32)
SUPPORTED = supported_quant_dtypes(DEVICE)


def _fmt(kv_cache_dtype: str, dtype: torch.dtype) -> torch.dtype:
    """The dtype a cache holds: the inputs' with "auto", else the fp8 format named."""
    if kv_cache_dtype == "auto":
        return dtype
    fmt = torch.float8_e5m2 if kv_cache_dtype == "fp8_e5m2" else get_fp8_e4m3_dtype(DEVICE)
    if fmt not in SUPPORTED:
        pytest.skip(f"{fmt} cannot be stored on this device")
    return fmt


def _cache(shape, kv_cache_dtype: str, dtype: torch.dtype) -> torch.Tensor:
    """Random bytes, uint8 for an fp8 cache (vLLM's allocation)."""
    fmt = _fmt(kv_cache_dtype, dtype)
    c = sentinel(shape, fmt, DEVICE)
    return c.view(torch.uint8) if kv_cache_dtype != "auto" else c


def _to_cache(x: torch.Tensor, scale: torch.Tensor, kv_cache_dtype: str, fmt: torch.dtype) -> torch.Tensor:
    """vLLM's value of ``x`` in the cache: as it is with "auto", else fp32 ``x / scale`` saturated."""
    if kv_cache_dtype == "auto":
        return x.to(fmt)
    return (x.float() / scale.float()).clamp(*quant_range(fmt)).to(fmt)


def _assert_cache(name: str, got: torch.Tensor, want: torch.Tensor) -> None:
    """Bit for bit; an fp8 zero may carry either sign (the interpreter's fp8 rounding drops it)."""
    alt = None
    if got.dtype == torch.uint8:
        b = bits(want)
        alt = torch.where((b & 0x7F) == 0, torch.zeros_like(b), b)
    assert_bits(name, got, want, alt)


def _qkv(t: int, heads: int, d: int, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """key and value as vLLM passes them: views of one (T, 3, heads, d) qkv tensor."""
    qkv = torch.randn(t, 3, heads, d, device=DEVICE, dtype=dtype)
    _, key, value = qkv.unbind(dim=1)
    return key, value


def _slots(t: int, n_slots: int, padded: bool, short: int = 0) -> torch.Tensor:
    """Distinct random slots for the first t - short tokens; every third one -1 where ``padded``."""
    n = t - short
    s = torch.randperm(n_slots)[:n]
    if padded:
        s[::3] = -1
    return s.to(DEVICE)


def _scale(kv_cache_dtype: str, x: torch.Tensor) -> torch.Tensor:
    """vLLM's test scale: amax / 64 (an arbitrary, not a power of two, value)."""
    return (x.float().abs().amax() / 64.0 + 0.013).to(torch.float32).reshape(()) if x.numel() else \
        torch.tensor(0.37, device=DEVICE)


# ---------------------------------------------------------------------------
# reshape_and_cache_flash


FLASH_SHAPES = [  # tokens, heads, head_size, block_size, num_blocks
    (0, 2, 16, 4, 3), (1, 1, 8, 1, 2), (7, 3, 40, 5, 4), (19, 2, 80, 16, 3),
]


@pytest.mark.parametrize("kv_cache_dtype", KV_CACHE_DTYPES)
@pytest.mark.parametrize("dtype", IN_DTYPES)
@pytest.mark.parametrize("layout", ["NHD", "HND"])
@pytest.mark.parametrize("shape", FLASH_SHAPES)
@pytest.mark.parametrize("padded", [False, True])
def test_reshape_and_cache_flash(kv_cache_dtype, dtype, layout, shape, padded):
    t, heads, d, bs, nb = shape
    key, value = _qkv(t, heads, d, dtype)
    slot_mapping = _slots(t, nb * bs, padded, short=1 if t > 1 else 0)  # a CUDA-graph padded tail
    fmt = _fmt(kv_cache_dtype, dtype)
    if layout == "NHD":
        key_cache = _cache((nb, bs, heads, d), kv_cache_dtype, dtype)
        value_cache = _cache((nb, bs, heads, d), kv_cache_dtype, dtype)
    else:  # vLLM's HND caches: [nb, heads, bs, d] in memory, passed as the permuted view
        key_cache = _cache((nb, heads, bs, d), kv_cache_dtype, dtype).permute(0, 2, 1, 3)
        value_cache = _cache((nb, heads, bs, d), kv_cache_dtype, dtype).permute(0, 2, 1, 3)
    k_scale, v_scale = _scale(kv_cache_dtype, key), _scale(kv_cache_dtype, value)
    want_k, want_v = key_cache.clone(), value_cache.clone()
    for i, slot in enumerate(slot_mapping.tolist()):
        if slot < 0:
            continue
        blk, off = divmod(slot, bs)
        want_k.view(fmt)[blk, off] = _to_cache(key[i], k_scale, kv_cache_dtype, fmt)
        want_v.view(fmt)[blk, off] = _to_cache(value[i], v_scale, kv_cache_dtype, fmt)
    assert ops.reshape_and_cache_flash(key, value, key_cache, value_cache, slot_mapping, kv_cache_dtype,
                                       k_scale, v_scale) is None
    _assert_cache("key_cache", key_cache, want_k)
    _assert_cache("value_cache", value_cache, want_v)


def test_reshape_and_cache_flash_fp8_tensor_cache():
    """A cache already of the fp8 dtype (not uint8) is written the same way."""
    fmt = _fmt("fp8_e5m2", torch.float16)
    key, value = _qkv(6, 2, 24, torch.float16)
    slot_mapping = _slots(6, 12, True)
    kc8, vc8 = _cache((3, 4, 2, 24), "fp8_e5m2", torch.float16), _cache((3, 4, 2, 24), "fp8_e5m2", torch.float16)
    kc, vc = kc8.clone().view(fmt), vc8.clone().view(fmt)
    s = torch.tensor(0.25, device=DEVICE)
    ops.reshape_and_cache_flash(key, value, kc8, vc8, slot_mapping, "fp8_e5m2", s, s)
    ops.reshape_and_cache_flash(key, value, kc, vc, slot_mapping, "fp8_e5m2", s, s)
    assert_bits("key_cache", kc.view(torch.uint8), kc8)
    assert_bits("value_cache", vc.view(torch.uint8), vc8)


@pytest.mark.parametrize("kv_cache_dtype", ["fp8", "fp8_e5m2"])
def test_fp8_saturation(kv_cache_dtype):
    """Values far past the format's range store +-max, never inf or NaN (vLLM's SATFINITE)."""
    fmt = _fmt(kv_cache_dtype, torch.float32)
    key, value = _qkv(4, 1, 16, torch.float32)
    key, value = key.sign() * (key.abs() + 1) * 1e6, value.sign() * (value.abs() + 1) * -1e6
    kc, vc = _cache((2, 2, 1, 16), kv_cache_dtype, torch.float32), _cache((2, 2, 1, 16), kv_cache_dtype,
                                                                         torch.float32)
    s = torch.tensor(1.0, device=DEVICE)
    ops.reshape_and_cache_flash(key, value, kc, vc, torch.arange(4, device=DEVICE), kv_cache_dtype, s, s)
    hi = quant_range(fmt)[1]
    for name, c, x in (("key_cache", kc, key), ("value_cache", vc, value)):
        got = c.view(fmt).float().reshape(4, 1, 16)
        assert torch.isfinite(got).all(), f"{name}: inf or NaN from overflow"
        torch.testing.assert_close(got, (x.sign() * hi).float(), msg=name)


# ---------------------------------------------------------------------------
# reshape_and_cache (classic layout)


@pytest.mark.parametrize("kv_cache_dtype", KV_CACHE_DTYPES)
@pytest.mark.parametrize("dtype", IN_DTYPES)
@pytest.mark.parametrize("shape", [(0, 2, 3, 4, 3), (1, 1, 1, 1, 2), (9, 3, 5, 5, 4), (21, 2, 2, 16, 3)])
@pytest.mark.parametrize("padded", [False, True])
def test_reshape_and_cache(kv_cache_dtype, dtype, shape, padded):
    t, heads, chunks, bs, nb = shape  # head_size = chunks * x, x = 16 bytes of the cache's dtype (vLLM's)
    fmt = _fmt(kv_cache_dtype, dtype)
    x = 16 // fmt.itemsize
    d = chunks * x
    key, value = _qkv(t, heads, d, dtype)
    slot_mapping = _slots(t, nb * bs, padded)
    key_cache = _cache((nb, heads, d // x, bs, x), kv_cache_dtype, dtype)
    value_cache = _cache((nb, heads, d, bs), kv_cache_dtype, dtype)
    k_scale, v_scale = _scale(kv_cache_dtype, key), _scale(kv_cache_dtype, value)
    want_k, want_v = key_cache.clone(), value_cache.clone()
    for i, slot in enumerate(slot_mapping.tolist()):
        if slot < 0:
            continue
        blk, off = divmod(slot, bs)
        want_k.view(fmt)[blk, :, :, off, :] = _to_cache(key[i], k_scale, kv_cache_dtype, fmt).reshape(heads, d // x, x)
        want_v.view(fmt)[blk, :, :, off] = _to_cache(value[i], v_scale, kv_cache_dtype, fmt)
    assert ops.reshape_and_cache(key, value, key_cache, value_cache, slot_mapping, kv_cache_dtype,
                                 k_scale, v_scale) is None
    _assert_cache("key_cache", key_cache, want_k)
    _assert_cache("value_cache", value_cache, want_v)


# ---------------------------------------------------------------------------
# concat_and_cache_mla


@pytest.mark.parametrize("kv_cache_dtype", KV_CACHE_DTYPES)
@pytest.mark.parametrize("dtype", IN_DTYPES)
@pytest.mark.parametrize("shape", [(0, 16, 8, 4, 2), (1, 8, 4, 1, 2), (11, 40, 8, 5, 4), (23, 64, 16, 16, 2)])
@pytest.mark.parametrize("padded", [False, True])
def test_concat_and_cache_mla(kv_cache_dtype, dtype, shape, padded):
    t, rank, pe, bs, nb = shape
    fmt = _fmt(kv_cache_dtype, dtype)
    kv_c = torch.randn(t, rank + 3, device=DEVICE, dtype=dtype)[:, :rank]  # strided rows
    k_pe = torch.randn(t, 2, pe, device=DEVICE, dtype=dtype)[:, 1]
    slot_mapping = _slots(t, nb * bs, padded, short=1 if t > 1 else 0)
    kv_cache = _cache((nb, bs, rank + pe), kv_cache_dtype, dtype)
    scale = torch.tensor(0.1, dtype=torch.float32, device=DEVICE)
    want = kv_cache.clone()
    for i, slot in enumerate(slot_mapping.tolist()):
        if slot < 0:
            continue
        blk, off = divmod(slot, bs)
        want.view(fmt)[blk, off] = _to_cache(torch.cat([kv_c[i], k_pe[i]]), scale, kv_cache_dtype, fmt)
    assert ops.concat_and_cache_mla(kv_c, k_pe, kv_cache, slot_mapping, kv_cache_dtype, scale) is None
    _assert_cache("kv_cache", kv_cache, want)


# ---------------------------------------------------------------------------
# convert_fp8


@pytest.mark.parametrize("kv_dtype", ["fp8", "fp8_e4m3", "fp8_e5m2"])
@pytest.mark.parametrize("dtype", IN_DTYPES)
@pytest.mark.parametrize("scale", [1.0, 0.37])
@pytest.mark.parametrize("shape", [(0, 4), (1, 1, 3), (5, 3, 7, 6)])
def test_convert_fp8(kv_dtype, dtype, scale, shape):
    """vLLM's round trip (test_fp8_e4m3_conversion), each direction against its formula."""
    fmt = _fmt(kv_dtype, dtype)
    hi = quant_range(fmt)[1]
    cache = (torch.rand(shape, device=DEVICE) * 2 - 1).mul(hi * scale * 1.2).to(dtype)  # some saturate
    cache_fp8 = sentinel(shape, torch.uint8, DEVICE)
    assert ops.convert_fp8(cache_fp8, cache, scale, kv_dtype) is None
    want = (cache.float() / torch.tensor(scale, device=DEVICE)).clamp(-hi, hi).to(fmt)  # CUDA: true division
    _assert_cache("quantized", cache_fp8, want.view(torch.uint8))
    back = torch.full(shape, float("nan"), device=DEVICE, dtype=dtype)
    assert ops.convert_fp8(back, cache_fp8, scale, kv_dtype) is None
    exact = cache_fp8.view(fmt).float() * torch.tensor(scale)
    alt = None
    if dtype == torch.bfloat16 and not ON_GPU:  # the interpreter truncates fp32 to bf16
        alt = (exact.view(torch.int32) & -65536).view(torch.float32).to(dtype)
    assert_bits("dequantized", back, exact.to(dtype), alt)
    if back.numel():
        ok = cache.float().abs() <= hi * scale
        torch.testing.assert_close(back.float()[ok], cache.float()[ok], atol=1e-3, rtol=0.15)


def test_convert_fp8_default_arguments():
    """vLLM's defaults: scale 1.0, kv_dtype "fp8" (the device's e4m3)."""
    fmt = _fmt("fp8", torch.float32)
    cache = torch.randn(3, 5, 4, device=DEVICE) * 10
    q = torch.empty(3, 5, 4, dtype=torch.uint8, device=DEVICE)
    ops.convert_fp8(q, cache)
    _assert_cache("quantized", q, cache.clamp(*quant_range(fmt)).to(fmt).view(torch.uint8))


# ---------------------------------------------------------------------------
# bad input


def _flash_args(**over):
    key, value = _qkv(3, 2, 8, torch.float16)
    args = dict(key=key, value=value, key_cache=torch.zeros(2, 4, 2, 8, dtype=torch.uint8, device=DEVICE),
                value_cache=torch.zeros(2, 4, 2, 8, dtype=torch.uint8, device=DEVICE),
                slot_mapping=torch.tensor([0, 3, 5], device=DEVICE), kv_cache_dtype="fp8",
                k_scale=torch.tensor(1.0, device=DEVICE), v_scale=torch.tensor(1.0, device=DEVICE))
    args.update(over)
    return args


BAD_FLASH = [
    (dict(kv_cache_dtype="fp8_ds_mla"), ValueError, "kv_cache_dtype must be one of"),
    (dict(kv_cache_dtype=8), TypeError, "kv_cache_dtype must be a str"),
    (dict(kv_cache_dtype="auto"), TypeError, "key_cache must have key's dtype"),
    (dict(key_cache=torch.zeros(2, 4, 2, 8, dtype=torch.bfloat16, device=DEVICE)), TypeError,
     "key_cache must be uint8"),
    (dict(key_cache=torch.zeros(2, 4, 2, 9, dtype=torch.uint8, device=DEVICE)), ValueError, "key_cache must be"),
    (dict(k_scale=None), TypeError, "k_scale must be a one-element"),
    (dict(v_scale=torch.ones(2, device=DEVICE)), ValueError, "v_scale must have one element"),
    (dict(slot_mapping=torch.tensor([0.0, 1.0, 2.0], device=DEVICE)), TypeError, "slot_mapping must be int32"),
    (dict(slot_mapping=torch.tensor([0, 1, 2, 3], device=DEVICE)), ValueError, "slot_mapping has 4 entries"),
    (dict(key="key"), TypeError, "key must be"),
    (dict(value=torch.zeros(3, 2, 4, dtype=torch.float16, device=DEVICE)), ValueError, "value must have key's shape"),
    (dict(value=torch.zeros(3, 2, 8, dtype=torch.float32, device=DEVICE)), TypeError, "value must have key's dtype"),
]


@pytest.mark.parametrize("over,exc,msg", BAD_FLASH)
def test_reshape_and_cache_flash_bad_arguments(over, exc, msg):
    _fmt("fp8", torch.float16)
    with pytest.raises(exc, match=f"reshape_and_cache_flash: {msg}"):
        ops.reshape_and_cache_flash(**_flash_args(**over))


def test_slot_past_the_cache_raises():
    if ON_GPU:
        pytest.skip("slot_mapping on the GPU is checked with AITER_KV_CACHE_CHECK_SLOTS=1 only")
    _fmt("fp8", torch.float16)
    with pytest.raises(ValueError, match="reshape_and_cache_flash: slot_mapping must hold slots below the cache's 8"):
        ops.reshape_and_cache_flash(**_flash_args(slot_mapping=torch.tensor([0, 8, 1], device=DEVICE)))


def test_reshape_and_cache_bad_arguments():
    key, value = _qkv(2, 2, 16, torch.float16)
    kc = torch.zeros(2, 2, 2, 4, 8, dtype=torch.float16, device=DEVICE)
    vc = torch.zeros(2, 2, 16, 4, dtype=torch.float16, device=DEVICE)
    s = torch.tensor([0, 1], device=DEVICE)
    with pytest.raises(ValueError, match="reshape_and_cache: value_cache must be"):
        ops.reshape_and_cache(key, value, kc, vc[..., :3], s, "auto", None, None)
    with pytest.raises(ValueError, match="reshape_and_cache: key_cache must be"):
        ops.reshape_and_cache(key, value, kc[..., :4], vc, s, "auto", None, None)
    with pytest.raises(TypeError, match="reshape_and_cache: key_cache must have key's dtype"):
        ops.reshape_and_cache(key, value, kc.float(), vc, s, "auto", None, None)
    with pytest.raises(ValueError, match="reshape_and_cache: key requires grad"):
        ops.reshape_and_cache(key.detach().clone().requires_grad_(), value, kc, vc, s, "auto", None, None)


def test_concat_and_cache_mla_bad_arguments():
    kv_c = torch.randn(3, 16, device=DEVICE)
    k_pe = torch.randn(3, 8, device=DEVICE)
    cache = torch.zeros(2, 4, 24, device=DEVICE)
    s = torch.tensor([0, 1, 2], device=DEVICE)
    one = torch.tensor(1.0, device=DEVICE)
    with pytest.raises(ValueError, match="concat_and_cache_mla: kv_cache must be \\(num_blocks, block_size, 24\\)"):
        ops.concat_and_cache_mla(kv_c, k_pe, cache[..., :20], s, "auto", one)
    with pytest.raises(ValueError, match="concat_and_cache_mla: kv_c must be 2-D"):
        ops.concat_and_cache_mla(kv_c[:, None], k_pe, cache, s, "auto", one)
    with pytest.raises(TypeError, match="concat_and_cache_mla: k_pe must have kv_c's dtype"):
        ops.concat_and_cache_mla(kv_c, k_pe.half(), cache, s, "auto", one)
    with pytest.raises(ValueError, match="concat_and_cache_mla: k_pe must have kv_c's 3 tokens"):
        ops.concat_and_cache_mla(kv_c, k_pe[:2], cache, s, "auto", one)
    with pytest.raises(ValueError, match="concat_and_cache_mla: kv_cache_dtype must be one of"):
        ops.concat_and_cache_mla(kv_c, k_pe, cache.to(torch.uint8), s, "fp8_ds_mla", one)
    with pytest.raises(TypeError, match="concat_and_cache_mla: scale must be a one-element"):
        ops.concat_and_cache_mla(kv_c, k_pe, cache.to(torch.uint8), s, "fp8", 0.5)
    with pytest.raises(TypeError, match="concat_and_cache_mla: kv_cache must have kv_c's dtype"):
        ops.concat_and_cache_mla(kv_c, k_pe, cache.to(torch.uint8), s, "auto", one)


def test_convert_fp8_bad_arguments():
    x = torch.randn(2, 8, device=DEVICE)
    q = torch.zeros(2, 8, dtype=torch.uint8, device=DEVICE)
    with pytest.raises(ValueError, match="convert_fp8: kv_dtype must name an fp8 format"):
        ops.convert_fp8(q, x, 1.0, "auto")
    with pytest.raises(ValueError, match="convert_fp8: kv_dtype must be one of"):
        ops.convert_fp8(q, x, 1.0, "int8")
    with pytest.raises(ValueError, match="convert_fp8: output must have input's shape"):
        ops.convert_fp8(q[:, :4], x)
    with pytest.raises(TypeError, match="convert_fp8: output must be uint8 \\(vLLM's fp8 cache\\) or"):
        ops.convert_fp8(torch.zeros_like(x), x)
    with pytest.raises(TypeError, match="convert_fp8: input must be uint8"):
        ops.convert_fp8(torch.zeros_like(x), x.to(torch.int32))
    with pytest.raises(ValueError, match="convert_fp8: scale must be finite and positive"):
        ops.convert_fp8(q, x, 0.0)
    with pytest.raises(TypeError, match="convert_fp8: scale must be a float"):
        ops.convert_fp8(q, x, torch.tensor(1.0))
    with pytest.raises(ValueError, match="convert_fp8: output's elements after its first dim must be contiguous"):
        ops.convert_fp8(q.t(), x.t())
