"""Benchmark softmax and log_softmax over the last dim.

    python op_benchmarks/bench_softmax.py                          # 4 models' vocab sizes, M = 1..4096
    python op_benchmarks/bench_softmax.py --sweep                  # N = 256..262144 at M * N = 2**26
    python op_benchmarks/bench_softmax.py --shape 16384x32768 4096x151936 --op softmax
    python op_benchmarks/bench_softmax.py -M 1 16 --cudagraph

Shapes are (M, N): M rows, N the softmax width (a vocabulary, an attention row).
Bytes moved: read M x N, write M x N, so 2 * M * N * element size.
Providers: triton (aiter_lite), native (eager torch.softmax in fp32, cast back),
compile (torch.compile of it), liger (LigerSoftmaxFunction, softmax only; it has no
kernel for rows past 65536 elements).
"""

import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

from op_benchmarks.utils import harness  # noqa: E402  (sets TRITON_INTERPRET on CPU before aiter_lite loads)

import torch  # noqa: E402

from aiter_lite.ops.native import softmax as native  # noqa: E402
from aiter_lite.ops.triton import softmax as tri  # noqa: E402

OPS = ("softmax", "log_softmax")
DEFAULT_MODELS = ["mixtral-8x7B", "llama3-8B", "qwen3-235B-A22B", "gemma2-27B"]
DEFAULT_M = [1, 16, 64, 256, 1024, 4096]
LIGER_MAX_N = 65536


def _case(op, label, m, n, dtype):
    return harness.Case(
        op=op, label=label, dims={"M": m, "N": n}, dtype=dtype, rows=m, nbytes=2 * m * n * dtype.itemsize,
        make_inputs=lambda: (torch.randn(m, n, device=harness.DEVICE, dtype=dtype) * 4,),
    )


def _triton(case, inputs):
    (x,) = inputs
    fn = getattr(tri, case.op)
    return lambda: fn(x)


def _native(case, inputs):
    (x,) = inputs
    fn = getattr(native, case.op)
    return lambda: fn(x)


_compiled = {}


def _compile(case, inputs):
    (x,) = inputs
    if case.op not in _compiled:
        _compiled[case.op] = harness.compile_static(getattr(native, case.op))
    return lambda: _compiled[case.op](x)


def _liger(case, inputs):
    if case.op != "softmax" or case.dims["N"] > LIGER_MAX_N:
        return None
    try:
        from liger_kernel.ops.softmax import LigerSoftmaxFunction
    except ImportError:
        return None
    (x,) = inputs
    return lambda: LigerSoftmaxFunction.apply(x)


PROVIDERS = {"triton": _triton, "native": _native, "compile": _compile, "liger": _liger}


def main(argv=None):
    p = harness.make_parser(__doc__.splitlines()[0], ("M", "N"))
    p.add_argument("--op", nargs="+", default=list(OPS), choices=list(OPS))
    harness.add_sweep_args(p)
    args = p.parse_args(argv)
    shapes = harness.row_shapes(args, DEFAULT_MODELS, DEFAULT_M, lambda cfg: [("", cfg["vocab_size"])])
    cases = harness.build_cases(args, args.op, shapes, _case)
    tiny = [_case(op, "tiny", 3, 1000, torch.bfloat16) for op in args.op]
    return harness.run(args, "softmax", cases, PROVIDERS, tiny)


if __name__ == "__main__":
    main()
