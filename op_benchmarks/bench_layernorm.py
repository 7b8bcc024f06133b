"""Benchmark LayerNorm (layer_norm, layernorm2d_fwd_with_add, layer_norm_bwd).

    python op_benchmarks/bench_layernorm.py                        # 5 models' hidden sizes, M = 1..32768
    python op_benchmarks/bench_layernorm.py --model all -o ln.csv
    python op_benchmarks/bench_layernorm.py --sweep                # N = 256..262144 at M * N = 2**26
    python op_benchmarks/bench_layernorm.py --shape 4096x8192 --op layer_norm_bwd

Shapes are (M, N): M tokens, N the hidden size (the normalized dim). Weight and bias in the input's dtype.
Bytes moved (each input read once, each output written once; e = element size):
    layer_norm                read x, weight, bias; write y                             (2 * M * N + 2 * N) * e
    layernorm2d_fwd_with_add  read x, residual_in, weight, bias; write out, res_out     (4 * M * N + 2 * N) * e
    layer_norm_bwd            read x, dy, weight, fp32 mean and rstd; write dx, dw, db  (3 * M * N + 3 * N) * e + 8 * M
The add op is timed out of place (fresh outputs each call); the backward times only the
backward of a forward run once beforehand.
"""

import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

from op_benchmarks.utils import harness  # noqa: E402  (sets TRITON_INTERPRET on CPU before aiter_lite loads)

import torch  # noqa: E402

from aiter_lite.ops.native.normalization import layernorm as native  # noqa: E402
from aiter_lite.ops.triton.normalization import layernorm as ln  # noqa: E402

OPS = ("layer_norm", "layernorm2d_fwd_with_add", "layer_norm_bwd")
DEFAULT_MODELS = ["llama3-8B", "qwen2.5-32B", "deepseek-v3", "llama3-70B", "llama3-405B"]
DEFAULT_M = [1, 16, 64, 256, 1024, 4096, 16384, 32768]
EPS = 1e-5


def _nbytes(op, m, n, e):
    if op == "layer_norm":
        return (2 * m * n + 2 * n) * e
    if op == "layernorm2d_fwd_with_add":
        return (4 * m * n + 2 * n) * e
    return (3 * m * n + 3 * n) * e + 8 * m


def _case(op, label, m, n, dtype):
    def make_inputs():
        x = torch.randn(m, n, device=harness.DEVICE, dtype=dtype)
        w = torch.randn(n, device=harness.DEVICE, dtype=dtype) * 0.1 + 1
        b = torch.randn(n, device=harness.DEVICE, dtype=dtype) * 0.1 + 1
        if op == "layernorm2d_fwd_with_add":
            return x, w, b, torch.randn_like(x)
        if op == "layer_norm_bwd":
            return x.requires_grad_(), w.requires_grad_(), b.requires_grad_(), torch.randn_like(x)
        return x, w, b

    return harness.Case(op=op, label=label, dims={"M": m, "N": n}, dtype=dtype, rows=m,
                        nbytes=_nbytes(op, m, n, dtype.itemsize), make_inputs=make_inputs)


def _timed(case, inputs, fwd, add):
    """The callable to time for case.op, given a provider's fwd(x, w, b) and add(x, r, w, b) -> (out, res_out)."""
    if case.op == "layer_norm":
        x, w, b = inputs
        return lambda: fwd(x, w, b)
    if case.op == "layernorm2d_fwd_with_add":
        x, w, b, r = inputs
        return None if add is None else lambda: add(x, r, w, b)
    x, w, b, dy = inputs
    y = fwd(x, w, b)  # the forward stays out of the timing; retain_graph lets the backward repeat
    return lambda: torch.autograd.grad(y, (x, w, b), dy, retain_graph=True)


def _triton_add(x, r, w, b):
    out, res = torch.empty_like(x), torch.empty_like(x)
    ln.layernorm2d_fwd_with_add(out, x, r, res, w, b, EPS)
    return out, res


def _native_fwd(x, w, b):
    return native.layer_norm(x, w, b, EPS)


def _native_add(x, r, w, b):
    # Functional form of native.layernorm2d_fwd_with_add (which copy_'s into its outputs),
    # so that torch.compile sees a pure function.
    s = x.float() + r.float()
    return native.layer_norm(s, w, b, EPS).to(x.dtype), s.to(x.dtype)


def _triton(case, inputs):
    return _timed(case, inputs, lambda x, w, b: ln.layer_norm(x, w, b, EPS), _triton_add)


def _native(case, inputs):
    return _timed(case, inputs, _native_fwd, _native_add)


_compiled = {}


def _compile(case, inputs):
    if not _compiled:
        _compiled.update(fwd=harness.compile_static(_native_fwd), add=harness.compile_static(_native_add))
    # For the backward, AOTAutograd compiles the backward graph along with the forward.
    return _timed(case, inputs, _compiled["fwd"], _compiled["add"])


def _liger(case, inputs):
    try:
        from liger_kernel.ops.layer_norm import LigerLayerNormFunction as LN
    except ImportError:
        return None
    if case.dims["N"] > 65536:
        return None  # Liger holds a whole row in one block, at most 64K columns
    # (X, W, B, eps); math in fp32, one cast at the end, as ours. Liger has no fused add + LayerNorm.
    return _timed(case, inputs, lambda x, w, b: LN.apply(x, w, b, EPS), None)


PROVIDERS = {"triton": _triton, "native": _native, "compile": _compile, "liger": _liger}


def main(argv=None):
    p = harness.make_parser(__doc__.splitlines()[0], ("M", "N"))
    p.add_argument("--op", nargs="+", default=list(OPS), choices=list(OPS))
    harness.add_sweep_args(p)
    args = p.parse_args(argv)
    harness.eager_only_backward(args)
    shapes = harness.row_shapes(args, DEFAULT_MODELS, DEFAULT_M, lambda cfg: [("", cfg["hidden_size"])])
    cases = harness.build_cases(args, args.op, shapes, _case)
    tiny = [_case(op, "tiny", 3, 96, torch.bfloat16) for op in args.op]
    return harness.run(args, "layernorm", cases, PROVIDERS, tiny)


if __name__ == "__main__":
    main()
