"""Benchmark MX / NV block-scaled activation quantization (MXFP4, MXFP8, NVFP4), alone and fused.

    python op_benchmarks/bench_mx_quant.py                           # 3 models' hidden and MLP sizes, M = 1..16384
    python op_benchmarks/bench_mx_quant.py --sweep                   # N = 256..262144 at M * N = 2**26
    python op_benchmarks/bench_mx_quant.py --shape 4096x7168 --op mxfp4 nvfp4
    python op_benchmarks/bench_mx_quant.py -M 1 16 --cudagraph --model deepseek-v3 --op rms_mxfp4 add_rms_mxfp4

Shapes are (M, N): M tokens, N the quantized width (a model's hidden size, "-mlp": its
intermediate size). Outputs are allocated by each op, inside the timing, as aiter's do.
Bytes moved (x read once, values and scales written once; e = x's element size; fp4
values half a byte, fp8 values and e8m0 / e4m3 scales one byte):
    mxfp4          dynamic_mxfp4_quant(x)                    M * N * e + M * N / 2 + M * ceil(N / 32)
    mxfp8          dynamic_mxfp8_quant(x), the device's e4m3 M * N * e + M * N + M * ceil(N / 32)
    nvfp4          dynamic_nvfp4_quant(x, global_scale)      M * N * e + M * N / 2 + M * ceil(N / 16)
    silu_mxfp4     act_mul_and_mxfp4_quant(x, "silu"),       2 * M * N * e + M * N / 2 + M * ceil(N / 32)
                   x (M, 2N)
    rms_mxfp4      fused_rms_mxfp4_quant(x, w, eps)          as mxfp4 (the weight not counted)
    add_rms_mxfp4  the same with res1 (x + res1 normalized,  as mxfp4 + 2 * M * N * e
                   the sum written)
    rms_mxfp8      fused_rms_mxfp8_quant(x, w, eps)          as mxfp8
    flatten_mxfp4  fused_flatten_mxfp4_quant(x),             as mxfp4
                   x (M, N / 128, 128)
The fused norms hold a row in registers: their cases stop at N = 16384.
Providers: triton (aiter_lite), native (the eager fp32 PyTorch reference), compile
(torch.compile of it), unfused (the fused forms as this project's norm / activation /
reshape, then its block quantization). Liger has no MX / NV quantization. Results are compared decoded:
within one e2m1 / fp8 step of the reference's.
"""

import functools
import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

from op_benchmarks.utils import harness  # noqa: E402  (sets TRITON_INTERPRET on CPU before aiter_lite loads)

import torch  # noqa: E402

from aiter_lite.ops.native.quant import mx_quant as native  # noqa: E402
from aiter_lite.ops.triton.quant import mx_quant as tri  # noqa: E402

EPS = 1e-6
# op -> (function name in both backends, values' bytes per element, columns a scale covers,
# input widths read per output column, residual read and its sum written)
OPS = {
    "mxfp4": ("dynamic_mxfp4_quant", 0.5, 32, 1, False),
    "mxfp8": ("dynamic_mxfp8_quant", 1.0, 32, 1, False),
    "nvfp4": ("dynamic_nvfp4_quant", 0.5, 16, 1, False),
    "silu_mxfp4": ("act_mul_and_mxfp4_quant", 0.5, 32, 2, False),
    "rms_mxfp4": ("fused_rms_mxfp4_quant", 0.5, 32, 1, False),
    "add_rms_mxfp4": ("fused_rms_mxfp4_quant", 0.5, 32, 1, True),
    "rms_mxfp8": ("fused_rms_mxfp8_quant", 1.0, 32, 1, False),
    "flatten_mxfp4": ("fused_flatten_mxfp4_quant", 0.5, 32, 1, False),
}
FLATTEN_N2 = 128  # MLA's value head dim: x (M, N / 128, 128)
DEFAULT_MODELS = ["llama3-8B", "llama3-70B", "deepseek-v3"]
DEFAULT_M = [1, 16, 256, 1024, 4096, 16384]


def _nbytes(op, m, n, dtype):
    _, per_value, block, reads, residual = OPS[op]
    e = dtype.itemsize
    return int(reads * m * n * e + m * n * per_value + m * -(-n // block) + (2 * m * n * e if residual else 0))


def _case(op, label, m, n, dtype):
    def make_inputs():
        if op == "silu_mxfp4":
            x = torch.randn(m, 2 * n, device=harness.DEVICE, dtype=dtype) * 3
        elif op == "flatten_mxfp4":
            x = torch.randn(m, n // FLATTEN_N2, FLATTEN_N2, device=harness.DEVICE, dtype=dtype) * 3
        else:
            x = torch.randn(m, n, device=harness.DEVICE, dtype=dtype) * 3
        w = (torch.rand(n, device=harness.DEVICE) + 0.5).to(dtype)
        r = torch.randn(m, n, device=harness.DEVICE, dtype=dtype) if OPS[op][4] else None
        g = torch.full((1,), 448 * 6 / 12.0, device=harness.DEVICE)  # a global scale for amax ~12
        return x, w, r, g

    if op == "flatten_mxfp4" and n % FLATTEN_N2:
        raise SystemExit(f"flatten_mxfp4: N must be a multiple of {FLATTEN_N2}, got {n}")
    case = harness.Case(op=op, label=label, dims={"M": m, "N": n}, dtype=dtype, rows=m,
                        nbytes=_nbytes(op, m, n, dtype), make_inputs=make_inputs)
    case.agrees = functools.partial(_agrees, case)
    return case


def _call(mod, case, inputs):
    """The op of backend ``mod`` on the case's inputs: its (values, scales)."""
    x, w, r, g = inputs
    fn = getattr(mod, OPS[case.op][0])
    if case.op in ("mxfp4", "flatten_mxfp4"):
        return lambda: fn(x)
    if case.op == "mxfp8":
        return lambda: fn(x, None, tri.get_fp8_e4m3_dtype(x.device))
    if case.op == "nvfp4":
        return lambda: fn(x, g)
    if case.op == "silu_mxfp4":
        return lambda: fn(x, "silu")
    if case.op == "rms_mxfp8":
        return lambda: fn(x, w, EPS)
    return lambda: fn(x, w, EPS, None, None, 0.0, r)[0]


def _decoded(q, s, case):
    """(values, one step at each value) in fp32."""
    fmt = OPS[case.op][0]
    if q.dtype.is_floating_point:  # MXFP8: a step is 1/8 of a value (e4m3), 1/4 (e5m2), at least a subnormal's
        v = native.mxfp8_dequant(q, s)
        return v, v.abs() / 4 + native._per_column(native.e8m0_to_float(s), q.shape[-1], 32) * 2.0 ** -9
    if "nvfp4" in fmt:
        block, scale = 16, s.float()
    else:
        block, scale = 32, native.e8m0_to_float(s)
    v = native.e2m1_to_float(q)
    return v * native._per_column(scale, v.shape[-1], block), 2 * native._per_column(scale, v.shape[-1], block)


def _agrees(case, result, reference) -> bool:
    """Decoded within one step of the reference's (the largest of its block, e2m1's top 2);
    NaN where the reference has NaN."""
    got, _ = _decoded(*result, case)
    want, step = _decoded(*reference, case)
    if not torch.equal(got.isnan(), want.isnan()):
        return False
    ok = got.isnan() | ((got - want).abs() <= step * 1.01)
    return bool(ok.all())


_compiled = {}


class _Compiled:
    """torch.compile of the native ops, under their names."""

    def __getattr__(self, name):
        if name not in _compiled:
            _compiled[name] = harness.compile_static(getattr(native, name))
        return _compiled[name]


def _unfused(case, inputs):
    """The fused forms as this project's ops back to back: the norm (the residual add), the
    gated activation or the flattening copy, then the block quantization."""
    from aiter_lite.ops.triton import activation as tri_act
    from aiter_lite.ops.triton.normalization import rmsnorm as tri_rms

    x, w, r, _ = inputs
    op = case.op
    if op == "silu_mxfp4":
        y = torch.empty(x.shape[0], x.shape[1] // 2, device=x.device, dtype=x.dtype)
        return lambda: tri.dynamic_mxfp4_quant(tri_act.silu_and_mul(y, x))
    if op == "flatten_mxfp4":
        return lambda: tri.dynamic_mxfp4_quant(x.reshape(x.shape[0], -1))
    if op == "rms_mxfp8":
        return lambda: tri.dynamic_mxfp8_quant(tri_rms.rms_norm(x, w, EPS), None, tri.get_fp8_e4m3_dtype(x.device))
    if op == "rms_mxfp4":
        return lambda: tri.dynamic_mxfp4_quant(tri_rms.rms_norm(x, w, EPS))
    if op == "add_rms_mxfp4":
        y, r_out = torch.empty_like(x), torch.empty_like(r)
        return lambda: (tri_rms.rmsnorm2d_fwd_with_add(y, x, r, r_out, w, EPS), tri.dynamic_mxfp4_quant(y))[1]
    return None  # the plain quant ops: nothing to fuse


PROVIDERS = {
    "triton": functools.partial(_call, tri),
    "native": functools.partial(_call, native),
    "compile": functools.partial(_call, _Compiled()),
    "unfused": _unfused,
}
RMS_MAX_N = 16384  # the fused norms hold a row in registers


def main(argv=None):
    p = harness.make_parser(__doc__.splitlines()[0], ("M", "N"))
    p.add_argument("--op", nargs="+", default=list(OPS), choices=list(OPS))
    harness.add_sweep_args(p)
    args = p.parse_args(argv)
    shapes = harness.row_shapes(args, DEFAULT_MODELS, DEFAULT_M, lambda cfg: [
        ("", cfg["hidden_size"]), ("-mlp", cfg["intermediate_size"])])
    cases = [c for c in harness.build_cases(args, args.op, shapes, _case)
             if not (c.op.startswith(("rms", "add_rms")) and c.dims["N"] > RMS_MAX_N)]
    tiny = [_case(op, "tiny", 3, 1024, torch.bfloat16) for op in args.op]
    return harness.run(args, "mx_quant", cases, PROVIDERS, tiny)


if __name__ == "__main__":
    main()
