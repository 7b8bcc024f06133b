"""fused_reduce_qk_norm_rope_swa_write (aiter_lite.ops.triton.fusions) against the fp32
reference (aiter_lite.ops.native.fusions): q_out, kv in place and the window cache; split-K
partial sums against the same values summed first.

q_out starts as NaN (an element the op does not write fails); kv's rows the op must not
touch and the window cache's unaddressed entries keep their bits.
"""

from __future__ import annotations

import pytest
import torch

from aiter_lite.ops.native import fusions as native
from aiter_lite.ops.triton import fusions
from op_tests.triton_tests.fusions.test_fused_kv_cache import _sentinel
from op_tests.utils import DEVICE, ON_GPU, assert_close, by_device
from op_tests.utils.fusions import assert_bits, tol
from op_tests.utils.rope import angles

ROWS = 64


def _args(m=5, heads=4, d=64, r=32, *, splitk=0, dtype=torch.bfloat16, weights=True, is_neox=False, swa=False,
          out_dtype=torch.bfloat16, slots=6, win=8):
    n = heads * d
    q = torch.randn(*((splitk,) if splitk else ()), m, n, device=DEVICE).to(dtype)
    a = angles(ROWS, r // 2)
    args = dict(q=q, kv=torch.randn(m, d, device=DEVICE).to(dtype),
                q_norm_weight=torch.randn(d, device=DEVICE).to(dtype) if weights else None,
                kv_norm_weight=torch.randn(d, device=DEVICE).to(dtype) if weights else None,
                q_rms_eps=1e-6, kv_rms_eps=1e-5, rope_head_dim=r,
                cos_cache=torch.cos(a).float()[:, None, None, :], sin_cache=torch.sin(a).float()[:, None, None, :],
                positions=torch.randint(0, ROWS, (m,), device=DEVICE), is_neox=is_neox, dtype=out_dtype)
    if swa:
        wi = torch.randperm(m, device=DEVICE).to(torch.int32)
        if m > 2:
            wi[1] = -1  # a row not written
        seqs = 3
        # Distinct positions mod win: two tokens of one sequence on one window entry would race (a
        # sequence's last win tokens never share one).
        assert m <= win
        args["positions"] = torch.randperm(win, device=DEVICE)[:m] + win * torch.randint(0, ROWS // win, (m,),
                                                                                            device=DEVICE)
        args.update(write_indices=wi, batch_id_per_token=torch.randint(0, seqs, (m + 2,), device=DEVICE),
                    state_slot_mapping=torch.tensor([2, -1, 4][:seqs], device=DEVICE),
                    swa_kv=_sentinel((slots, win, d), dtype), win=win)
    return args


def _check(a: dict):
    ref_args = {k: (v.clone() if isinstance(v, torch.Tensor) else v) for k, v in a.items()}
    before_q = a["q"].clone()
    out = fusions.fused_reduce_qk_norm_rope_swa_write(**a)
    want = native.fused_reduce_qk_norm_rope_swa_write(**ref_args)
    m, d = a["kv"].shape
    assert out.shape == (m, a["q"].shape[-1] // d, d) and out.dtype == a["dtype"]
    assert_close(out, want, name="q_out", **tol(out.dtype))
    assert_close(a["kv"], ref_args["kv"], name="kv (in place)", **tol(a["kv"].dtype))
    if a.get("swa_kv") is not None:
        assert_close(a["swa_kv"], ref_args["swa_kv"], name="swa_kv", **tol(a["swa_kv"].dtype))
    assert_bits("q (the input)", a["q"], before_q)
    return out


SHAPES = by_device([(1, 4, 64, 32), (5, 8, 64, 64), (7, 2, 96, 32), (0, 4, 64, 32), (9, 3, 80, 16)],
                   [(m, h, d, r) for m in (0, 1, 7, 128, 2048) for h, d, r in ((16, 512, 64), (64, 512, 64),
                                                                               (8, 128, 64), (4, 96, 32))])


@pytest.mark.parametrize("m,heads,d,r", SHAPES)
@pytest.mark.parametrize("is_neox", [False, True])
def test_shapes(m, heads, d, r, is_neox):
    _check(_args(m, heads, d, r, is_neox=is_neox))


@pytest.mark.parametrize("splitk", [1, 3])
def test_split_k_partial_sums(splitk):
    a = _args(6, 4, 64, 32, splitk=splitk)
    got = _check(a)
    b = {**a, "q": a["q"].float().sum(0)}  # the same values, summed first
    b["kv"] = a["kv"].clone()
    assert_close(got, fusions.fused_reduce_qk_norm_rope_swa_write(**b), name="split-K vs summed", atol=2e-2,
                 rtol=2e-2)


@pytest.mark.parametrize("dtype,out_dtype", [(torch.float16, torch.float16), (torch.float32, torch.bfloat16),
                                             (torch.bfloat16, torch.float32)])
def test_dtypes_and_no_weights(dtype, out_dtype):
    _check(_args(5, 4, 64, 32, dtype=dtype, out_dtype=out_dtype, weights=False))


@pytest.mark.parametrize("is_neox", [False, True])
def test_sliding_window_write(is_neox):
    a = _args(7, 4, 64, 32, swa=True, is_neox=is_neox)
    kv_before = a["kv"].clone()
    _check(a)
    (skipped,) = set(range(7)) - set(a["write_indices"].tolist())
    assert_bits("the kv row not in write_indices", a["kv"][skipped], kv_before[skipped])


def test_window_arguments_together():
    a = _args(4, 2, 64, 32, swa=True)
    a["state_slot_mapping"] = None
    with pytest.raises(ValueError, match="state_slot_mapping"):
        fusions.fused_reduce_qk_norm_rope_swa_write(**a)


def test_position_outside_the_table():
    a = _args(3, 2, 64, 32)
    a["positions"][1] = ROWS + 5
    if not ON_GPU:
        with pytest.raises(ValueError, match="positions"):
            fusions.fused_reduce_qk_norm_rope_swa_write(**a)
        return
    out = fusions.fused_reduce_qk_norm_rope_swa_write(**a)
    assert out[1, :, 32:].isnan().all() and not out[1, :, :32].isnan().any() and not out[[0, 2]].isnan().any()


def _bad():
    def r(*s, dtype=torch.bfloat16):
        return torch.randn(*s, device=DEVICE).to(dtype)

    return [
        (ValueError, r"\bq\b", {"q": r(4, 4 * 64 + 3)}),
        (ValueError, r"\bq\b", {"q": r(5, 4 * 64)}),
        (ValueError, r"\bkv\b", {"kv": r(4, 2, 64)}),
        (TypeError, "kv", {"kv": r(4, 64).to(torch.int32)}),
        (ValueError, "q_norm_weight", {"q_norm_weight": r(32)}),
        (ValueError, "rope_head_dim", {"rope_head_dim": 33}),
        (ValueError, "rope_head_dim", {"rope_head_dim": 128}),
        (ValueError, "cos_cache", {"rope_head_dim": 16}),
        (ValueError, "q_rms_eps", {"q_rms_eps": -1.0}),
        (ValueError, "positions", {"positions": torch.arange(3, device=DEVICE)}),
        (ValueError, "q_out", {"q_out": r(4, 4, 32)}),
        (TypeError, "dtype", {"dtype": torch.int8}),
        (ValueError, "swa_kv", {"write_indices": torch.arange(4, device=DEVICE, dtype=torch.int32),
                                "batch_id_per_token": torch.zeros(4, device=DEVICE, dtype=torch.int32),
                                "state_slot_mapping": torch.zeros(1, device=DEVICE, dtype=torch.int32),
                                "swa_kv": r(2, 16, 64), "win": 8}),
        (TypeError, "write_indices", {"write_indices": torch.arange(4, device=DEVICE).float(),
                                      "batch_id_per_token": torch.zeros(4, device=DEVICE, dtype=torch.int32),
                                      "state_slot_mapping": torch.zeros(1, device=DEVICE, dtype=torch.int32),
                                      "swa_kv": r(2, 8, 64), "win": 8}),
        (TypeError, "is_neox", {"is_neox": "yes"}),
    ]


@pytest.mark.parametrize("case", range(len(_bad())))
def test_bad_arguments(case, monkeypatch):
    exc, name, change = _bad()[case]
    monkeypatch.setenv("AITER_ROPE_CHECK_POSITIONS", "1")
    a = _args(4, 4, 64, 32)
    a.update(change)
    with pytest.raises(exc, match=name):
        fusions.fused_reduce_qk_norm_rope_swa_write(**a)
