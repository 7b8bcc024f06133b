"""Benchmark fp8 / int8 activation quantization (per tensor, per token, per token group).

    python op_benchmarks/bench_quant.py                            # 3 models' hidden and MLP sizes, M = 1..16384
    python op_benchmarks/bench_quant.py --sweep                    # N = 256..262144 at M * N = 2**26
    python op_benchmarks/bench_quant.py --shape 4096x7168 --op group_128 --qdtype int8
    python op_benchmarks/bench_quant.py -M 1 16 --cudagraph --model deepseek-v3

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
Providers: triton (aiter_lite), native (the eager fp32 PyTorch reference), compile
(torch.compile of it). Liger has no quantization op.
"""

import functools
import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

from op_benchmarks.utils import harness  # noqa: E402  (sets TRITON_INTERPRET on CPU before aiter_lite loads)

import torch  # noqa: E402

from aiter_lite.ops.native import quant as native  # noqa: E402
from aiter_lite.ops.triton import quant as tri  # noqa: E402

# op -> (function name in both backends, group size or None)
OPS = {
    "static_per_tensor": ("static_per_tensor_quant_fp8_i8", None),
    "dynamic_per_tensor": ("dynamic_per_tensor_quant_fp8_i8", None),
    "dynamic_per_token": ("dynamic_per_token_quant_fp8_i8", None),
    "group_128": ("per_token_group_quant", 128),
    "group_64": ("per_token_group_quant", 64),
}
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


def _case(op, label, m, n, dtype, qdtype):
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
        rows=m, nbytes=nbytes, make_inputs=make_inputs,
    )


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
    return lambda: fn(qx, x, scale)


def _triton(case, inputs):
    return _call(getattr(tri, OPS[case.op][0]), case, *_outputs(case, inputs))


def _native(case, inputs):
    return _call(getattr(native, OPS[case.op][0]), case, *_outputs(case, inputs))


_compiled = {}


def _compile(case, inputs):
    name = OPS[case.op][0]
    if name not in _compiled:
        _compiled[name] = harness.compile_static(getattr(native, name))
    return _call(_compiled[name], case, *_outputs(case, inputs))


PROVIDERS = {"triton": _triton, "native": _native, "compile": _compile}


def main(argv=None):
    p = harness.make_parser(__doc__.splitlines()[0], ("M", "N"))
    p.add_argument("--op", nargs="+", default=list(OPS), choices=list(OPS))
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
