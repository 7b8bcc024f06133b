"""Benchmark RMSNorm (rms_norm, rmsnorm2d_fwd_with_add) and the backward of each.

    python op_benchmarks/bench_rmsnorm.py                          # 5 models' hidden sizes, M = 1..32768
    python op_benchmarks/bench_rmsnorm.py --model all -o rms.csv
    python op_benchmarks/bench_rmsnorm.py --sweep                  # N = 256..262144 at M * N = 2**26
    python op_benchmarks/bench_rmsnorm.py --shape 4096x8192 --op rms_norm_bwd
    python op_benchmarks/bench_rmsnorm.py --direction bwd -o rms_bwd.csv   # llama3-8B/70B, M = 1..32768
    python op_benchmarks/bench_rmsnorm.py --op rmsnorm2d_fwd_with_add_bwd -M 4096 16384

With no --op and no --direction the ops are rms_norm, rmsnorm2d_fwd_with_add and rms_norm_bwd;
--direction fwd: the two forward ops; --direction bwd: the backward of each (every --op turned
into that direction), on llama3-8B's and llama3-70B's hidden sizes unless --model says
otherwise. The CSV's op column names the direction (<op>_bwd rows are backward).
Shapes are (M, N): M tokens, N the hidden size (the normalized dim). Weight in the input's dtype.
Bytes moved (each input read once, each output written once; e = element size):
    rms_norm                     read x, weight; write y                           (2 * M * N + N) * e
    rmsnorm2d_fwd_with_add       read x, residual_in, weight; write out, res_out   (4 * M * N + N) * e
    rms_norm_bwd                 read x, dy, weight, fp32 rstd; write dx, dweight  (3 * M * N + 2 * N) * e + 4 * M
    rmsnorm2d_fwd_with_add_bwd   read the saved res_out, dy, res_out's gradient,   (4 * M * N + 2 * N) * e + 4 * M
                                 weight, fp32 rstd; write dx (also the residual's
                                 gradient: one tensor), dweight
The add op is timed out of place (fresh outputs each call). A backward op times
torch.autograd.grad of a forward run once beforehand, with respect to x and weight (and the
residual): triton through the public op under autograd, native and compile the fp32
reference under autograd (compile: its compiled backward), liger LigerRMSNormFunction /
LigerFusedAddRMSNormFunction. --cudagraph captures the backward ops too.
"""

import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

from op_benchmarks.utils import harness  # noqa: E402, F401  (sets TRITON_INTERPRET on CPU before aiter_lite loads)

import torch  # noqa: E402

from aiter_lite.ops.native.normalization import rmsnorm as native  # noqa: E402
from aiter_lite.ops.triton.normalization import rmsnorm as rms  # noqa: E402
from op_benchmarks.utils.norm import NormBench  # noqa: E402

OPS = ("rms_norm", "rmsnorm2d_fwd_with_add", "rms_norm_bwd", "rmsnorm2d_fwd_with_add_bwd")
EPS = 1e-6


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


def _liger(case, inputs):
    try:
        from liger_kernel.ops.fused_add_rms_norm import LigerFusedAddRMSNormFunction as FusedAdd
        from liger_kernel.ops.rms_norm import LigerRMSNormFunction as RMS
    except ImportError:
        return None
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
    return fwd, add, inputs


BENCH = NormBench("rmsnorm", OPS, 1, triton_fwd=lambda x, w: rms.rms_norm(x, w, EPS), triton_add=_triton_add,
                  native_fwd=_native_fwd, native_add=_native_add, liger=_liger)
PROVIDERS = BENCH.providers()


def main(argv=None):
    return BENCH.main(argv, __doc__.splitlines()[0])


if __name__ == "__main__":
    main()
