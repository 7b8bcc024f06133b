"""fused_fp8_bmm_rope_cat_and_cache_mla, fused_fp4_bmm_rope_cat_and_cache_mla and
fused_bf16_bmm_rope_cat_and_cache_mla (aiter_lite.ops.triton.fusions) against the fp32 reference (aiter_lite.ops.native.fusions), and
the matmul part against torch written out here (per-token group quantization to fp8, then
an fp32 matmul of the dequantized values).

The cache starts as random finite bytes: entries the tokens do not address keep their bits.
"""

from __future__ import annotations

import pytest
import torch

from aiter_lite.ops.native import fusions as native
from aiter_lite.ops.native.quant import mx_quant as native_quant
from aiter_lite.ops.triton import fusions
from aiter_lite.ops.triton.fusions.fused_bmm_rope_kv_cache import BmmLaunchConfig
from aiter_lite.ops.triton.quant import supported_quant_dtypes
from aiter_lite.spec.quant import quant_range
from op_tests.triton_tests.fusions.test_fused_kv_cache import _sentinel
from op_tests.utils import DEVICE, assert_close, by_device
from op_tests.utils.fusions import FP8, assert_bits
from op_tests.utils.rope import angles

SUPPORTED = supported_quant_dtypes(DEVICE)
ROWS = 64


def _args(h=4, b=3, p=64, lora=32, r=16, *, fp8=torch.float8_e4m3fn, dtype=torch.bfloat16, bk=None, n_zeros=1,
          cache_dtype=torch.bfloat16, k_scale=None):
    bk = b if bk is None else bk
    w = torch.randn(h, lora, p, device=DEVICE) * p ** -0.5
    a = angles(ROWS, r // 2)
    return dict(q_nope=torch.randn(h, b, p, device=DEVICE).to(dtype), w_k=w.to(fp8 if fp8 else dtype),
                w_k_scale=torch.tensor([0.75], device=DEVICE), q_pe=torch.randn(b, h, r, device=DEVICE).to(dtype),
                k_nope=torch.randn(bk, 1, lora, device=DEVICE).to(dtype),
                k_rope=torch.randn(bk, 1, r, device=DEVICE).to(dtype),
                kv_cache=_sentinel((bk + 5, 1, lora + r), cache_dtype),
                slot_mapping=torch.randperm(bk + 5, device=DEVICE)[:bk],
                positions=torch.randint(0, ROWS, (b,), device=DEVICE), cos=torch.cos(a).float(),
                sin=torch.sin(a).float(), k_scale=k_scale, num_decode_toks_for_zeros=n_zeros)


def _call(a: dict, fp8: bool, mod=fusions, **kw):
    if fp8:
        return mod.fused_fp8_bmm_rope_cat_and_cache_mla(**a, **kw)
    b = {k: v for k, v in a.items() if k != "w_k_scale"}
    return mod.fused_bf16_bmm_rope_cat_and_cache_mla(**b, **kw)


def _check(a: dict, fp8: bool, **kw):
    ref_a = {k: (v.clone() if isinstance(v, torch.Tensor) else v) for k, v in a.items()}
    before = a["kv_cache"].clone()
    got = _call(a, fp8, **kw)
    want = _call(ref_a, fp8, native, **{k: v for k, v in kw.items() if k != "config"})  # tiles: Triton's only
    assert len(got) == 4 and got[3] is a["kv_cache"]
    b, h, lora = a["q_nope"].shape[1], a["q_nope"].shape[0], a["w_k"].shape[1]
    assert got[0].shape == (b, h, lora + a["q_pe"].shape[2])
    tol = {"atol": 3e-2, "rtol": 2e-2}  # bf16 outputs of fp32 sums in another order
    assert_close(got[0], want[0], name="q_out", **tol)
    assert_close(got[1], want[1], name="decode_q_pe_out", **tol)
    assert_close(got[2], want[2], name="k_pe_out", **tol)
    if a["kv_cache"].dtype in FP8:
        diff = (a["kv_cache"].float() - ref_a["kv_cache"].float()).abs()
        assert (diff <= ref_a["kv_cache"].float().abs() / 8 * 1.01 + 2e-2).all(), "kv_cache"
    else:
        assert_close(a["kv_cache"], ref_a["kv_cache"], name="kv_cache", **tol)
    unaddressed = torch.ones(a["kv_cache"].shape[0], dtype=torch.bool, device=DEVICE)
    unaddressed[a["slot_mapping"][a["slot_mapping"] >= 0].long()] = False
    assert_bits("kv_cache (unaddressed slots)", a["kv_cache"][unaddressed], before[unaddressed])
    return got


def _matmul(q, w, ws, group):
    """The fp8 form's product written out: q quantized per token and group, dequantized, times w."""
    lo, hi = quant_range(w.dtype)
    h, b, p = q.shape
    g = q.float().reshape(h, b, p // group, group)
    scale = g.abs().amax(-1, keepdim=True) / hi
    deq = ((g / scale).clamp(lo, hi).to(w.dtype).float() * scale).reshape(h, b, p)
    return torch.einsum("hbp,hnp->bhn", deq, w.float()) * ws


SHAPES = by_device([(4, 3, 64, 32, 16), (2, 1, 128, 64, 16), (3, 17, 32, 48, 8), (2, 0, 64, 32, 16)],
                   [(128, b, 128, 512, 64) for b in (1, 16, 64, 257)] + [(16, 3, 96, 80, 32), (2, 0, 64, 32, 16)])


@pytest.mark.parametrize("h,b,p,lora,r", SHAPES)
@pytest.mark.parametrize("fp8", [True, False])
def test_shapes(h, b, p, lora, r, fp8):
    wdt = torch.float8_e4m3fn if torch.float8_e4m3fn in SUPPORTED else SUPPORTED[0] if SUPPORTED else None
    if fp8 and wdt is None:
        pytest.skip("no fp8 on this device")
    _check(_args(h, b, p, lora, r, fp8=wdt if fp8 else None, n_zeros=min(b, 1)), fp8)


@pytest.mark.parametrize("group", [16, 32, 64])
def test_fp8_matmul_is_the_group_quantized_product(group):
    a = _args(4, 5, 64, 32, 16)
    got = fusions.fused_fp8_bmm_rope_cat_and_cache_mla(**a, group_size=group)
    want = _matmul(a["q_nope"], a["w_k"], 0.75, group)
    assert_close(got[0][..., :32], want.to(torch.bfloat16), name="q_out's latent part", atol=3e-2, rtol=2e-2)


@pytest.mark.parametrize("cache_dtype", [torch.float16, *FP8])
def test_mixed_batch_fp8_cache_scaled(cache_dtype):
    if cache_dtype in FP8 and cache_dtype not in SUPPORTED:
        pytest.skip(f"{cache_dtype} cannot be stored on this device")
    a = _args(4, 3, 64, 32, 16, bk=6, cache_dtype=cache_dtype, k_scale=torch.tensor([0.5], device=DEVICE))
    _check(a, True)


@pytest.mark.parametrize("cfg", [BmmLaunchConfig(16, 16, 1), BmmLaunchConfig(32, 64, 4), BmmLaunchConfig(128, 128, 8),
                                 BmmLaunchConfig(16, 16, 2, N_SPLITS=1), BmmLaunchConfig(16, 16, 2, N_SPLITS=2),
                                 BmmLaunchConfig(16, 32, 2, N_SPLITS=1, BLOCK_K=128),
                                 BmmLaunchConfig(16, 32, 2, num_stages=2, BLOCK_K=32, TMA=1)])
def test_pinned_tiles(cfg):
    _check(_args(3, 19, 64, 48, 16), True, config=cfg)
    _check(_args(3, 20, 64, 160, 16, fp8=None), False, config=cfg)  # 20 tokens of the bf16 form too
    _check(_args(2, 18, 96, 64, 16, fp8=None), False, config=cfg)  # q's channels in one masked step (BLOCK_K)


@pytest.mark.parametrize("b", [131, 261])
@pytest.mark.parametrize("fp8", [True, False])
def test_prefill_tiles(fp8, b):
    """Past 128 tokens the bf16 form's programs load q once and walk every output channel (or,
    on Hopper and later, walk their tiles on tensor descriptors); past SPLIT_TOKENS the matmul
    and the RoPE / cache programs take a launch each."""
    wdt = torch.float8_e4m3fn if torch.float8_e4m3fn in SUPPORTED else SUPPORTED[0] if SUPPORTED else None
    if fp8 and wdt is None:
        pytest.skip("no fp8 on this device")
    _check(_args(2, b, 128, 64, 16, fp8=wdt if fp8 else None, bk=b + 2), fp8)


@pytest.mark.parametrize("wdt", FP8, ids=str)
@pytest.mark.parametrize("value", [float("nan"), float("inf"), float("-inf")])
def test_nonfinite_weight_stays_in_its_channel(wdt, value):
    """Every fp8 weight format, and a NaN / inf weight in its output channel of its head for
    every token, as the reference (torch stores inf as e4m3fn's 448 and e4m3fnuz's NaN):
    Triton's e5m2 -> bf16 conversion is a shift that made inf and NaN numbers, so the
    operands meet as fp16."""
    if wdt not in SUPPORTED:
        pytest.skip(f"{wdt} cannot be stored on this device")
    _check(_args(3, 5, 64, 32, 16, fp8=wdt), True)
    a = _args(2, 3, 64, 32, 16, fp8=wdt)
    a["w_k"][1, 7, 20] = value
    got = fusions.fused_fp8_bmm_rope_cat_and_cache_mla(**a)[0]
    want = native.fused_fp8_bmm_rope_cat_and_cache_mla(**a)[0]
    finite = bool(a["w_k"][1, 7, 20].float().isfinite())
    assert got[:, 1, 7].isfinite().all() == finite and got[:, [0], :].isfinite().all()
    assert torch.equal(got.isnan(), want.isnan()) and torch.equal(got.isinf(), want.isinf())
    assert torch.equal(got[got.isinf()], want[want.isinf()])


def test_nan_stays_in_its_token():
    a = _args(2, 3, 64, 32, 16)
    a["q_nope"][1, 1, 5] = float("nan")
    q_out = fusions.fused_fp8_bmm_rope_cat_and_cache_mla(**a)[0]
    assert q_out[1, 1, :32].isnan().all() and not q_out[[0, 2], :, :32].isnan().any()
    assert not q_out[:, 0].isnan().any()


def _bad():
    def r(*s, dtype=torch.bfloat16):
        return torch.randn(*s, device=DEVICE).to(dtype)

    return [
        (TypeError, "w_k", {"w_k": r(4, 32, 64)}),                              # not fp8
        (ValueError, "w_k", {"w_k": r(4, 32, 48).to(torch.float8_e4m3fn)}),     # P differs
        (ValueError, "w_k_scale", {"w_k_scale": torch.ones(2, device=DEVICE)}),
        (TypeError, "w_k_scale", {"w_k_scale": 0.5}),
        (ValueError, "group_size", {"group_size": 48}),
        (ValueError, "k_nope", {"k_nope": r(3, 1, 16)}),
        (ValueError, "k_rope", {"k_rope": r(3, 1, 8)}),
        (TypeError, "q_nope", {"q_nope": r(4, 3, 64).to(torch.int32)}),
        (ValueError, "positions", {"positions": torch.arange(2, device=DEVICE)}),
        (TypeError, "config", {"config": "fast"}),
        (TypeError, "k_scale", {"k_scale": "one"}),
    ]


# fused_fp4_bmm_rope_cat_and_cache_mla: MXFP4 weights (packed e2m1, e8m0 scales) made by the
# reference quantizer from random weights; q quantized to MXFP4 too where prequant


def _fp4_args(h=4, b=3, p=64, lora=32, r=16, *, dtype=torch.bfloat16, n_zeros=1, **kw):
    a = _args(h, b, p, lora, r, fp8=None, dtype=dtype, n_zeros=n_zeros, **kw)
    wq, ws = native_quant.dynamic_mxfp4_quant(torch.randn(h * lora, p, device=DEVICE) * 0.5)
    a["w_k"] = wq.reshape(h, lora, p // 2)
    a["w_k_scale"] = ws.contiguous().reshape(h, lora, -(-p // 32))
    return a


def _check_fp4(a: dict, **kw):
    ref_a = {k: (v.clone() if isinstance(v, torch.Tensor) else v) for k, v in a.items()}
    before = a["kv_cache"].clone()
    got = fusions.fused_fp4_bmm_rope_cat_and_cache_mla(**a, **kw)
    want = native.fused_fp4_bmm_rope_cat_and_cache_mla(**ref_a, **{k: v for k, v in kw.items() if k != "config"})
    b, h, lora = a["q_nope"].shape[1], a["q_nope"].shape[0], a["w_k"].shape[1]
    assert got[0].shape == (b, h, lora + a["q_pe"].shape[2])
    assert got[0].dtype == kw.get("q_out_dtype", a["q_nope"].dtype)
    assert got[3].shape == (a["num_decode_toks_for_zeros"], h, lora) and (got[3] == 0).all()  # aiter's fourth: zeros
    tol = {"atol": 3e-2, "rtol": 2e-2}
    for i, name in enumerate(("q_out", "decode_q_pe_out", "k_pe_out")):
        assert_close(got[i], want[i], name=name, **tol)
    assert_close(a["kv_cache"], ref_a["kv_cache"], name="kv_cache", **tol)
    unaddressed = torch.ones(a["kv_cache"].shape[0], dtype=torch.bool, device=DEVICE)
    unaddressed[a["slot_mapping"].long()] = False
    assert_bits("kv_cache (unaddressed slots)", a["kv_cache"][unaddressed], before[unaddressed])
    return got


FP4_SHAPES = by_device([(4, 3, 64, 32, 16), (2, 1, 48, 40, 8), (3, 17, 96, 48, 16), (2, 0, 64, 32, 16)],
                       [(128, b, 128, 512, 64) for b in (1, 16, 64, 257)] + [(16, 3, 48, 80, 32)])


@pytest.mark.parametrize("h,b,p,lora,r", FP4_SHAPES)
@pytest.mark.parametrize("prequant", [True, False])
def test_fp4_shapes(h, b, p, lora, r, prequant):
    _check_fp4(_fp4_args(h, b, p, lora, r, n_zeros=min(b, 1)), prequant=prequant)


@pytest.mark.parametrize("dtype", [torch.float16, torch.float32])
def test_fp4_dtypes_y_scale_and_tiles(dtype):
    y_scale = torch.tensor([1.5], device=DEVICE)
    got = _check_fp4(_fp4_args(3, 20, 64, 48, 16, dtype=dtype), y_scale=y_scale, q_out_dtype=torch.float32,
                     config=BmmLaunchConfig(16, 16, 2, N_SPLITS=2))
    assert got[0].dtype == torch.float32


def test_fp4_product_is_the_decoded_product():
    """The latent part written out: both operands MXFP4-decoded, an fp32 matmul."""
    a = _fp4_args(2, 5, 64, 32, 16)
    got = fusions.fused_fp4_bmm_rope_cat_and_cache_mla(**a)[0][..., :32].float()
    h, b, p = a["q_nope"].shape
    q = native_quant.mxfp4_dequant(*native_quant.dynamic_mxfp4_quant(a["q_nope"].float().reshape(h * b, p)))
    w = native_quant.mxfp4_dequant(a["w_k"].reshape(-1, p // 2), a["w_k_scale"].reshape(-1, 2))
    want = torch.einsum("hbp,hnp->bhn", q.reshape(h, b, p), w.reshape(h, -1, p))
    assert_close(got, want.to(torch.bfloat16).float(), name="q_out's latent part", atol=3e-2, rtol=2e-2)


def test_fp4_nan_scale_and_nan_q_stay_in_place():
    a = _fp4_args(2, 3, 64, 32, 16)
    a["w_k_scale"][1, 7, 0] = 255                # an e8m0 NaN: head 1, output channel 7
    a["q_nope"][0, 2, 40] = float("nan")         # head 0, token 2
    a["q_nope"][1, 0, 3] = float("-inf")         # head 1, token 0: no MXFP4 scale, as the fp8 form's NaN
    q_out = fusions.fused_fp4_bmm_rope_cat_and_cache_mla(**a)[0]
    assert q_out[:, 1, 7].isnan().all() and not q_out[1:, 1, :7].isnan().any()
    assert q_out[0, 1, :32].isnan().all()
    assert q_out[2, 0, :32].isnan().all() and not q_out[:2, 0, :32].isnan().any()
    assert not q_out[..., 32:].isnan().any()


def _bad_fp4():
    def r(*s, dtype=torch.bfloat16):
        return torch.randn(*s, device=DEVICE).to(dtype)

    u8 = torch.zeros(4, 32, 32, device=DEVICE, dtype=torch.uint8)
    return [
        (TypeError, "w_k", {"w_k": r(4, 32, 32)}),                          # not packed bytes
        (ValueError, "w_k", {"w_k": u8[:, :, :16]}),                        # P / 2 differs
        (TypeError, "w_k_scale", {"w_k_scale": None}),
        (ValueError, "w_k_scale", {"w_k_scale": torch.zeros(4, 32, 3, device=DEVICE, dtype=torch.uint8)}),
        (TypeError, "w_k_scale", {"w_k_scale": torch.zeros(4, 32, 2, device=DEVICE)}),
        (TypeError, "y_scale", {"y_scale": 2.0}),
        (ValueError, "y_scale", {"y_scale": torch.ones(2, device=DEVICE)}),
        (TypeError, "y", {"y": "out"}),
        (TypeError, "prequant", {"prequant": "yes"}),
        (TypeError, "q_nope", {"q_nope": r(4, 3, 64, dtype=torch.float32), "prequant": False}),
        (ValueError, "qk_nope_head_dim", {"q_nope": r(4, 3, 63)}),
        (TypeError, "config", {"config": 3}),
        (ValueError, "k_nope", {"k_nope": r(3, 1, 16)}),
    ]


@pytest.mark.parametrize("form,case", [("fp8", i) for i in range(len(_bad()))] +
                         [("fp4", i) for i in range(len(_bad_fp4()))])
def test_bad_arguments(form, case):
    exc, name, change = (_bad if form == "fp8" else _bad_fp4)()[case]
    a = _args() if form == "fp8" else _fp4_args()
    a.update(change)
    with pytest.raises(exc, match=name):
        getattr(fusions, f"fused_{form}_bmm_rope_cat_and_cache_mla")(**a)
