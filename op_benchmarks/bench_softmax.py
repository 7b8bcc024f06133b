"""Benchmark softmax and log_softmax over the last dim, forward and backward.

    python op_benchmarks/bench_softmax.py                          # 4 models' vocab sizes, M = 1..4096
    python op_benchmarks/bench_softmax.py --sweep                  # N = 256..262144 at M * N = 2**26
    python op_benchmarks/bench_softmax.py --shape 16384x32768 4096x151936 --op softmax
    python op_benchmarks/bench_softmax.py --op softmax_bwd log_softmax_bwd --sweep
    python op_benchmarks/bench_softmax.py -M 1 16 --cudagraph

Shapes are (M, N): M rows, N the softmax width (a vocabulary, an attention row).
Bytes moved (e = element size):
    softmax, log_softmax           read x; write y                 2 * M * N * e
    softmax_bwd, log_softmax_bwd   read y, dy; write dx            3 * M * N * e
The backward ops time the backward alone, from the forward's output y (computed once
beforehand) and a random dy: each provider's backward called directly, no autograd
engine (so --cudagraph times them too).
Providers: triton (aiter_lite), native (forward: eager torch.softmax in fp32, cast back;
backward: torch._softmax_backward_data / torch._log_softmax_backward_data in the input's
dtype, fp32 sums), compile (torch.compile of it), liger (LigerSoftmaxFunction, softmax
only; it has no kernel for rows past 65536 elements).
"""

import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

from op_benchmarks.utils import harness  # noqa: E402  (sets TRITON_INTERPRET on CPU before aiter_lite loads)

import torch  # noqa: E402

from aiter_lite.ops.native import softmax as native  # noqa: E402
from aiter_lite.ops.triton import softmax as tri  # noqa: E402

OPS = ("softmax", "log_softmax", "softmax_bwd", "log_softmax_bwd")
DEFAULT_MODELS = ["mixtral-8x7B", "llama3-8B", "qwen3-235B-A22B", "gemma2-27B"]
DEFAULT_M = [1, 16, 64, 256, 1024, 4096]
LIGER_MAX_N = 65536


def _fwd_op(op: str) -> str:
    return op.removesuffix("_bwd")


def _case(op, label, m, n, dtype):
    def make_inputs():
        x = torch.randn(m, n, device=harness.DEVICE, dtype=dtype) * 4
        if op == _fwd_op(op):
            return (x,)
        return getattr(native, _fwd_op(op))(x), torch.randn_like(x)  # (y, dy)

    moved = 2 if op == _fwd_op(op) else 3
    return harness.Case(op=op, label=label, dims={"M": m, "N": n}, dtype=dtype, rows=m,
                        nbytes=moved * m * n * dtype.itemsize, make_inputs=make_inputs)


def _triton(case, inputs):
    if case.op == _fwd_op(case.op):
        (x,) = inputs
        fn = getattr(tri, case.op)
        return lambda: fn(x)
    y, dy = inputs
    op = _fwd_op(case.op)
    return lambda: tri._softmax_backward(op, y, dy, y.dim() - 1, op == "log_softmax")


def _torch_backward(op: str):
    """torch's own backward of ``op`` over the last dim: (y, dy) -> dx."""
    bwd = torch._log_softmax_backward_data if op == "log_softmax_bwd" else torch._softmax_backward_data
    return lambda y, dy: bwd(dy, y, -1, y.dtype)


def _native_fn(op: str):
    return _torch_backward(op) if op != _fwd_op(op) else getattr(native, op)


def _native(case, inputs):
    fn = _native_fn(case.op)
    return lambda: fn(*inputs)


_compiled = {}


def _compile(case, inputs):
    if case.op not in _compiled:
        _compiled[case.op] = harness.compile_static(_native_fn(case.op))
    return lambda: _compiled[case.op](*inputs)


class _Ctx:
    """Stands in for autograd's context: Liger's forward sets it up, its backward reads it
    (so the backward is called directly, without the autograd engine)."""

    def save_for_backward(self, *tensors):
        self.saved_tensors = tensors


def _liger(case, inputs):
    if _fwd_op(case.op) != "softmax" or case.dims["N"] > LIGER_MAX_N:
        return None
    try:
        from liger_kernel.ops.softmax import LigerSoftmaxFunction
    except ImportError:
        return None
    if case.op == "softmax":
        (x,) = inputs
        return lambda: LigerSoftmaxFunction.apply(x)
    y, dy = inputs
    ctx = _Ctx()
    LigerSoftmaxFunction.forward(ctx, y)  # its launch settings for this width
    ctx.saved_tensors = (y,)  # the backward reads the same y as every provider
    return lambda: LigerSoftmaxFunction.backward(ctx, dy)


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
