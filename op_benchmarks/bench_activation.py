"""Benchmark gated activations (silu_and_mul, gelu_and_mul, gelu_tanh_and_mul).

    python op_benchmarks/bench_activation.py                       # llama3-8B/70B MLPs, M = 1..32768
    python op_benchmarks/bench_activation.py --model all -o act.csv
    python op_benchmarks/bench_activation.py -M 1 16 64 --cudagraph
    python op_benchmarks/bench_activation.py --shape 4096x14336 --op silu_and_mul

Shapes are (M, N): M tokens, N the MLP's intermediate size (the input row holds 2N).
Bytes moved: read M x 2N, write M x N, so 3 * M * N * element size.
"""

import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

from op_benchmarks.utils import harness  # noqa: E402  (sets TRITON_INTERPRET on CPU before aiter_lite loads)

import torch  # noqa: E402

from aiter_lite.ops.native import activation as native  # noqa: E402
from aiter_lite.ops.triton import activation as act  # noqa: E402

OPS = {"silu_and_mul": "silu", "gelu_and_mul": "gelu", "gelu_tanh_and_mul": "gelu_tanh"}
DEFAULT_MODELS = ["llama3-8B", "llama3-70B"]
DEFAULT_M = [1, 16, 64, 128, 512, 2048, 8192, 16384, 32768]


def _case(op, label, m, n, dtype):
    return harness.Case(
        op=op, label=label, dims={"M": m, "N": n}, dtype=dtype, rows=m,
        nbytes=3 * m * n * dtype.itemsize,
        make_inputs=lambda: (torch.randn(m, 2 * n, device=harness.DEVICE, dtype=dtype),),
    )


def _triton(case, inputs):
    (x,) = inputs
    n, activation = case.dims["N"], OPS[case.op]
    return lambda: act.act_and_mul(torch.empty(x.shape[0], n, device=x.device, dtype=x.dtype), x, activation)


def _native(case, inputs):
    (x,) = inputs
    return lambda: native.gated(x, OPS[case.op])


_compiled = []


def _compile(case, inputs):
    (x,) = inputs
    if not _compiled:
        _compiled.append(harness.compile_static(native.gated))
    return lambda: _compiled[0](x, OPS[case.op])


def _liger(case, inputs):
    try:
        if case.op == "silu_and_mul":
            from liger_kernel.ops.swiglu import LigerSiLUMulFunction as F
        elif case.op == "gelu_tanh_and_mul":
            from liger_kernel.ops.geglu import LigerGELUMulFunction as F
        else:
            return None  # Liger has no erf-GELU gated op
    except ImportError:
        return None
    (x,) = inputs
    n = case.dims["N"]
    # Liger takes gate and up as separate contiguous tensors (its natural use).
    a, b = x[:, :n].contiguous(), x[:, n:].contiguous()
    return lambda: F.apply(a, b)


PROVIDERS = {"triton": _triton, "native": _native, "compile": _compile, "liger": _liger}


def main(argv=None):
    p = harness.make_parser(__doc__.splitlines()[0], ("M", "N"))
    p.add_argument("--op", nargs="+", default=list(OPS), choices=list(OPS))
    args = p.parse_args(argv)
    shapes = harness.row_shapes(args, DEFAULT_MODELS, DEFAULT_M, lambda cfg: [
        (suffix, cfg[key]) for key, suffix in (("intermediate_size", ""), ("moe_intermediate_size", "-moe"))
        if key in cfg])
    cases = harness.build_cases(args, args.op, shapes, _case)
    tiny = [_case(op, "tiny", 3, 96, torch.bfloat16) for op in args.op]
    return harness.run(args, "activation", cases, PROVIDERS, tiny)


if __name__ == "__main__":
    main()
