"""RMSNorm / LayerNorm fused with quantization, against the native reference (the
unfused sequence in fp32 PyTorch) and against this project's own unfused ops.

The normalized row is rounded to the input's dtype before it is quantized, so the
references differ from the kernel only where a normalized value's last bit differs (a
row sum in another order, a looped pass re-reading the stored residual sum; the
interpreter's float -> bf16 conversion truncates): a scale by a few of the input
dtype's units in the last place, a dequantized value by one quantization step plus
that rounding. Outputs start poisoned, so an unwritten element fails.
"""

import pytest
import torch

from aiter_lite.ops.native.quant import norm_quant as native
from aiter_lite.ops.triton import quant
from aiter_lite.ops.triton.normalization import layernorm, rmsnorm
from aiter_lite.ops.triton.quant import norm_quant as fused
from aiter_lite.ops.triton.quant.norm_quant import NormQuantLaunchConfig
from aiter_lite.spec.device import INTERPRETER
from op_tests.triton_tests.quant.test_quant import (  # noqa: F401 (_storable: autouse)
    BADS,
    _assert_codes,
    _poisoned_q,
    _same,
    _storable,
    assert_nonfinite_isolated,
)
from op_tests.triton_tests.quant.test_quant import _assert_dequant as _dequant_within
from op_tests.triton_tests.test_activation import assert_each_tensor_refused_on_meta
from op_tests.utils import DEVICE, DTYPES, assert_close, by_device, make_rows

Q_DTYPES = (torch.float8_e4m3fn, torch.float8_e4m3fnuz, torch.float8_e5m2, torch.int8)
SHAPES = by_device([(0, 64), (1, 1), (5, 127), (9, 1076), (2, 20000)],
                   [(0, 64), (1, 1), (1, 7), (5, 127), (33, 1076), (2, 20000), (1024, 8192), (4096, 7168),
                    (3, 65537)])
# The input dtype's rounding unit (relative), four of them: the scales' budget (the amax
# of a rounded norm) and, times the row's amax, the dequantized values'.
SCALE_RTOL = {torch.float32: 1e-5, torch.float16: 4 * 2**-11, torch.bfloat16: 4 * 2**-8}


def _assert_scales_close(got, want, dtype, name):
    assert torch.isfinite(got).all() and (got > 0).all(), f"{name}: a scale is not finite and positive"
    assert_close(got, want, atol=0.0, rtol=SCALE_RTOL[dtype], name=name)


def _case(m, n, dtype, strided=False, lead=()):
    x = make_rows(m, n, dtype, strided=strided, scale=3.0, lead=lead)
    if m > 2:
        x[..., m // 2, :] = 0.5  # a constant row: LayerNorm's zero variance, all-zero output
    w = (torch.rand(n, device=DEVICE) + 0.5).to(dtype)
    b = torch.randn(n, device=DEVICE).to(dtype)
    return x, w, b


def _assert_dequant(q, s, q_ref, s_ref, dtype, name):
    _dequant_within(q, s, q_ref, s_ref, name, 2 * SCALE_RTOL[dtype])


def _scales(shape):
    return torch.full((*shape[:-1], 1), float("nan"), device=DEVICE)


@pytest.mark.parametrize("variant", ["plain", "add", "smooth", "add_smooth"])
@pytest.mark.parametrize("is_rms", [True, False], ids=["rms", "ln"])
@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("qdtype", by_device([torch.float8_e4m3fn, torch.int8], Q_DTYPES), ids=str)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_dynamic(dtype, qdtype, shape, is_rms, variant):
    m, n = shape
    x, w, b = _case(m, n, dtype, strided=variant == "add")
    name = ("rmsnorm2d" if is_rms else "layernorm2d") + "_fwd_with" + ("_add" if "add" in variant else "") + \
        ("_smoothquant" if "smooth" in variant else "_dynamicquant")
    args_of = {}
    if "add" in variant:
        r = make_rows(m, n, dtype)
        args_of = lambda impl: (r, torch.full_like(r, float("nan")))  # noqa: E731
    xs = (torch.rand(n, device=DEVICE) + 0.5) if "smooth" in variant else None
    outs = {}
    for impl in (fused, native):
        q, s = _poisoned_q((m, n), qdtype), _scales((m, n))
        res = args_of(impl) if args_of else ()
        head = (q, x, *res) + ((xs,) if xs is not None else ()) + (s,)
        tail = (w, 1e-6) if is_rms else (w, b, 1e-5)
        getattr(impl, name)(*head, *tail)
        outs[impl] = (q, s, res[1] if res else None)
    (q, s, r_out), (q_ref, s_ref, r_out_ref) = outs[fused], outs[native]
    _assert_scales_close(s, s_ref, dtype, f"{name} scale")
    _assert_dequant(q, s, q_ref, s_ref, dtype, name)
    if r_out is not None:
        assert_close(r_out, r_out_ref, name=f"{name} residual_out")


@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("qdtype", Q_DTYPES, ids=str)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_static(dtype, qdtype, shape):
    m, n = shape
    x, w, _ = _case(m, n, dtype, strided=True)
    scale = torch.tensor([0.02], device=DEVICE)
    q, q_ref = _poisoned_q((m, n), qdtype), torch.empty((m, n), dtype=qdtype, device=DEVICE)
    fused.rms_norm_static_fp8_quant(q, x, w, scale, 1e-6)
    native.rms_norm_static_fp8_quant(q_ref, x, w, scale, 1e-6)
    _assert_dequant(q, scale, q_ref, scale, dtype, "rms_norm_static_fp8_quant")
    # in place residual, as vLLM's
    res = make_rows(m, n, dtype)
    res_ref = res.clone()
    q = _poisoned_q((m, n), qdtype)
    fused.fused_add_rms_norm_static_fp8_quant(q, x, res, w, scale, 1e-6)
    native.fused_add_rms_norm_static_fp8_quant(q_ref, x, res_ref, w, scale, 1e-6)
    assert_close(res, res_ref, name="residual")
    _assert_dequant(q, scale, q_ref, scale, dtype, "fused_add_rms_norm_static_fp8_quant")


@pytest.mark.parametrize("qdtype", [torch.float8_e4m3fn, torch.int8], ids=str)
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32], ids=str)
def test_against_unfused_ops(dtype, qdtype):
    """Each fused op against this project's norm then its quantization."""
    m, n = 9, 1000
    x, w, b = _case(m, n, dtype)
    r = make_rows(m, n, dtype)
    q, s = _poisoned_q((m, n), qdtype), _scales((m, n))
    r_out = torch.empty_like(r)
    fused.rmsnorm2d_fwd_with_add_dynamicquant(q, x, r, r_out, s, w, 1e-6)
    y, r_out_ref = torch.empty_like(x), torch.empty_like(r)
    rmsnorm.rmsnorm2d_fwd_with_add(y, x, r, r_out_ref, w, 1e-6)
    q_ref, s_ref = quant.dynamic_per_token_quant_fp8_i8(torch.empty_like(q), y, torch.empty_like(s))
    assert torch.equal(r_out, r_out_ref)
    _assert_scales_close(s, s_ref, dtype, "add + rmsnorm + quant scale")
    _assert_codes(q, q_ref, "add + rmsnorm + quant")

    q, s = _poisoned_q((m, n), qdtype), _scales((m, n))
    fused.layernorm2d_fwd_with_dynamicquant(q, x, s, w, b, 1e-5)
    y = layernorm.layer_norm(x, w, b, 1e-5)
    q_ref, s_ref = quant.dynamic_per_token_quant_fp8_i8(torch.empty_like(q), y, torch.empty_like(s))
    _assert_scales_close(s, s_ref, dtype, "layernorm + quant scale")
    _assert_codes(q, q_ref, "layernorm + quant")

    scale = torch.tensor([0.05], device=DEVICE)
    q = _poisoned_q((m, n), qdtype)
    fused.rms_norm_static_fp8_quant(q, x, w, scale, 1e-6)
    q_ref = quant.static_per_tensor_quant_fp8_i8(torch.empty_like(q), rmsnorm.rms_norm(x, w, 1e-6), scale)
    _assert_codes(q, q_ref, "rmsnorm + static quant")


def test_pinned_partial_rows_refused():
    """A pinned launch that neither loops nor covers the row would normalize part of it."""
    x, w, _ = _case(3, 300, torch.float32)
    q, s = _poisoned_q(x.shape, torch.int8), _scales(x.shape)
    with pytest.raises(ValueError, match="BLOCK_N >= the 300 columns"):
        fused.norm_quant("t", q, x, w, None, 1e-6, is_rms=True, yscale=s, config=NormQuantLaunchConfig(2, 128, 4))


@pytest.mark.parametrize("looped", [False, True])
def test_pinned_configs_and_extras(looped):
    """The looped path (pinned), a 3-D input, scale_ub, dump_rms_norm, vLLM's per-token form."""
    dtype, qdtype = torch.bfloat16, torch.float8_e4m3fn
    x, w, b = _case(3, 300, dtype, lead=(2,))
    cfg = NormQuantLaunchConfig(1, 128, 4, LOOPED=True) if looped else NormQuantLaunchConfig(2, 512, 4)
    ub = torch.tensor([1.5], device=DEVICE)
    for is_rms in (True, False):
        q, s = _poisoned_q(x.shape, qdtype), _scales(x.shape)
        y = fused.norm_quant("t", q, x, w, None if is_rms else b, 1e-6, is_rms=is_rms, yscale=s, scale_ub=ub,
                             dump=True, config=cfg)
        q_ref, s_ref = _poisoned_q(x.shape, qdtype), _scales(x.shape)
        y_ref = native.norm_quant(q_ref, x, w, None if is_rms else b, 1e-6, is_rms=is_rms, yscale=s_ref,
                                  scale_ub=ub, dump=True)
        assert_close(y, y_ref, name="dump")
        _assert_scales_close(s, s_ref, dtype, "scale_ub scale")
        _assert_dequant(q, s, q_ref, s_ref, dtype, "scale_ub")
        assert (s <= 1.5 / 448 * (1 + 1e-6)).all()
    # vLLM's dynamic per-token form with an in-place residual
    res, res_ref = make_rows(6, 300, dtype), None
    res_ref = res.clone()
    x2 = x.reshape(6, 300)
    q, s, q_ref, s_ref = _poisoned_q(x2.shape, qdtype), _scales(x2.shape), _poisoned_q(x2.shape, qdtype), _scales(
        x2.shape)
    fused.rms_norm_dynamic_per_token_quant(q, x2, w, s, 1e-6, residual=res)
    native.rms_norm_dynamic_per_token_quant(q_ref, x2, w, s_ref, 1e-6, residual=res_ref)
    assert_close(res, res_ref, name="residual")
    _assert_scales_close(s, s_ref, dtype, "vLLM per-token scale")
    _assert_dequant(q, s, q_ref, s_ref, dtype, "vLLM per-token")


# STATIC looped configs (the width compiled in, every pass unrolled): a width the chunk
# does not divide (the last of 3 chunks partial) and one it does.
STATIC_CASES = {
    "partial": (NormQuantLaunchConfig(1, 1024, 4, LOOPED=True, STATIC=True), (3, 3000)),
    "even": (NormQuantLaunchConfig(1, 512, 4, LOOPED=True, STATIC=True), (4, 2048)),
}


@pytest.mark.parametrize("variant", ["dynamic", "add", "smooth", "add_smooth", "static", "add_static"])
@pytest.mark.parametrize("is_rms", [True, False], ids=["rms", "ln"])
@pytest.mark.parametrize("case", STATIC_CASES)
def test_static_looped(case, is_rms, variant):
    """The STATIC looped path, pinned, against the native reference (LayerNorm with an
    input bias; the normalized rows dumped as well)."""
    cfg, (m, n) = STATIC_CASES[case]
    dtype, qdtype = torch.bfloat16, torch.float8_e4m3fn
    x, w, b = _case(m, n, dtype, strided="add" in variant)
    r = make_rows(m, n, dtype) if "add" in variant else None
    scale = torch.tensor([0.02], device=DEVICE) if "static" in variant else None
    kw = {"is_rms": is_rms, "scale": scale, "dump": True,
          "xscale": (torch.rand(n, device=DEVICE) + 0.5) if "smooth" in variant else None,
          "x_bias": None if is_rms else torch.randn(n, device=DEVICE).to(dtype)}
    bias = None if is_rms else b
    outs = []
    for impl, head, extra in ((fused, ("t",), {"config": cfg}), (native, (), {})):
        q, s = _poisoned_q((m, n), qdtype), None if scale is not None else _scales((m, n))
        r_out = None if r is None else torch.full_like(r, float("nan"))
        y = impl.norm_quant(*head, q, x, w, bias, 1e-5, yscale=s, residual_in=r, residual_out=r_out, **kw, **extra)
        outs.append((q, scale if s is None else s, r_out, y))
    (q, s, r_out, y), (q_ref, s_ref, r_out_ref, y_ref) = outs
    if scale is None:
        _assert_scales_close(s, s_ref, dtype, "static-looped scale")
    _assert_dequant(q, s, q_ref, s_ref, dtype, "static-looped")
    if r is None:
        assert_close(y, y_ref, name="static-looped dump")
    else:  # normalized from the stored (rounded) sum: a few of its units apart
        assert_close(y, y_ref, atol=SCALE_RTOL[dtype] * float(y_ref.abs().amax()), name="static-looped dump")
        assert_close(r_out, r_out_ref, name="static-looped residual_out")


def test_static_config_choice():
    """Wide LayerNorm rows from one wave up take the STATIC loop, its chunk dividing the row."""
    cfg = fused.norm_quant_launch_config(4096, 14336, INTERPRETER, False, False)
    assert cfg.LOOPED and cfg.STATIC and 14336 % cfg.BLOCK_N == 0, cfg


def test_bad_inputs():
    x, w, _ = _case(4, 64, torch.bfloat16)
    q, s = torch.empty(4, 64, dtype=torch.float8_e4m3fn, device=DEVICE), torch.empty(4, 1, device=DEVICE)
    op = fused.rmsnorm2d_fwd_with_dynamicquant
    with pytest.raises(TypeError, match="out must be one of"):
        op(torch.empty(4, 64, device=DEVICE), x, s, w, 1e-6)
    with pytest.raises(ValueError, match="out must have shape"):
        op(q[:, :32], x, s, w, 1e-6)
    with pytest.raises(ValueError, match="yscale must have 4 elements"):
        op(q, x, torch.empty(3, device=DEVICE), w, 1e-6)
    with pytest.raises(TypeError, match="yscale must be float32"):
        op(q, x, s.half(), w, 1e-6)
    with pytest.raises(ValueError, match=r"weight must have shape \(64,\)"):
        op(q, x, s, w[:32], 1e-6)
    with pytest.raises(TypeError, match="epsilon must be a real number"):
        op(q, x, s, w, "1e-6")
    with pytest.raises(ValueError, match="scale must have one element"):
        fused.rms_norm_static_fp8_quant(q, x, w, torch.ones(2, device=DEVICE), 1e-6)
    with pytest.raises(ValueError, match="residual_in must have input's shape"):
        fused.rmsnorm2d_fwd_with_add_dynamicquant(q, x, x[:2], torch.empty_like(x), s, w, 1e-6)
    with pytest.raises(ValueError, match=r"xscale must have shape \(64,\)"):
        fused.rmsnorm2d_fwd_with_smoothquant(q, x, torch.ones(3, device=DEVICE), s, w, 1e-6)
    with pytest.raises(ValueError, match="scales must have 4 elements"):
        fused.rms_norm_dynamic_per_token_quant(q, x, w, torch.empty(5, device=DEVICE), 1e-6)


# ---------------------------------------------------------------------------
# NaN and inf: a row with either normalizes to NaN (inf / inf), visible in its own scale only

# Every dynamic op, as (name, arguments after out and input given the row scales).
def _dynamic_ops(m, n, dtype):
    w = (torch.rand(n, device=DEVICE) + 0.5).to(dtype)
    b = torch.randn(n, device=DEVICE).to(dtype)
    xs = torch.rand(n, device=DEVICE) + 0.5
    r = make_rows(m, n, dtype)
    ro = lambda: torch.empty_like(r)  # noqa: E731
    return {
        "rmsnorm2d_fwd_with_dynamicquant": lambda s: (s, w, 1e-6),
        "rmsnorm2d_fwd_with_smoothquant": lambda s: (xs, s, w, 1e-6),
        "rmsnorm2d_fwd_with_add_dynamicquant": lambda s: (r, ro(), s, w, 1e-6),
        "rmsnorm2d_fwd_with_add_smoothquant": lambda s: (r, ro(), xs, s, w, 1e-6),
        "layernorm2d_fwd_with_dynamicquant": lambda s: (s, w, b, 1e-5),
        "layernorm2d_fwd_with_smoothquant": lambda s: (xs, s, w, b, 1e-5),
        "layernorm2d_fwd_with_add_dynamicquant": lambda s: (r, ro(), s, w, b, 1e-5),
        "layernorm2d_fwd_with_add_smoothquant": lambda s: (r, ro(), xs, s, w, b, 1e-5),
        "rms_norm_dynamic_per_token_quant": lambda s: (w, s, 1e-6, None, r.clone()),
    }


@pytest.mark.parametrize("bad", BADS)
@pytest.mark.parametrize("qdtype", Q_DTYPES, ids=str)
def test_dynamic_nonfinite_row(qdtype, bad):
    """Every dynamic op: a NaN / inf in one row of fresh random rows makes that row's scale
    NaN, as the reference's; every other row bit for bit the clean input's."""
    dtype = DTYPES[Q_DTYPES.index(qdtype) % len(DTYPES)]
    n = 24
    x = make_rows(4, n, dtype, scale=3.0)
    for name, tail in _dynamic_ops(4, n, dtype).items():
        def call(impl, x, name=name, tail=tail):
            q, s = _poisoned_q(x.shape, qdtype), _scales(x.shape)
            getattr(impl, name)(q, x, *tail(s))
            return q, s

        assert_nonfinite_isolated(lambda x: call(fused, x), lambda x: call(native, x), x, (2, 5), BADS[bad], 2, 5)


@pytest.mark.parametrize("cfg", [NormQuantLaunchConfig(1, 16, 4, LOOPED=True),
                                 NormQuantLaunchConfig(1, 16, 4, LOOPED=True, STATIC=True)], ids=["looped", "static"])
@pytest.mark.parametrize("bad", BADS)
@pytest.mark.parametrize("is_rms", [True, False], ids=["rms", "ln"])
def test_looped_nonfinite_row(is_rms, bad, cfg):
    """The looped passes (runtime and compiled-in widths, a partial last chunk), with
    smoothing and a scale bound: the row's scale NaN, the others untouched."""
    dtype, qdtype = torch.bfloat16, torch.float8_e4m3fn
    x, w, b = _case(3, 40, dtype)
    xs = torch.rand(40, device=DEVICE) + 0.5
    ub = torch.tensor([50.0], device=DEVICE)

    def run(impl, head, extra):
        def f(x):
            q, s = _poisoned_q(x.shape, qdtype), _scales(x.shape)
            impl.norm_quant(*head, q, x, w, None if is_rms else b, 1e-5, is_rms=is_rms, yscale=s, xscale=xs,
                            scale_ub=ub, **extra)
            return q, s
        return f

    assert_nonfinite_isolated(run(fused, ("t",), {"config": cfg}), run(native, (), {}), x, (0, 39), BADS[bad], 0, 39)


@pytest.mark.parametrize("bad", BADS)
@pytest.mark.parametrize("qdtype", Q_DTYPES, ids=str)
def test_static_nonfinite_row(qdtype, bad):
    """Static forms: the row's NaN values NaN in fp8, 0 in int8, as the reference's; other rows untouched."""
    x, w, _ = _case(3, 24, torch.float16)
    scale = torch.tensor([0.02], device=DEVICE)
    res = make_rows(3, 24, torch.float16)
    runs = {
        "rms_norm_static_fp8_quant": lambda impl, q, x: impl.rms_norm_static_fp8_quant(q, x, w, scale, 1e-6),
        "fused_add_rms_norm_static_fp8_quant":
            lambda impl, q, x: impl.fused_add_rms_norm_static_fp8_quant(q, x, res.clone(), w, scale, 1e-6),
    }
    for name, run in runs.items():
        clean = _poisoned_q(x.shape, qdtype)
        run(fused, clean, x)
        xb = x.clone()
        xb[1, 3] = BADS[bad]
        q, q_ref = _poisoned_q(x.shape, qdtype), torch.empty(x.shape, dtype=qdtype, device=DEVICE)
        run(fused, q, xb)
        run(native, q_ref, xb)
        assert _same(q[1], q_ref[1]), name
        assert torch.equal(q.view(torch.uint8)[[0, 2]], clean.view(torch.uint8)[[0, 2]]), name


@pytest.mark.parametrize("name", fused.__all__[:11])
def test_negative_epsilon(name):
    """epsilon: a finite real >= 0 (0 allowed), named as the caller's argument."""
    x, w, _ = _case(2, 8, torch.float32)
    q, s = torch.empty(2, 8, dtype=torch.int8, device=DEVICE), _scales((2, 8))
    if name.endswith("static_fp8_quant"):
        args = ((q, x, w, torch.ones(1, device=DEVICE)) if name.startswith("rms") else
                (q, x, torch.zeros_like(x), w, torch.ones(1, device=DEVICE)))
        call = lambda eps: getattr(fused, name)(*args, eps)  # noqa: E731
    else:
        tail = _dynamic_ops(2, 8, torch.float32)[name](s)
        i = next(i for i, a in enumerate(tail) if isinstance(a, float))
        call = lambda eps: getattr(fused, name)(q, x, *tail[:i], eps, *tail[i + 1:])  # noqa: E731
    for eps in (-1e-6, float("-inf"), float("nan")):
        with pytest.raises(ValueError, match=rf"^{name}: epsilon must be"):
            call(eps)
    call(0.0)


def test_meta_tensors_refused():
    """Every op, every tensor argument on a device Triton cannot launch on: named by the public op."""
    x, w, b = _case(2, 8, torch.float32)
    q, s = torch.empty(2, 8, dtype=torch.int8, device=DEVICE), _scales((2, 8))
    for name, tail in _dynamic_ops(2, 8, torch.float32).items():
        assert_each_tensor_refused_on_meta(getattr(fused, name), q, x, *tail(s))
    one = torch.ones(1, device=DEVICE)
    assert_each_tensor_refused_on_meta(fused.rms_norm_static_fp8_quant, q, x, w, one, 1e-6)
    assert_each_tensor_refused_on_meta(fused.fused_add_rms_norm_static_fp8_quant, q, x, x.clone(), w, one, 1e-6)
    assert_each_tensor_refused_on_meta(fused.rmsnorm2d_fwd_with_dynamicquant, q, x, s, w, 1e-6, one)


def test_flags_named():
    x, w, _ = _case(2, 8, torch.float32)
    q, s = torch.empty(2, 8, dtype=torch.int8, device=DEVICE), _scales((2, 8))
    for flag in ("clamp_out", "dump_rms_norm"):
        with pytest.raises(TypeError, match=rf"^rmsnorm2d_fwd_with_dynamicquant: {flag} must be a bool"):
            fused.rmsnorm2d_fwd_with_dynamicquant(q, x, s, w, 1e-6, **{flag: "yes"})


def test_smooth_scale_with_a_stride_refused():
    """A SmoothQuant scale is read as one contiguous vector: a strided one is refused, never misread."""
    x, w, _ = _case(2, 8, torch.float32)
    q, s = torch.empty(2, 8, dtype=torch.int8, device=DEVICE), _scales((2, 8))
    with pytest.raises(ValueError, match=r"^rmsnorm2d_fwd_with_smoothquant: xscale must be contiguous"):
        fused.rmsnorm2d_fwd_with_smoothquant(q, x, torch.ones(16, device=DEVICE)[::2], s, w, 1e-6)
    with pytest.raises(ValueError, match=r"^layernorm2d_fwd_with_dynamicquant: bias must be contiguous"):
        fused.layernorm2d_fwd_with_dynamicquant(q, x, s, w, torch.ones(16, device=DEVICE)[::2], 1e-5)
