"""Benchmark fp8 / int8 activation quantization (per tensor, per token, per token group).

    python op_benchmarks/bench_quant.py                            # 3 models' hidden and MLP sizes, M = 1..16384
    python op_benchmarks/bench_quant.py --sweep                    # N = 256..262144 at M * N = 2**26
    python op_benchmarks/bench_quant.py --shape 4096x7168 --op group_128 --qdtype int8
    python op_benchmarks/bench_quant.py -M 1 16 --cudagraph --model deepseek-v3
    python op_benchmarks/bench_quant.py --op rms_dyn add_rms_dyn -M 1024 4096   # fused norm + quant

Shapes are (M, N): M tokens, N the quantized width (a model's hidden size, "-mlp": its
intermediate size). The quantized dtype (--qdtype: fp8 = the device's e4m3, e5m2, int8)
is the QDTYPE column. Outputs are allocated once per case and provider, outside the timing.
Bytes moved (each input read once, each output written once; e = x's element size,
the quantized output 1 byte, scales fp32):
    static_per_tensor    read x, the scale; write q            M * N * e + M * N
    dynamic_per_tensor   read x; write q, the scale            M * N * e + M * N  (x read once: the ideal;
                                                               the kernels read it twice, amax then quantize)
    dynamic_per_token    read x; write q, M scales             M * N * e + M * N + 4 * M
    group_128, group_64  read x; write q, M * ceil(N / G)      M * N * e + M * N + 4 * M * ceil(N / G)
                         scales (G = 128, 64)
Fused norm + quant ops (bytes as above, plus a residual read and its sum written for
the "add_" forms; the weight is not counted):
    rms_dyn / ln_dyn     rmsnorm2d_fwd_with_dynamicquant / layernorm2d_fwd_with_dynamicquant
    add_rms_dyn          rmsnorm2d_fwd_with_add_dynamicquant (residual_out written)
    rms_static           rms_norm_static_fp8_quant
    add_rms_static       fused_add_rms_norm_static_fp8_quant (the residual updated in place)
aiter's fused_fp8_quant forms (bytes as the fused ops above, group_128 scales):
    rms_group_128        fused_rms_fp8_group_quant(x, w, eps, group_size=128)
    add_rms_group_128    the same with res1 (x + res1 normalized, the sum written)
    reduce_rms_group_128 fused_reduce_rms_fp8_group_quant of 4 fp32 split-K partials (4, M, N): read
                         16 * M * N bytes; unfused: their sum (torch), then the two ops above
    reduce_silu_group_128  fused_reduce_act_mul_fp8_group_quant, 4 fp32 partials (4, M, 2N):
                         read 32 * M * N; unfused: the sum, then act_mul_and_fp8_group_quant
    gated_group_128      fused_rms_gated_fp8_group_quant(x, w, None, z, eps, group_size=128) (x and z
                         read); unfused: rms_norm, act_mul(z, y, "silu"), group quant
    flatten_group_128    fused_flatten_fp8_group_quant of (M, N / 128, 128) heads-first (SGLang's
                         MLA output, strides of a (N / 128, M, 128) tensor); unfused: reshape (a
                         copy), then group quant
    silu_static_ffq      fused_silu_mul_fp8_per_tensor_static_quant(x, scale) (x (M, 2N));
                         unfused: silu_and_mul, then static quant
aiter's fusions.fused_clamp_act_mul (x (M, 2N) read once, fp32 row weights (M, 1) read,
SwiGLU's clamp at 7):
    clamp_silu_group_128 fp32 scales a 128-column group; unfused: torch's two clamps, this
                         project's act_mul, torch's weight multiply, per_token_group_quant_fp8
    clamp_silu_ue8m0_32  UE8M0 scale bytes a 32-column group (M * ceil(N / 32) bytes); no unfused
                         form (the project's group quant has no UE8M0 scales)
Fused SwiGLU + quant ops (N is the output width: x is (M, 2N), read once):
    silu_group_128       act_mul_and_fp8_group_quant(x, "silu", 128)
    silu_dyn / silu_static  act_mul_and_fp8_quant(x, "silu") per token / with a static scale
Asymmetric int8 (vLLM's azp form; int8 whatever --qdtype):
    int8_azp_static      static_per_tensor_int8_azp_quant: read x; write q  M * N * e + M * N
    int8_azp_dynamic     dynamic_per_token_int8_azp_quant: read x; write q, M scales and M azps
                                                                         M * N * e + M * N + 8 * M
Providers: triton (aiter_lite), native (the eager fp32 PyTorch reference), compile
(torch.compile of it); for the fused ops also unfused (this project's norm, then its
quantization, back to back: the fused op's target is 1.3x that). Liger has no
quantization op. Results are compared dequantized: within a quantization step.
"""

import functools
import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

from op_benchmarks.utils import harness  # noqa: E402  (sets TRITON_INTERPRET on CPU before aiter_lite loads)

import torch  # noqa: E402

from aiter_lite.ops.native import fusions as native_fusions  # noqa: E402
from aiter_lite.ops.native.quant import act_quant as native_act  # noqa: E402
from aiter_lite.ops.native.quant.mx_quant import e8m0_to_float  # noqa: E402
from aiter_lite.ops.native.quant import fused_fp8_quant as native_ffq  # noqa: E402
from aiter_lite.ops.native.quant import norm_quant as native_nq  # noqa: E402
from aiter_lite.ops.native.quant import quant as native  # noqa: E402
from aiter_lite.ops.triton import quant as tri  # noqa: E402
from aiter_lite.ops.triton import activation as tri_act  # noqa: E402
from aiter_lite.ops.triton import fusions as tri_fusions  # noqa: E402
from aiter_lite.ops.triton.normalization import layernorm as tri_ln  # noqa: E402
from aiter_lite.ops.triton.normalization import rmsnorm as tri_rms  # noqa: E402
from aiter_lite.ops.triton.quant import fused_fp8_quant as tri_ffq  # noqa: E402
from aiter_lite.ops.triton.quant import norm_quant as tri_nq  # noqa: E402

# op -> (function name in both backends, group size or None)
OPS = {
    "static_per_tensor": ("static_per_tensor_quant_fp8_i8", None),
    "dynamic_per_tensor": ("dynamic_per_tensor_quant_fp8_i8", None),
    "dynamic_per_token": ("dynamic_per_token_quant_fp8_i8", None),
    "group_128": ("per_token_group_quant", 128),
    "group_64": ("per_token_group_quant", 64),
}
# fused op -> (function name in both backends, residual, dynamic, is_rms)
FUSED = {
    "rms_dyn": ("rmsnorm2d_fwd_with_dynamicquant", False, True, True),
    "add_rms_dyn": ("rmsnorm2d_fwd_with_add_dynamicquant", True, True, True),
    "ln_dyn": ("layernorm2d_fwd_with_dynamicquant", False, True, False),
    "rms_static": ("rms_norm_static_fp8_quant", False, False, True),
    "add_rms_static": ("fused_add_rms_norm_static_fp8_quant", True, False, True),
}
# aiter's fused_fp8_quant op -> (residual, group size)
FFQ = {"rms_group_128": (False, 128), "add_rms_group_128": (True, 128)}
# aiter's further fused_fp8_quant forms (module doc), the split-K count of the reduce forms
FFQ2 = ("reduce_rms_group_128", "reduce_silu_group_128", "gated_group_128", "flatten_group_128", "silu_static_ffq",
        "clamp_silu_group_128", "clamp_silu_ue8m0_32")
CLAMP = 7.0
SPK = 4
EPS = 1e-6
# fused SwiGLU op -> (mode, group size)
ACT = {"silu_group_128": ("group", 128), "silu_dyn": ("per_token", None), "silu_static": ("static", None)}
# asymmetric int8 (vLLM's azp form; int8 whatever --qdtype) -> dynamic.
# bytes: x read, q written, per row a scale and an azp written (dynamic)
AZP = {"int8_azp_static": False, "int8_azp_dynamic": True}
QDTYPES = {"fp8": tri.get_fp8_e4m3_dtype, "e5m2": lambda: torch.float8_e5m2, "int8": lambda: torch.int8}
DEFAULT_MODELS = ["llama3-8B", "llama3-70B", "deepseek-v3"]
DEFAULT_M = [1, 16, 256, 1024, 4096, 16384]
STATIC_SCALE = 0.02


def _scale_shape(op, m, n):
    """Shape of the fp32 scale the op writes (static: reads) for an (m, n) input."""
    group = OPS[op][1]
    if group:
        return (m, -(-n // group))
    return (m, 1) if op == "dynamic_per_token" else (1,)


def _dequant_agrees(result, reference) -> bool:
    """(q, scale) pairs agree when dequantized within one step (fp8: 1/8 of the value at
    most; int8: one scale) plus the input's rounding."""
    (q, s), (q_ref, s_ref) = result[:2], reference[:2]
    s, s_ref = (t[:, None] if t.dim() == 1 and q.dim() == 2 and t.numel() == q.shape[0] > 1 else t
                for t in (s, s_ref))  # a scale a row, as (M,)
    n = q.shape[-1]
    if s.dim() == 2 and s.shape[-1] > 1:  # group scales: each over a power-of-2 group of columns
        group = 1 << (-(-n // s.shape[-1]) - 1).bit_length()
        s, s_ref = (t.repeat_interleave(group, -1)[..., :n] for t in (s, s_ref))
    got, want = q.float() * s, q_ref.float() * s_ref
    step = want.abs() / 8 if q_ref.dtype.is_floating_point else s_ref.expand_as(want)
    return bool(((got - want).abs() <= step * 1.01 + 0.02 * want.abs().amax(-1, keepdim=True)).all())


def _act_case(op, label, m, n, dtype, qdtype):
    mode, group = ACT[op]
    nbytes = 2 * m * n * dtype.itemsize + m * n + {"group": 4 * m * -(-n // (group or 1)), "per_token": 4 * m,
                                                   "static": 0}[mode]

    def make_inputs():
        x = torch.randn(m, 2 * n, device=harness.DEVICE, dtype=dtype) * 3
        return x, torch.tensor([STATIC_SCALE], device=harness.DEVICE), qdtype

    return harness.Case(op=op, label=label, dims={"M": m, "N": n, "QDTYPE": str(qdtype).replace("torch.", "")},
                        dtype=dtype, rows=m, nbytes=nbytes, make_inputs=make_inputs, agrees=_dequant_agrees)


def _act_call(mod, case, inputs):
    mode, group = ACT[case.op]
    x, scale, qdtype = inputs
    if mode == "group":
        return lambda: mod.act_mul_and_fp8_group_quant(x, "silu", group, qdtype)
    return lambda: mod.act_mul_and_fp8_quant(x, "silu", scale if mode == "static" else None, qdtype)


def _act_unfused(case, inputs):
    """This project's silu_and_mul, then its quantization."""
    mode, group = ACT[case.op]
    x, scale, qdtype = inputs
    y = torch.empty(*x.shape[:-1], x.shape[-1] // 2, device=x.device, dtype=x.dtype)
    q, s = torch.empty_like(y, dtype=qdtype), torch.empty(y.shape[0], 1, device=x.device)

    def act():
        return tri_act.silu_and_mul(y, x)
    if mode == "group":
        return lambda: tri.per_token_group_quant_fp8(act(), group, dtype=qdtype)
    if mode == "per_token":
        return lambda: tri.dynamic_per_token_quant_fp8_i8(q, act(), s)
    return lambda: (tri.static_per_tensor_quant_fp8_i8(q, act(), scale), scale)


def _ffq2_case(op, label, m, n, dtype, qdtype):
    e, groups = dtype.itemsize, -(-n // 128)
    nbytes = {"reduce_rms_group_128": SPK * m * n * 4, "reduce_silu_group_128": SPK * m * 2 * n * 4,
              "gated_group_128": 2 * m * n * e, "flatten_group_128": m * n * e,
              "silu_static_ffq": 2 * m * n * e, "clamp_silu_group_128": 2 * m * n * e + 4 * m,
              "clamp_silu_ue8m0_32": 2 * m * n * e + 4 * m}[op] + m * n
    nbytes += {"silu_static_ffq": 0, "clamp_silu_ue8m0_32": m * -(-n // 32)}.get(op, 4 * m * groups)

    def make_inputs():
        dev = harness.DEVICE
        w = (torch.rand(n, device=dev) + 0.5).to(dtype)
        if op == "reduce_rms_group_128":
            x = torch.randn(SPK, m, n, device=dev)
        elif op == "reduce_silu_group_128":
            x = torch.randn(SPK, m, 2 * n, device=dev)
        elif op == "flatten_group_128":
            d = 128 if n % 128 == 0 else n  # heads of 128 (one segment where N is no multiple)
            x = (torch.randn(n // d, m, d, device=dev) * 3).to(dtype).transpose(0, 1)
        elif op in ("silu_static_ffq", "clamp_silu_group_128", "clamp_silu_ue8m0_32"):
            x = (torch.randn(m, 2 * n, device=dev) * 3).to(dtype)
            if op != "silu_static_ffq":
                w = torch.rand(m, 1, device=dev) + 0.5  # the row weights
        else:
            x = (torch.randn(m, n, device=dev) * 3).to(dtype)
        z = torch.randn(m, n, device=dev, dtype=dtype) if op == "gated_group_128" else None
        return x, z, w, torch.tensor([STATIC_SCALE], device=dev), qdtype

    return harness.Case(op=op, label=label, dims={"M": m, "N": n, "QDTYPE": str(qdtype).replace("torch.", "")},
                        dtype=dtype, rows=m, nbytes=nbytes, make_inputs=make_inputs,
                        agrees=_ue8m0_agrees if op == "clamp_silu_ue8m0_32" else _dequant_agrees)


def _ue8m0_agrees(result, reference) -> bool:
    """UE8M0 scale bytes decoded to their powers of 2, then compared as the fp32 ones."""
    return _dequant_agrees(*[(q, e8m0_to_float(s)) for q, s in (result[:2], reference[:2])])


def _ffq2_call(mod, case, inputs):
    """The op of ``mod`` (a backend's fused_fp8_quant module): its (q, scales)."""
    x, z, w, scale, qdtype = inputs
    op = case.op
    if op == "reduce_rms_group_128":
        return lambda: mod.fused_reduce_rms_fp8_group_quant(x, w, EPS, group_size=128, dtype_quant=qdtype,
                                                            dtype=case.dtype)[0]
    if op == "reduce_silu_group_128":
        return lambda: mod.fused_reduce_act_mul_fp8_group_quant(x, "silu", None, 128, qdtype)[0]
    if op == "gated_group_128":
        gs = 128 if x.shape[1] % 128 == 0 else None  # a scale a row where N is no multiple of 128
        return lambda: mod.fused_rms_gated_fp8_group_quant(x, w, None, z, EPS, out_dtype=qdtype, group_size=gs)
    if op == "flatten_group_128":
        return lambda: mod.fused_flatten_fp8_group_quant(x, 128, qdtype)
    if op.startswith("clamp_silu"):
        fn = (tri_fusions.fused_clamp_act_mul if mod is tri_ffq else native_fusions.fused_clamp_act_mul
              if mod is native_ffq else mod.fused_clamp_act_mul)  # (the last: torch.compile of the native one)
        kw = dict(quant_block_size=32, scale_dtype_fmt="ue8m0") if op == "clamp_silu_ue8m0_32" else {}
        return lambda: fn(x, None, None, CLAMP, "silu", w, qdtype, **kw)
    return lambda: (mod.fused_silu_mul_fp8_per_tensor_static_quant(x, scale, qdtype), scale)


def _ffq2_unfused(case, inputs):
    """This project's ops (and torch's split-K sum / reshape copy) back to back."""
    x, z, w, scale, qdtype = inputs
    op = case.op
    group = functools.partial(tri.per_token_group_quant_fp8, group_size=128, dtype=qdtype)
    if op == "reduce_rms_group_128":
        return lambda: group(tri_rms.rms_norm(x.sum(0).to(case.dtype), w, EPS))
    if op == "reduce_silu_group_128":
        return lambda: tri.act_mul_and_fp8_group_quant(x.sum(0), "silu", 128, qdtype)
    if op == "gated_group_128":
        if x.shape[1] % 128:
            return lambda: tri.dynamic_per_token_quant_fp8_i8(
                torch.empty_like(x, dtype=qdtype), tri_act.act_mul(z, tri_rms.rms_norm(x, w, EPS), "silu"),
                torch.empty(x.shape[0], 1, device=x.device))
        return lambda: group(tri_act.act_mul(z, tri_rms.rms_norm(x, w, EPS), "silu"))
    if op == "flatten_group_128":
        return lambda: group(x.reshape(x.shape[0], -1))
    if op == "clamp_silu_ue8m0_32":
        return None
    if op == "clamp_silu_group_128":
        n = x.shape[1] // 2
        return lambda: group(w * tri_act.act_mul(x[:, :n].clamp(max=CLAMP), x[:, n:].clamp(-CLAMP, CLAMP), "silu"))
    y = torch.empty(x.shape[0], x.shape[1] // 2, device=x.device, dtype=x.dtype)
    q = torch.empty_like(y, dtype=qdtype)
    return lambda: (tri.static_per_tensor_quant_fp8_i8(q, tri_act.silu_and_mul(y, x), scale), scale)


def _azp_case(op, label, m, n, dtype, qdtype):
    dynamic = AZP[op]

    def make_inputs():
        x = torch.randn(m, n, device=harness.DEVICE, dtype=dtype) * 3
        if dynamic:
            return x, torch.empty(m, 1, device=harness.DEVICE), torch.empty(m, 1, device=harness.DEVICE,
                                                                             dtype=torch.int32)
        return x, torch.tensor([STATIC_SCALE], device=harness.DEVICE), torch.tensor([3], device=harness.DEVICE,
                                                                                    dtype=torch.int32)

    def agrees(result, reference):
        """Dequantized ``(q - azp) * scale`` within one scale of the reference's."""
        (q, s, z), (q_ref, s_ref, z_ref) = result, reference
        got, want = (q.float() - z.float()) * s, (q_ref.float() - z_ref.float()) * s_ref
        return bool(((got - want).abs() <= s_ref * 1.01 + 1e-6).all())

    return harness.Case(op=op, label=label, dims={"M": m, "N": n, "QDTYPE": "int8"}, dtype=dtype, rows=m,
                        nbytes=m * n * dtype.itemsize + m * n + (8 * m if dynamic else 0), make_inputs=make_inputs,
                        agrees=agrees)


def _azp_call(mod, case, inputs):
    x, scale, azp = inputs
    q = torch.empty(x.shape, device=x.device, dtype=torch.int8)
    if AZP[case.op]:
        s, z = torch.empty_like(scale), torch.empty_like(azp)
        return lambda: mod.dynamic_per_token_int8_azp_quant(q, x, s, z)
    return lambda: (mod.static_per_tensor_int8_azp_quant(q, x, scale, azp), scale, azp)


def _case(op, label, m, n, dtype, qdtype):
    if op in AZP:
        return _azp_case(op, label, m, n, dtype, qdtype)
    if op in FFQ2:
        return _ffq2_case(op, label, m, n, dtype, qdtype)
    if op in ACT:
        return _act_case(op, label, m, n, dtype, qdtype)
    if op in FUSED:
        return _fused_case(op, label, m, n, dtype, qdtype)
    if op in FFQ:
        return _ffq_case(op, label, m, n, dtype, qdtype)
    scale_shape = _scale_shape(op, m, n)
    nbytes = m * n * dtype.itemsize + m * n  # x read, q written (1 byte)
    if op != "static_per_tensor" and op != "dynamic_per_tensor":
        nbytes += 4 * scale_shape[0] * scale_shape[1]  # the scales written

    def make_inputs():
        x = torch.randn(m, n, device=harness.DEVICE, dtype=dtype) * 3
        qx = torch.empty(m, n, device=harness.DEVICE, dtype=qdtype)
        if op == "static_per_tensor":
            scale = torch.tensor([STATIC_SCALE], device=harness.DEVICE, dtype=torch.float32)
        else:
            scale = torch.empty(scale_shape, device=harness.DEVICE, dtype=torch.float32)
        return x, qx, scale

    return harness.Case(
        op=op, label=label, dims={"M": m, "N": n, "QDTYPE": str(qdtype).replace("torch.", "")}, dtype=dtype,
        rows=m, nbytes=nbytes, make_inputs=make_inputs, agrees=_dequant_agrees,
    )


def _fused_case(op, label, m, n, dtype, qdtype):
    _, residual, dynamic, _ = FUSED[op]
    e = dtype.itemsize
    nbytes = m * n * e + m * n + (4 * m if dynamic else 0) + (2 * m * n * e if residual else 0)

    def make_inputs():
        x = torch.randn(m, n, device=harness.DEVICE, dtype=dtype) * 3
        r = torch.randn(m, n, device=harness.DEVICE, dtype=dtype) if residual else None
        w = (torch.rand(n, device=harness.DEVICE) + 0.5).to(dtype)
        b = torch.randn(n, device=harness.DEVICE, dtype=dtype)
        scale = (torch.empty(m, 1, device=harness.DEVICE) if dynamic
                 else torch.tensor([STATIC_SCALE], device=harness.DEVICE))
        return x, r, w, b, torch.empty(m, n, device=harness.DEVICE, dtype=qdtype), scale

    return harness.Case(op=op, label=label, dims={"M": m, "N": n, "QDTYPE": str(qdtype).replace("torch.", "")},
                        dtype=dtype, rows=m, nbytes=nbytes, make_inputs=make_inputs, agrees=_dequant_agrees)


def _ffq_case(op, label, m, n, dtype, qdtype):
    residual, group = FFQ[op]
    e = dtype.itemsize
    nbytes = m * n * e + m * n + 4 * m * -(-n // group) + (2 * m * n * e if residual else 0)

    def make_inputs():
        x = torch.randn(m, n, device=harness.DEVICE, dtype=dtype) * 3
        r = torch.randn(m, n, device=harness.DEVICE, dtype=dtype) if residual else None
        w = (torch.rand(n, device=harness.DEVICE) + 0.5).to(dtype)
        return x, r, w, qdtype

    return harness.Case(op=op, label=label, dims={"M": m, "N": n, "QDTYPE": str(qdtype).replace("torch.", "")},
                        dtype=dtype, rows=m, nbytes=nbytes, make_inputs=make_inputs, agrees=_dequant_agrees)


def _ffq_call(fn, case, inputs):
    """``fn`` (fused_rms_fp8_group_quant of a backend): its (q, scales)."""
    x, r, w, qdtype = inputs
    group = FFQ[case.op][1]
    return lambda: fn(x, w, EPS, None, None, None, group, qdtype, r)[0]


def _ffq_unfused(case, inputs):
    """This project's RMSNorm (with the residual add), then its group quantization."""
    x, r, w, qdtype = inputs
    group = FFQ[case.op][1]
    if r is None:
        return lambda: tri.per_token_group_quant_fp8(tri_rms.rms_norm(x, w, EPS), group, dtype=qdtype)
    y, r_out = torch.empty_like(x), torch.empty_like(r)

    def norm():
        tri_rms.rmsnorm2d_fwd_with_add(y, x, r, r_out, w, EPS)
        return y
    return lambda: tri.per_token_group_quant_fp8(norm(), group, dtype=qdtype)


def _fused_call(fn, case, inputs):
    """The fused op on fresh outputs (a residual updated in place: a copy of its own)."""
    _, residual, dynamic, is_rms = FUSED[case.op]
    x, r, w, b, q, scale = inputs
    q = torch.empty_like(q)
    scale = torch.empty_like(scale) if dynamic else scale
    if case.op == "add_rms_static":
        r = r.clone()
        return lambda: (fn(q, x, r, w, scale, EPS), (q, scale))[1]
    if case.op == "rms_static":
        return lambda: (fn(q, x, w, scale, EPS), (q, scale))[1]
    norm_args = (w, EPS) if is_rms else (w, b, EPS)
    if residual:
        r_out = torch.empty_like(r)
        return lambda: (fn(q, x, r, r_out, scale, *norm_args), (q, scale))[1]
    return lambda: (fn(q, x, scale, *norm_args), (q, scale))[1]


def _unfused(case, inputs):
    """This project's norm (activation), then its quantization, back to back."""
    if case.op in FFQ2:
        return _ffq2_unfused(case, inputs)
    if case.op in ACT:
        return _act_unfused(case, inputs)
    if case.op in FFQ:
        return _ffq_unfused(case, inputs)
    if case.op not in FUSED:
        return None
    _, residual, dynamic, is_rms = FUSED[case.op]
    x, r, w, b, q, scale = inputs
    q = torch.empty_like(q)
    scale = torch.empty_like(scale) if dynamic else scale
    y = torch.empty_like(x)
    r = r.clone() if case.op == "add_rms_static" else r
    r_out = r if case.op == "add_rms_static" else (torch.empty_like(r) if residual else None)
    if residual:
        def norm():
            tri_rms.rmsnorm2d_fwd_with_add(y, x, r, r_out, w, EPS)
            return y
    elif is_rms:
        def norm():
            return tri_rms.rms_norm(x, w, EPS)
    else:
        def norm():
            return tri_ln.layer_norm(x, w, b, EPS)
    if dynamic:
        return lambda: tri.dynamic_per_token_quant_fp8_i8(q, norm(), scale)
    return lambda: (tri.static_per_tensor_quant_fp8_i8(q, norm(), scale), scale)


def _outputs(case, inputs):
    """Each provider writes its own outputs (shaped as the case's), so its result is
    checked against the reference's rather than against the same buffers. The static
    scale is an input: shared."""
    x, qx, scale = inputs
    return x, torch.empty_like(qx), scale if case.op == "static_per_tensor" else torch.empty_like(scale)


def _call(fn, case, x, qx, scale):
    group = OPS[case.op][1]
    if group:
        return lambda: fn(qx, x, scale, group)
    if case.op == "static_per_tensor":  # returns qx alone
        return lambda: (fn(qx, x, scale), (qx, scale))[1]
    return lambda: fn(qx, x, scale)


def _triton(case, inputs):
    if case.op in AZP:
        return _azp_call(tri, case, inputs)
    if case.op in FFQ2:
        return _ffq2_call(tri_ffq, case, inputs)
    if case.op in ACT:
        return _act_call(tri, case, inputs)
    if case.op in FUSED:
        return _fused_call(getattr(tri_nq, FUSED[case.op][0]), case, inputs)
    if case.op in FFQ:
        return _ffq_call(tri_ffq.fused_rms_fp8_group_quant, case, inputs)
    return _call(getattr(tri, OPS[case.op][0]), case, *_outputs(case, inputs))


def _native(case, inputs):
    if case.op in AZP:
        return _azp_call(native, case, inputs)
    if case.op in FFQ2:
        return _ffq2_call(native_ffq, case, inputs)
    if case.op in ACT:
        return _act_call(native_act, case, inputs)
    if case.op in FUSED:
        return _fused_call(getattr(native_nq, FUSED[case.op][0]), case, inputs)
    if case.op in FFQ:
        return _ffq_call(native_ffq.fused_rms_fp8_group_quant, case, inputs)
    return _call(getattr(native, OPS[case.op][0]), case, *_outputs(case, inputs))


_compiled = {}


class _CompiledAct:
    """torch.compile of the native SwiGLU + quant ops, under the names _act_call uses."""

    def __init__(self):
        self.act_mul_and_fp8_group_quant = harness.compile_static(native_act.act_mul_and_fp8_group_quant)
        self.act_mul_and_fp8_quant = harness.compile_static(native_act.act_mul_and_fp8_quant)


class _CompiledFfq:
    """torch.compile of the native fused_fp8_quant forms (and fusions.fused_clamp_act_mul), under their names."""

    def __getattr__(self, name):
        fn = harness.compile_static(getattr(native_ffq, name, None) or getattr(native_fusions, name))
        setattr(self, name, fn)
        return fn


class _CompiledAzp:
    """torch.compile of the native asymmetric int8 ops, under their names."""

    def __getattr__(self, name):
        fn = harness.compile_static(getattr(native, name))
        setattr(self, name, fn)
        return fn


def _compile(case, inputs):
    if case.op in AZP:
        if "azp" not in _compiled:
            _compiled["azp"] = _CompiledAzp()
        return _azp_call(_compiled["azp"], case, inputs)
    if case.op in FFQ2:
        if "ffq2" not in _compiled:
            _compiled["ffq2"] = _CompiledFfq()
        return _ffq2_call(_compiled["ffq2"], case, inputs)
    if case.op in ACT:
        if "act" not in _compiled:
            _compiled["act"] = _CompiledAct()
        return _act_call(_compiled["act"], case, inputs)
    if case.op in FFQ:
        if "ffq" not in _compiled:
            _compiled["ffq"] = harness.compile_static(native_ffq.fused_rms_fp8_group_quant)
        return _ffq_call(_compiled["ffq"], case, inputs)
    fused = case.op in FUSED
    name = FUSED[case.op][0] if fused else OPS[case.op][0]
    if name not in _compiled:
        _compiled[name] = harness.compile_static(getattr(native_nq if fused else native, name))
    if fused:
        return _fused_call(_compiled[name], case, inputs)
    return _call(_compiled[name], case, *_outputs(case, inputs))


PROVIDERS = {"triton": _triton, "native": _native, "compile": _compile, "unfused": _unfused}


def main(argv=None):
    p = harness.make_parser(__doc__.splitlines()[0], ("M", "N"))
    p.add_argument("--op", nargs="+", default=list(OPS), choices=[*OPS, *FUSED, *FFQ, *FFQ2, *ACT, *AZP])
    p.add_argument("--qdtype", default="fp8", choices=list(QDTYPES),
                   help="quantized dtype: fp8 (e4m3: fnuz on MI300, fn elsewhere), e5m2 or int8")
    harness.add_sweep_args(p)
    args = p.parse_args(argv)
    qdtype = QDTYPES[args.qdtype]()
    make_case = functools.partial(_case, qdtype=qdtype)
    shapes = harness.row_shapes(args, DEFAULT_MODELS, DEFAULT_M, lambda cfg: [
        ("", cfg["hidden_size"]), ("-mlp", cfg["intermediate_size"])])
    cases = harness.build_cases(args, args.op, shapes, make_case)
    tiny = [make_case(op, "tiny", 3, 1000, torch.bfloat16) for op in args.op]
    return harness.run(args, "quant", cases, PROVIDERS, tiny)


if __name__ == "__main__":
    main()
