"""The fusion ops' arguments: strided index tensors (positions, offsets, slot_mapping) and
tables read as the caller laid them out, a missing table or a tensor on a device Triton
cannot launch on refused with the public op's name and the caller's argument name (never
another op's, like the RoPE op's ``x``). Tiny shapes."""

from __future__ import annotations

import pytest
import torch

from aiter_lite.ops.native import fusions as native
from aiter_lite.ops.triton import fusions
from op_tests.utils import DEVICE, assert_close

ROWS = 16
T, QH, KH, D = 5, 4, 2, 16


def _strided(t: torch.Tensor) -> torch.Tensor:
    """``t``'s values in a view whose outer dim has twice the stride (junk between): not contiguous."""
    junk = torch.full_like(t, 3) if not t.is_floating_point() else torch.full_like(t, float("nan"))
    return torch.stack([t, junk], 1).select(1, 0)


def _r(*shape, dtype=torch.float32):
    return torch.randn(*shape, device=DEVICE).to(dtype)


def _idx(hi, n=T):
    return torch.randint(0, hi, (n,), device=DEVICE)


def _good_args(name):
    """Valid keyword arguments of ``name`` (tiny shapes), every optional tensor given."""
    cos, sin = _r(ROWS, D // 2), _r(ROWS, D // 2)
    if name == "fused_qkv_split_qk_rope":
        return {"qkv": _r(T, (QH + 2 * KH) * D), "cos": cos, "sin": sin, "positions": _idx(ROWS // 2),
                "qh": QH, "kvh": KH, "head_dim": D, "offsets": _idx(ROWS // 2)}
    if name == "fused_qk_rope_reshape_and_cache":
        return {"q": _r(T, QH, D), "k": _r(T, KH, D), "v": _r(T, KH, D), "key_cache": torch.zeros(3, 4, KH, D,
                device=DEVICE), "value_cache": torch.zeros(3, 4, KH, D, device=DEVICE),
                "slot_mapping": torch.randperm(12, device=DEVICE)[:T], "pos": _idx(ROWS // 2), "cos": cos,
                "sin": sin, "k_scale": torch.ones(1, device=DEVICE), "v_scale": torch.full((1,), 2.0, device=DEVICE),
                "is_neox": True, "flash_layout": True, "offs": _idx(ROWS // 2), "q_out": _r(T, QH, D),
                "k_out": _r(T, KH, D), "zeros_out": _r(T, QH, D)}
    if name == "fused_qk_rope_cat":
        return {"q_nope": _r(T, QH, 8), "q_pe": _r(T, QH, D), "k_nope": _r(T, KH, 8), "k_pe": _r(T, 1, D),
                "pos": _idx(ROWS), "cos": cos, "sin": sin, "is_neox": False}
    if name == "fused_qk_cat":
        return {"q1": _r(T, QH, 8), "q2": _r(T, QH, D), "k1": _r(T, KH, 8), "k2": _r(T, 1, D)}
    return {"k_nope": _r(T, KH, 8), "k_pe": _r(T, 1, D), "kv_cache": torch.zeros(12, KH, 8 + D, device=DEVICE),
            "slot_mapping": torch.randperm(12, device=DEVICE)[:T], "k_scale": torch.full((1,), 0.5, device=DEVICE)}


OPS = ["fused_qkv_split_qk_rope", "fused_qk_rope_reshape_and_cache", "fused_qk_rope_cat", "fused_qk_cat",
       "cat_and_cache_mla"]
WRITTEN = ("key_cache", "value_cache", "kv_cache", "q_out", "k_out", "zeros_out")


def _call(name, kw):
    """The op on clones of the arguments; returns its outputs and the tensors it writes, in order."""
    kw = {k: v.clone() if isinstance(v, torch.Tensor) and k in WRITTEN else v for k, v in kw.items()}
    out = getattr(fusions, name)(**kw)
    out = () if out is None else out
    return (*out, *(kw[k] for k in WRITTEN if k in kw))


# ---------------------------------------------------------------------------
# strided index tensors and tables: the same bits as the contiguous call


@pytest.mark.parametrize("name", [n for n in OPS if n != "fused_qk_cat"])
def test_strided_indices_and_tables(name):
    good = _good_args(name)
    want = _call(name, good)
    for arg in ("positions", "offsets", "pos", "offs", "slot_mapping", "cos", "sin"):
        if arg not in good:
            continue
        got = _call(name, {**good, arg: _strided(good[arg])})
        assert len(got) == len(want)
        for i, (g, w) in enumerate(zip(got, want)):
            assert torch.equal(g, w), f"{name}: a strided {arg} changed output {i}"


def test_strided_positions_match_the_reference():
    # A strided view of a wider index tensor, as a scheduler may pass it.
    good = _good_args("fused_qkv_split_qk_rope")
    wide = torch.randint(0, ROWS // 2, (T, 3), device=DEVICE)
    good.update(positions=wide[:, 1], offsets=wide[:, 2])
    got = fusions.fused_qkv_split_qk_rope(**good)
    want = native.fused_qkv_split_qk_rope(**{**good, "positions": wide[:, 1].contiguous(),
                                             "offsets": wide[:, 2].contiguous()})
    for g, w, part in zip(got, want, "qkv"):
        assert_close(g, w, dtype=torch.float32, atol=1e-5, rtol=1e-5, name=f"fused_qkv_split_qk_rope {part}")


# ---------------------------------------------------------------------------
# a missing table


@pytest.mark.parametrize("name", ["fused_qkv_split_qk_rope", "fused_qk_rope_reshape_and_cache", "fused_qk_rope_cat"])
@pytest.mark.parametrize("arg", ["cos", "sin"])
def test_missing_table_raises(name, arg):
    with pytest.raises(TypeError, match=rf"^{name}: {arg} must be a torch.Tensor, got NoneType$"):
        _call(name, {**_good_args(name), arg: None})


# ---------------------------------------------------------------------------
# devices and names


def _meta(t):
    return torch.empty(t.shape, dtype=t.dtype, device="meta")


def test_errors_name_the_callers_arguments():
    a = _good_args("fused_qkv_split_qk_rope")
    for arg, match in [("cos", r"cos must be on qkv's device"), ("positions", r"positions must be on qkv's device"),
                       ("offsets", r"offsets must be on qkv's device")]:
        with pytest.raises(ValueError, match=rf"^fused_qkv_split_qk_rope: {match}"):
            fusions.fused_qkv_split_qk_rope(**{**a, arg: _meta(a[arg])})
    with pytest.raises(ValueError, match=r"^fused_qkv_split_qk_rope: positions must have shape \(5,\) for qkv of"):
        fusions.fused_qkv_split_qk_rope(**{**a, "positions": a["positions"][:3]})

    a = _good_args("fused_qk_rope_cat")
    with pytest.raises(ValueError, match=r"^fused_qk_rope_cat: sin must be on q_nope's device"):
        fusions.fused_qk_rope_cat(**{**a, "sin": _meta(a["sin"])})
    with pytest.raises(ValueError, match=r"^fused_qk_rope_cat: pos must have shape \(5,\) for q_nope of"):
        fusions.fused_qk_rope_cat(**{**a, "pos": a["pos"][:2]})
    with pytest.raises(ValueError, match=r"^fused_qk_rope_cat: cos / sin must be 16 wide .* for q_pe's head dim"):
        fusions.fused_qk_rope_cat(**{**a, "cos": _r(ROWS, 12), "sin": _r(ROWS, 12)})

    a = _good_args("fused_qk_rope_reshape_and_cache")
    for arg, ref in [("pos", "q"), ("offs", "q"), ("cos", "q"), ("k_scale", "q"), ("q_out", "q"), ("k_out", "k"),
                     ("zeros_out", "q")]:
        with pytest.raises(ValueError, match=rf"^fused_qk_rope_reshape_and_cache: {arg} must be on {ref}'s device"):
            _call("fused_qk_rope_reshape_and_cache", {**a, arg: _meta(a[arg])})

    a = _good_args("cat_and_cache_mla")
    with pytest.raises(ValueError, match=r"^cat_and_cache_mla: k_scale must be on k_nope's device"):
        _call("cat_and_cache_mla", {**a, "k_scale": _meta(a["k_scale"])})
