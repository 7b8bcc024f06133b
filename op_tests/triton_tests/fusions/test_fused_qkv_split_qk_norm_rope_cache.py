"""fused_qkv_split_qk_norm_rope_cache (aiter_lite.ops.triton.fusions) against the fp32
reference (aiter_lite.ops.native.fusions.fused_qkv_split_qk_norm_rope_cache).

q, k (and the gate) within one rounding of the reference, v and the gate bit for bit; the
caches start as random finite bytes, so every slot the tokens do not address keeps its
bits and every addressed one holds the reference's value; outputs start as NaN, so an
element the op does not write fails; qkv is left alone.
"""

from __future__ import annotations


import pytest
import torch

from aiter_lite.ops.native import fusions as native
from aiter_lite.ops.triton import fusions
from aiter_lite.ops.triton.fusions.fused_qkv_split_qk_norm_rope_cache import infer_rope_cache_triton_block_t
from aiter_lite.ops.triton.rope.rope import RopeLaunchConfig
from aiter_lite.ops.triton.quant import supported_quant_dtypes
from op_tests.utils import DEVICE, ON_GPU, assert_close, by_device
from op_tests.utils.fusions import FP8, assert_bits, sentinel, tol
from op_tests.utils.rope import angles

OP = "fused_qkv_split_qk_norm_rope_cache"
ROWS = 64
SUPPORTED = supported_quant_dtypes(DEVICE)


def _sentinel(shape, dtype) -> torch.Tensor:
    return sentinel(shape, dtype, DEVICE)


def _args(t=5, qh=4, kvh=2, d=64, *, dtype=torch.bfloat16, cache_dtype=None, layout="HND", bs=16, gated=False,
          gate_layout="interleaved", width=0, reuse=True, is_neox=True, offsets=False, scales=False, pad=0,
          n_slots=None):
    """Valid arguments of one call (keywords): qkv with ``pad`` columns past each row, a
    cache with room for every token, each token at a distinct random slot."""
    cache_dtype = cache_dtype or dtype
    w = (qh * (2 if gated else 1) + 2 * kvh) * d
    qkv = torch.randn(t, w + pad, device=DEVICE).to(dtype)[:, :w]
    width = width or (d // 2 if reuse else d)
    a = angles(ROWS, width)
    nb = (t + bs - 1) // bs + 2
    shape = (nb, kvh, bs, d) if layout.upper() == "HND" else (nb, bs, kvh, d)
    slots = torch.randperm(nb * bs, device=DEVICE)[:t]
    if n_slots is not None:
        slots = slots[:n_slots]
    return dict(
        qkv=qkv, q_weight=(0.5 * torch.randn(d, device=DEVICE)).to(dtype),
        k_weight=(0.5 * torch.randn(d, device=DEVICE)).to(dtype), cos=torch.cos(a).float(), sin=torch.sin(a).float(),
        positions=torch.randint(0, ROWS // 2, (t,), device=DEVICE), key_cache=_sentinel(shape, cache_dtype),
        value_cache=_sentinel(shape, cache_dtype), slot_mapping=slots, qh=qh, kvh=kvh, head_dim=d, is_neox=is_neox,
        offsets=torch.randint(0, ROWS // 2, (t,), device=DEVICE) if offsets else None,
        reuse_freqs_front_part=reuse, attn_output_gate=gated,
        k_scale=torch.tensor([0.75], device=DEVICE) if scales else None,
        v_scale=torch.tensor([1.5], device=DEVICE) if scales else None, eps=1e-6,
        gated_qkv_layout=gate_layout, kv_cache_layout=layout)


def _check(a: dict) -> tuple:
    """One call against the reference: outputs, both caches whole, qkv untouched."""
    want_caches = (a["key_cache"].clone(), a["value_cache"].clone())
    before = a["qkv"].clone()
    got = fusions.fused_qkv_split_qk_norm_rope_cache(**a)
    ref = native.fused_qkv_split_qk_norm_rope_cache(**{**a, "key_cache": want_caches[0],
                                                          "value_cache": want_caches[1]})
    t, qh, kvh, d = a["qkv"].shape[0], a["qh"], a["kvh"], a["head_dim"]
    names = ("q", "gate", "k", "v") if a["attn_output_gate"] else ("q", "k", "v")
    assert len(got) == len(names)
    for name, x, r in zip(names, got, ref):
        h = kvh if name in ("k", "v") else qh
        assert x.shape == (t, h, d) and x.dtype == a["qkv"].dtype and x.is_contiguous(), \
            f"{name}: {tuple(x.shape)} {x.dtype}"
        if name in ("v", "gate"):
            assert_bits(name, x, r)
        else:
            assert_close(x, r, name=f"{name} vs reference", **tol(x.dtype))
    cdt = a["key_cache"].dtype
    for name, c, w in (("key_cache", a["key_cache"], want_caches[0]), ("value_cache", a["value_cache"],
                                                                        want_caches[1])):
        # Within one step of the coarser of qkv's dtype and the cache's: the normalized values
        # are rounded to qkv's dtype, where the kernel's rsqrt may round the other way.
        if cdt in FP8:
            step = 2.0 ** -(3 if torch.finfo(cdt).max < 1000 else 2)
            diff = (c.float() - w.float()).abs()
            # plus the input's rounding, which a nearly cancelling rotation leaves as an
            # absolute error of the largest value's size
            floor = 4 * torch.finfo(a["qkv"].dtype).eps * float(w.float().abs().max())
            assert (diff <= step * w.float().abs() * 1.01 + floor).all(), \
                f"{name}: off by up to {float(diff.max())}"
        else:
            coarse = max(cdt, a["qkv"].dtype, key=lambda d: torch.finfo(d).eps)
            assert_close(c, w, name=name, **tol(coarse))
    untouched = torch.ones(a["key_cache"].shape[:-1], dtype=torch.bool, device=DEVICE)
    _, slots = _written(a)
    hnd = a["kv_cache_layout"].upper() == "HND"
    bs = a["key_cache"].shape[2 if hnd else 1]
    if hnd:
        untouched[slots // bs, :, slots % bs] = False
    else:
        untouched[slots // bs, slots % bs] = False
    assert_bits("key_cache (unaddressed slots)", a["key_cache"][untouched], want_caches[0][untouched])
    assert_bits("qkv (the input)", a["qkv"], before)
    return got


def _written(a):
    s = a["slot_mapping"].long()
    t = torch.nonzero(s >= 0).flatten()
    return t, s[t]


# (tokens, q heads, kv heads, head dim, is_neox): GQA 1 to 8, decode and prefill, head dims
# 64, 128 and ones that are not powers of 2
SHAPES = by_device(
    [(0, 4, 2, 64, True), (1, 8, 1, 128, False), (7, 4, 4, 64, False), (3, 8, 2, 96, True), (33, 2, 1, 80, True)],
    [(t, qh, kvh, d, nx) for t in (0, 1, 7, 128, 2048) for qh, kvh in ((4, 4), (16, 2), (32, 8), (64, 4))
     for d in (64, 80, 128, 256) for nx in (True, False)],
)


@pytest.mark.parametrize("t,qh,kvh,d,is_neox", SHAPES)
@pytest.mark.parametrize("layout", ["HND", "nhd"])
def test_shapes(t, qh, kvh, d, is_neox, layout):
    _check(_args(t, qh, kvh, d, is_neox=is_neox, layout=layout))


@pytest.mark.parametrize("gate_layout", ["interleaved", "blocked"])
@pytest.mark.parametrize("t,qh,kvh", [(1, 4, 2), (9, 8, 1)])
def test_attn_output_gate(gate_layout, t, qh, kvh):
    a = _args(t, qh, kvh, 64, gated=True, gate_layout=gate_layout)
    q, gate, k, v = _check(a)
    d, x = 64, a["qkv"]  # the gates' place in qkv, independently of the reference
    if gate_layout == "interleaved":
        want = x[:, :2 * qh * d].reshape(t, qh, 2, d)[:, :, 1]
    else:
        want = x[:, qh * d:2 * qh * d].reshape(t, qh, d)
    assert_bits("gate", gate, want.contiguous())


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
@pytest.mark.parametrize("cache_dtype", [None, torch.float32, *FP8])
@pytest.mark.parametrize("scales", [False, True])
def test_cache_dtypes(dtype, cache_dtype, scales):
    if cache_dtype in FP8 and cache_dtype not in SUPPORTED:
        pytest.skip(f"{cache_dtype} cannot be stored on this device")
    _check(_args(6, 4, 2, 64, dtype=dtype, cache_dtype=cache_dtype, scales=scales))


@pytest.mark.parametrize("width,reuse", [(16, True), (32, False), (8, True), (24, False)])
@pytest.mark.parametrize("is_neox", [True, False])
def test_partial_rotary(width, reuse, is_neox):
    """A rotary part narrower than the head (aiter's partial rotary): the channels past it
    are normalized and passed through."""
    _check(_args(5, 4, 2, 64, width=width, reuse=reuse, is_neox=is_neox))


@pytest.mark.parametrize("offsets", [False, True])
def test_offsets_and_strided_rows(offsets):
    _check(_args(6, 4, 2, 64, offsets=offsets, pad=24))


def test_padding_slots():
    """Negative slots and a slot_mapping shorter than the tokens (CUDA-graph padding) write nothing."""
    a = _args(8, 4, 2, 64, n_slots=5)
    a["slot_mapping"][1] = -1
    _check(a)


def test_position_outside_the_table():
    """Unchecked on a GPU: NaN in that token's rotated channels, the others exact."""
    a = _args(3, 2, 1, 64)
    a["positions"][1] = ROWS + 3
    if not ON_GPU:  # positions are on the host: checked
        with pytest.raises(ValueError, match="positions"):
            fusions.fused_qkv_split_qk_norm_rope_cache(**a)
        return
    q, k, v = fusions.fused_qkv_split_qk_norm_rope_cache(**a)
    assert q[1].isnan().all() and not q[[0, 2]].isnan().any() and not v.isnan().any()


@pytest.mark.parametrize("cfg", [RopeLaunchConfig(1, 1, 1), RopeLaunchConfig(4, 2, 2), RopeLaunchConfig(2, 4, 4),
                                 RopeLaunchConfig(2, 8, 4)])
def test_pinned_launch_config(cfg, monkeypatch):
    """Every tile computes the same values (tokens and heads past the ends masked), K / V
    blocks of fewer heads and more tokens than Q's included (8 Q heads a block, KV 2 or 1:
    groups of 8 / 16 tokens over 7 / 5 tokens)."""
    import importlib

    mod = importlib.import_module("aiter_lite.ops.triton.fusions.fused_qkv_split_qk_norm_rope_cache")

    monkeypatch.setattr(mod, "rope_launch_config", lambda *a: cfg)
    _check(_args(7, 6, 3, 96, gated=True))
    _check(_args(5, 4, 2, 64, width=8, is_neox=False))
    _check(_args(7, 10, 2, 64, cache_dtype=torch.float8_e4m3fn, scales=True))
    _check(_args(5, 3, 1, 32, layout="NHD", bs=4))
    _check(_args(40, 4, 1, 64, layout="NHD", bs=8))  # (2, 8, 4) and (2, 4, 4): KV blocks of 4 tokens x 1 head


def test_kv_tile():
    """K / V programs hold the KV heads and the tokens that fill a Q tile, fewer while the
    KV programs would not number two an SM; Q's tile where that leaves fewer token-heads
    than warps."""
    from aiter_lite.ops.triton.fusions.fused_qkv_split_qk_norm_rope_cache import _kv_tile
    from aiter_lite.ops.triton.rope.rope import rope_launch_config
    from aiter_lite.spec.device import H100, INTERPRETER

    assert _kv_tile(40, 1, RopeLaunchConfig(2, 8, 4), INTERPRETER) == (1, 4)
    assert _kv_tile(40, 3, RopeLaunchConfig(2, 8, 4), INTERPRETER) == (4, 4)
    assert _kv_tile(12, 3, RopeLaunchConfig(2, 8, 4), INTERPRETER) == (4, 2)
    for t, want in ((16384, (2, 4)), (2048, (2, 4)), (128, (8, 1)), (1, (8, 1))):  # Q's tile: 2 < 4 warps
        assert _kv_tile(t, 2, rope_launch_config(t, 16, 2, 256, H100), H100) == want
    assert _kv_tile(16384, 8, rope_launch_config(16384, 32, 8, 128, H100), H100) == (8, 2)


def test_aiter_weight_rule():
    """The weight is an offset (aiter's ``1 + w``): zero weights normalize without one."""
    a = _args(4, 2, 1, 64)
    a["q_weight"].zero_()
    a["k_weight"].zero_()
    q, k, v = fusions.fused_qkv_split_qk_norm_rope_cache(**a)
    t = a["qkv"].shape[0]
    x = a["qkv"][:, :2 * 64].float().reshape(t, 2, 64)
    normed = x * torch.rsqrt(x.square().mean(-1, keepdim=True) + a["eps"])
    assert torch.allclose(q.float().norm(dim=-1), normed.to(q.dtype).float().norm(dim=-1), rtol=2e-2)


def test_infer_block_t():
    if not ON_GPU:
        with pytest.raises(ValueError, match="device"):
            infer_rope_cache_triton_block_t(16, torch.device("cpu"))
        return
    for t in (1, 100, 10**5):
        b = infer_rope_cache_triton_block_t(t, torch.device(DEVICE))
        assert 1 <= b <= 32 and b & (b - 1) == 0


def _bad_calls():
    """(exception, argument named, change to the valid arguments)."""
    def r(*s, dtype=torch.bfloat16):
        return torch.randn(*s, device=DEVICE).to(dtype)

    return [
        (ValueError, "qkv", {"qkv": r(5, 7 * 64)}),                                    # width
        (TypeError, "qkv", {"qkv": r(5, 8 * 64).to(torch.int32)}),
        (ValueError, "qh", {"qh": 3}),                                                 # qh % kvh
        (TypeError, "head_dim", {"head_dim": 64.0}),
        (ValueError, "q_weight", {"q_weight": r(32)}),
        (TypeError, "k_weight", {"k_weight": r(64).to(torch.int32)}),
        (ValueError, "cos", {"cos": r(64, 40, dtype=torch.float32), "sin": r(64, 40, dtype=torch.float32)}),
        (ValueError, "positions", {"positions": torch.arange(4, device=DEVICE)}),
        (ValueError, "offsets", {"offsets": torch.arange(6, device=DEVICE)}),
        (ValueError, "key_cache", {"key_cache": r(3, 2, 16, 32), "value_cache": r(3, 2, 16, 32)}),
        (ValueError, "value_cache", {"value_cache": r(3, 2, 8, 64)}),
        (ValueError, "key_cache", {"key_cache": r(3, 2, 16 * 64), "value_cache": r(3, 2, 16 * 64)}),
        (TypeError, "key_cache", {"key_cache": r(3, 2, 16, 64).to(torch.int32)}),
        (ValueError, "kv_cache_layout", {"kv_cache_layout": "NDH"}),
        (ValueError, "gated_qkv_layout", {"gated_qkv_layout": "stacked"}),
        (TypeError, "slot_mapping", {"slot_mapping": torch.arange(5, device=DEVICE).float()}),
        (ValueError, "slot_mapping", {"slot_mapping": torch.arange(6, device=DEVICE)}),
        (TypeError, "k_scale", {"k_scale": 0.5}),
        (ValueError, "v_scale", {"v_scale": torch.ones(2, device=DEVICE)}),
        (ValueError, "eps", {"eps": -1.0}),
        (TypeError, "is_neox", {"is_neox": "yes"}),
    ]


@pytest.mark.parametrize("case", range(len(_bad_calls())))
def test_bad_arguments(case, monkeypatch):
    exc, name, change = _bad_calls()[case]
    monkeypatch.setenv("AITER_ROPE_CHECK_POSITIONS", "1")
    a = _args(5, 4, 2, 64)
    a.update(change)
    with pytest.raises(exc, match=name):
        fusions.fused_qkv_split_qk_norm_rope_cache(**a)
