"""Benchmark RMSNorm (rms_norm, rmsnorm2d_fwd_with_add, rms_norm_bwd).

    python op_benchmarks/bench_rmsnorm.py                          # 5 models' hidden sizes, M = 1..32768
    python op_benchmarks/bench_rmsnorm.py --model all -o rms.csv
    python op_benchmarks/bench_rmsnorm.py --sweep                  # N = 256..262144 at M * N = 2**26
    python op_benchmarks/bench_rmsnorm.py --shape 4096x8192 --op rms_norm_bwd

Shapes are (M, N): M tokens, N the hidden size (the normalized dim). Weight in the input's dtype.
Bytes moved (each input read once, each output written once; e = element size):
    rms_norm                 read x, weight; write y                           (2 * M * N + N) * e
    rmsnorm2d_fwd_with_add   read x, residual_in, weight; write out, res_out   (4 * M * N + N) * e
    rms_norm_bwd             read x, dy, weight, fp32 rstd; write dx, dweight  (3 * M * N + 2 * N) * e + 4 * M
The add op is timed out of place (fresh outputs each call); the backward times only the
backward of a forward run once beforehand.
"""

import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

from op_benchmarks.utils import harness  # noqa: E402  (sets TRITON_INTERPRET on CPU before aiter_lite loads)

import torch  # noqa: E402

from aiter_lite.ops.native.normalization import rmsnorm as native  # noqa: E402
from aiter_lite.ops.triton.normalization import rmsnorm as rms  # noqa: E402

OPS = ("rms_norm", "rmsnorm2d_fwd_with_add", "rms_norm_bwd")
DEFAULT_MODELS = ["llama3-8B", "qwen2.5-32B", "deepseek-v3", "llama3-70B", "llama3-405B"]
DEFAULT_M = [1, 16, 64, 256, 1024, 4096, 16384, 32768]
EPS = 1e-6


def _nbytes(op, m, n, e):
    if op == "rms_norm":
        return (2 * m * n + n) * e
    if op == "rmsnorm2d_fwd_with_add":
        return (4 * m * n + n) * e
    return (3 * m * n + 2 * n) * e + 4 * m


def _case(op, label, m, n, dtype):
    def make_inputs():
        x = torch.randn(m, n, device=harness.DEVICE, dtype=dtype)
        w = torch.randn(n, device=harness.DEVICE, dtype=dtype) * 0.1 + 1
        if op == "rmsnorm2d_fwd_with_add":
            return x, w, torch.randn_like(x)
        if op == "rms_norm_bwd":
            return x.requires_grad_(), w.requires_grad_(), torch.randn_like(x)
        return x, w

    return harness.Case(op=op, label=label, dims={"M": m, "N": n}, dtype=dtype, rows=m,
                        nbytes=_nbytes(op, m, n, dtype.itemsize), make_inputs=make_inputs)


def _timed(case, inputs, fwd, add):
    """The callable to time for case.op, given a provider's fwd(x, w) and add(x, r, w) -> (out, res_out)."""
    if case.op == "rms_norm":
        x, w = inputs
        return lambda: fwd(x, w)
    if case.op == "rmsnorm2d_fwd_with_add":
        x, w, r = inputs
        return None if add is None else lambda: add(x, r, w)
    x, w, dy = inputs
    y = fwd(x, w)  # the forward stays out of the timing; retain_graph lets the backward repeat
    return lambda: torch.autograd.grad(y, (x, w), dy, retain_graph=True)


def _triton_add(x, r, w):
    out, res = torch.empty_like(x), torch.empty_like(x)
    rms.rmsnorm2d_fwd_with_add(out, x, r, res, w, EPS)
    return out, res


def _native_fwd(x, w):
    return native.rms_norm(x, w, EPS)


def _native_add(x, r, w):
    # Functional form of native.rmsnorm2d_fwd_with_add (which copy_'s into its outputs),
    # so that torch.compile sees a pure function.
    s = x.float() + r.float()
    return native.rms_norm(s, w, EPS).to(x.dtype), s.to(x.dtype)


def _triton(case, inputs):
    return _timed(case, inputs, lambda x, w: rms.rms_norm(x, w, EPS), _triton_add)


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
        from liger_kernel.ops.fused_add_rms_norm import LigerFusedAddRMSNormFunction as FusedAdd
        from liger_kernel.ops.rms_norm import LigerRMSNormFunction as RMS
    except ImportError:
        return None
    if case.dims["N"] > 65536:
        return None  # Liger holds a whole row in one block, at most 64K columns
    # casting_mode "gemma": all math in fp32, one cast at the end, as ours and the reference
    # ("llama" rounds x * rstd to the input dtype before the weight multiply).
    # RMS: (X, W, eps, offset, casting_mode, in_place, row_mode); in_place=True (Liger's
    # default) writes dx over dy. FusedAdd: (X, R, W, eps, offset, casting_mode, in_place) -> (Y, S).
    fwd = lambda x, w: RMS.apply(x, w, EPS, 0.0, "gemma", True, None)  # noqa: E731
    add = lambda x, r, w: FusedAdd.apply(x, r, w, EPS, 0.0, "gemma", False)  # noqa: E731
    if case.op == "rms_norm_bwd":
        # Its own dy: the checked first call sees the real dy and the other providers' dy stays
        # intact; later timed calls run on the previous dx, which does not change the time.
        inputs = (*inputs[:2], inputs[2].clone())
    return _timed(case, inputs, fwd, add)


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
    return harness.run(args, "rmsnorm", cases, PROVIDERS, tiny)


if __name__ == "__main__":
    main()
