"""The RoPE ops' arguments: strided index tensors and tables read as the caller laid them
out, a missing table or a tensor on a device Triton cannot launch on refused with the
public op's name and the caller's argument name, and get_rope's cache key built only from
checked arguments. Tiny shapes: every case is a handful of interpreter launches at most."""

import inspect

import numpy as np
import pytest
import torch

from aiter_lite.layers.rotary_embedding import LinearScalingRotaryEmbedding, RotaryEmbedding, get_rope
from aiter_lite.ops.native.rope import rope as native
from aiter_lite.ops.triton.rope import rope as tr
from op_tests.utils import DEVICE, ON_GPU, assert_close

KINDS = ("fwd", "fwd_inplace", "bwd")


def _strided(t: torch.Tensor) -> torch.Tensor:
    """``t``'s values in a view whose outer dim has twice the stride (junk between): not contiguous."""
    junk = torch.full_like(t, 7) if not t.is_floating_point() else torch.full_like(t, float("nan"))
    return torch.stack([t, junk], 1).select(1, 0)


def _copy(t: torch.Tensor) -> torch.Tensor:
    """A copy with ``t``'s strides (``clone`` makes a strided view contiguous)."""
    return torch.empty_strided(t.shape, t.stride(), dtype=t.dtype, device=t.device).copy_(t)


def _run(name, *args):
    """The op on copies of its tensors, strides kept (the in-place ones write x and y)."""
    return getattr(tr, name)(*[_copy(a) if isinstance(a, torch.Tensor) else a for a in args])


def _equal(name, got, want):
    got, want = (got, want) if isinstance(got, tuple) else ((got,), (want,))
    for g, w in zip(got, want):
        assert torch.equal(g, w), f"{name}: a strided index or table changed the result"


# ---------------------------------------------------------------------------
# strided index tensors and tables: the same bits as the contiguous call


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("dtype", [torch.int32, torch.int64])
def test_strided_cu_seqlens(kind, dtype):
    # The brief's case: cu_seqlens a [::2] view; a token past cu_seqlens[-1] passes through.
    x = torch.randn(6, 2, 16, device=DEVICE)
    freqs = torch.rand(8, 1, 1, 8, device=DEVICE) * 6
    cu = torch.tensor([0, 9, 2, 9, 5, 9], device=DEVICE, dtype=dtype)[::2]
    assert not cu.is_contiguous()
    # (read as if contiguous it would be [0, 9, 2]: tokens from 2 on would pass through unrotated)
    name = f"rope_thd_{kind}"
    got = _run(name, x, cu, freqs, 0, True, False)
    _equal(name, got, _run(name, x, cu.contiguous(), freqs, 0, True, False))
    if kind != "bwd":
        assert_close(got, native.rope_thd_fwd(x, cu, freqs, 0, True, False), dtype=torch.float32, name=name)


@pytest.mark.parametrize("kind", KINDS)
def test_strided_positions_offsets_and_tables(kind):
    s, b, h, d, f, rows = 3, 2, 2, 16, 4, 9
    x = torch.randn(s, b, h, d, device=DEVICE)
    cos, sin = torch.randn(rows, f, device=DEVICE), torch.randn(rows, f, device=DEVICE)
    pos = torch.randint(0, 5, (b, s), device=DEVICE).t()  # (s, b), transposed
    off = _strided(torch.randint(0, 4, (s, b), device=DEVICE, dtype=torch.int32))  # other strides than pos
    cos_s, sin_s = _strided(cos), cos.new_empty(f, rows).t().copy_(sin)  # column-major sin
    for name, args, plain in [
        (f"rope_cached_positions_{kind}", (x, cos_s, sin_s, pos), (x, cos, sin, pos.contiguous())),
        (f"rope_cached_positions_offsets_{kind}", (x, cos_s[:, None, None], sin_s[:, None, None], pos, off),
         (x, cos[:, None, None], sin[:, None, None], pos.contiguous(), off.contiguous())),
        (f"rope_cached_thd_positions_offsets_2c_{kind}", (x[:, 0], x[:, 1], cos_s, sin_s, pos[:, 1], off[:, 0]),
         (x[:, 0].contiguous(), x[:, 1].contiguous(), cos, sin, pos[:, 1].contiguous(), off[:, 0].contiguous())),
        (f"rope_cached_thd_positions_2c_{kind}", (x[:, 0], x[:, 1], cos, sin, _strided(pos[:, 0])),
         (x[:, 0], x[:, 1], cos, sin, pos[:, 0].contiguous())),
    ]:
        _equal(name, _run(name, *args, 1, True, False), _run(name, *plain, 1, True, False))


def test_strided_tables_2d():
    x = torch.randn(1, 6, 2, 16, device=DEVICE)
    tabs = [torch.randn(4, 4, device=DEVICE) for _ in range(4)]
    strided = [_strided(t) for t in tabs[:2]] + [tabs[2].t().contiguous().t(), tabs[3]]
    got = tr.rope_fwd_2d(x, *strided, 2, 3, 0, True, False)
    _equal("rope_fwd_2d", got, tr.rope_fwd_2d(x, *tabs, 2, 3, 0, True, False))


# ---------------------------------------------------------------------------
# a missing table: the public cached ops never take the angles path


OPS = [name for name in tr.__all__ if name.startswith("rope_") and name.endswith(("fwd", "bwd", "inplace", "2d"))]
CACHED = [name for name in OPS if name.startswith("rope_cached_")]
TWO_D = ["rope_fwd_2d", "rope_fwd_2d_inplace", "rope_bwd_2d"]


def _good_args(name):
    """Valid keyword arguments of ``name`` (tiny shapes)."""
    cos, sin = torch.randn(8, 4, device=DEVICE), torch.randn(8, 4, device=DEVICE)
    if name in TWO_D:
        return {"x": torch.randn(1, 6, 1, 16, device=DEVICE), "cos_h": cos, "sin_h": sin, "cos_w": cos.clone(),
                "sin_w": sin.clone(), "img_height": 2, "img_width": 3}
    if name.startswith(("rope_fwd", "rope_bwd")):
        return {"x": torch.randn(3, 2, 1, 16, device=DEVICE), "freqs": torch.rand(4, 1, 1, 4, device=DEVICE)}
    if name.startswith("rope_thd"):
        return {"x": torch.randn(5, 1, 16, device=DEVICE), "cu_seqlens": torch.tensor([0, 2, 5], device=DEVICE),
                "freqs": torch.rand(4, 1, 1, 4, device=DEVICE)}
    if "_2c_" in name:
        a = {"x": torch.randn(3, 2, 16, device=DEVICE), "y": torch.randn(3, 1, 16, device=DEVICE), "cos": cos,
             "sin": sin, "positions": torch.tensor([0, 5, 2], device=DEVICE)}
        if "offsets" in name:
            a["offsets"] = torch.tensor([1, 0, 2], device=DEVICE)
        return a
    a = {"x": torch.randn(3, 2, 1, 16, device=DEVICE), "cos": cos[:, None, None], "sin": sin[:, None, None]}
    if "positions" in name:
        a["positions"] = torch.randint(0, 4, (3, 2), device=DEVICE)
    if "offsets" in name:
        a["offsets"] = torch.randint(0, 4, (3, 2), device=DEVICE)
    return a


def _call(name, kw):
    flags = {"rotate_style": 0, "reuse_freqs_front_part": True, "nope_first": False}
    return getattr(tr, name)(**{k: v.clone() if isinstance(v, torch.Tensor) else v for k, v in kw.items()}, **flags)


def test_every_op_is_covered():
    assert len(OPS) == 24 and len(CACHED) == 15


@pytest.mark.parametrize("name", CACHED + TWO_D)
def test_missing_table_raises(name):
    tables = ("cos_h", "sin_h", "cos_w", "sin_w") if name in TWO_D else ("cos", "sin")
    missing = tables + (("offsets",) if "offsets" in name else ())
    for arg in missing:
        with pytest.raises(TypeError, match=rf"^{name}: {arg} must be a torch.Tensor, got NoneType$"):
            _call(name, {**_good_args(name), arg: None})


def test_angles_path_still_serves_the_raw_angle_ops():
    x, freqs = torch.randn(3, 2, 1, 16, device=DEVICE), torch.rand(4, 1, 1, 8, device=DEVICE) * 6
    cos, sin = torch.cos(freqs), torch.sin(freqs)
    assert_close(tr.rope_fwd(x, freqs, 0, False, False), tr.rope_cached_fwd(x, cos, sin, 0, False, False),
                 dtype=torch.float32, atol=1e-5, rtol=1e-5, name="rope_fwd against rope_cached_fwd")


# ---------------------------------------------------------------------------
# devices: every tensor argument on a device Triton cannot launch on


def test_meta_image_size_raises():
    good = _good_args("rope_fwd_2d")
    with pytest.raises(ValueError, match=r"^rope_fwd_2d: img_height is a tensor on the meta device"):
        _call("rope_fwd_2d", {**good, "img_height": torch.empty((), dtype=torch.int64, device="meta")})
    _call("rope_fwd_2d", {**good, "img_height": torch.tensor(2)})  # a CPU tensor is read on the host


def test_layer_names_query_on_a_bad_device():
    rope = RotaryEmbedding(16, 16, 8, 10000, True, None, backend="triton").to(DEVICE)
    q = torch.empty(3, 16, device="meta")
    with pytest.raises(ValueError, match=r"^RotaryEmbedding: (query is on the meta device|positions must be on)"):
        rope.forward_triton(torch.arange(3, device="meta"), q)


# ---------------------------------------------------------------------------
# errors name the caller's arguments


def test_width_and_row_errors_name_the_arguments():
    x = torch.randn(3, 2, 1, 16, device=DEVICE)
    with pytest.raises(ValueError, match=r"^rope_fwd: freqs 16 wide .* up to x's head dim 16"):
        tr.rope_fwd(x, torch.rand(4, 1, 1, 16, device=DEVICE), 0, True, False)
    wide = torch.randn(4, 1, 1, 16, device=DEVICE)
    with pytest.raises(ValueError, match=r"^rope_cached_fwd: cos 16 wide .* up to x's head dim 16"):
        tr.rope_cached_fwd(x, wide, wide, 0, True, False)
    x2, t = torch.randn(1, 6, 1, 16, device=DEVICE), torch.randn(4, 4, device=DEVICE)
    with pytest.raises(ValueError, match=r"^rope_fwd_2d: two rotary parts of 8 channels .* x's head dim 12"):
        tr.rope_fwd_2d(x2[..., :12], t, t, t, t, 2, 3, 0, True, False)
    with pytest.raises(ValueError, match=r"^rope_fwd_2d: cos_h has 1 rows and cos_w 4; need at least img_height"):
        tr.rope_fwd_2d(x2, t[:1], t[:1], t, t, 2, 3, 0, False, False)


@pytest.mark.eager_host_checks
def test_cu_seqlens_error_names_cu_seqlens(monkeypatch):
    if ON_GPU:
        monkeypatch.setenv("AITER_ROPE_CHECK_POSITIONS", "1")
    x = torch.randn(6, 1, 16, device=DEVICE)
    with pytest.raises(ValueError, match=r"^rope_thd_fwd: cu_seqlens' longest sequence has 5 tokens"):
        tr.rope_thd_fwd(x, torch.tensor([0, 5], device=DEVICE), torch.rand(4, 1, 1, 4, device=DEVICE), 0, True, False)


# ---------------------------------------------------------------------------
# get_rope: arguments checked before the cache key; rope_scaling of any nesting shared


def test_get_rope_unhashable_scaling_values():
    base = {"rope_type": "linear", "factor": 2.0}
    a = get_rope(16, 16, 8, 10000, True, {**base, "extra": {"nested": [1, {2, 3}]}, "s": {4}}, backend="native")
    b = get_rope(16, 16, 8, 10000, True, {"s": {4}, "extra": {"nested": [1, {3, 2}]}, **base}, backend="native")
    assert type(a) is LinearScalingRotaryEmbedding and a is b  # equal contents, any order: one module
    c = get_rope(16, 16, 8, 10000, True, {**base, "extra": np.array([1, 2])}, backend="native")
    assert c is get_rope(16, 16, 8, 10000, True, {**base, "extra": [1, 2]}, backend="native")

    class Opaque:
        __hash__ = None

    d = get_rope(16, 16, 8, 10000, True, {**base, "extra": Opaque()}, backend="native")
    assert type(d) is LinearScalingRotaryEmbedding and d is not a  # works, not shared


def test_get_rope_bad_arguments_raise_before_the_cache():
    for args, kw, exc, match in [
        ((64, 64, True, 10000), {}, TypeError, r"^get_rope: max_position must be an int, got bool True"),
        ((64, 64, 16, [10000]), {}, TypeError, r"^get_rope: base must be a real number, got list"),
        ((64, 64, 16, 10000, [True]), {}, TypeError, r"^get_rope: is_neox_style must be a bool"),
        ((64, 64, 16, 10000, True, None, ["bf16"]), {}, TypeError, r"^get_rope: dtype must be a torch.dtype"),
        (({64},), {"rotary_dim": 64, "max_position": 16, "base": 10000}, TypeError,
         r"^get_rope: head_size must be an int, got set"),
        ((64, 64, 16, 10000, True, {"rope_type": ["linear"]}), {}, ValueError, "unknown rope_scaling type"),
    ]:
        with pytest.raises(exc, match=match):
            get_rope(*args, **kw, backend="native")
    # current vLLM's form, (head_size, max_position, is_neox_style, rope_parameters): a module, not an error
    assert get_rope(64, 8192, True, {"rope_type": "default"}, backend="native").rotary_dim == 64


def test_signatures_unchanged():
    # The checks add no argument: aiter's / vLLM's call forms keep working.
    assert list(inspect.signature(get_rope).parameters)[:8] == [
        "head_size", "rotary_dim", "max_position", "base", "is_neox_style", "rope_scaling", "dtype",
        "partial_rotary_factor"]
