"""Benchmark RMSNorm (rms_norm, rmsnorm2d_fwd_with_add, fused_add_rmsnorm_pad) and the backward of each.

    python op_benchmarks/bench_rmsnorm.py                          # 5 models' hidden sizes, M = 1..32768
    python op_benchmarks/bench_rmsnorm.py --model all -o rms.csv
    python op_benchmarks/bench_rmsnorm.py --sweep                  # N = 256..262144 at M * N = 2**26
    python op_benchmarks/bench_rmsnorm.py --shape 4096x8192 --op rms_norm_bwd
    python op_benchmarks/bench_rmsnorm.py --direction bwd -o rms_bwd.csv   # llama3-8B/70B, M = 1..32768
    python op_benchmarks/bench_rmsnorm.py --op rmsnorm2d_fwd_with_add_bwd -M 4096 16384
    python op_benchmarks/bench_rmsnorm.py --op fused_add_rmsnorm_pad --shape 1x2880 256x2880 8192x2880 \
        --providers triton,native,compile,unfused          # gpt-oss: hidden 2880 padded to 3072

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
    fused_add_rmsnorm_pad        read x, res, weight; write res_out and out        (3 * M * N + M * P + N) * e
                                 padded to P = ceil(N / 256) * 256 columns
The add op is timed out of place (fresh outputs each call). A backward op times
torch.autograd.grad of a forward run once beforehand, with respect to x and weight (and the
residual): triton through the public op under autograd, native and compile the fp32
reference under autograd (compile: its compiled backward), liger LigerRMSNormFunction /
LigerFusedAddRMSNormFunction. --cudagraph captures the backward ops too.
fused_add_rmsnorm_pad (aiter's, as vLLM and SGLang call it for gpt-oss: pad to a multiple of 256)
has its own providers: triton, native (the fp32 reference), compile (torch.compile of it) and
unfused (this project's rmsnorm2d_fwd_with_add, then torch's pad: the sequence without the
fusion); the model widths are multiples of 256 (no pad columns): give --shape Mx2880 for gpt-oss's.
"""

import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

from op_benchmarks.utils import harness  # noqa: E402, F401  (sets TRITON_INTERPRET on CPU before aiter_lite loads)

import torch  # noqa: E402

from aiter_lite.ops.native.normalization import fused_add_rmsnorm_pad as native_pad  # noqa: E402
from aiter_lite.ops.native.normalization import rmsnorm as native  # noqa: E402
from aiter_lite.ops.triton.normalization import fused_add_rmsnorm_pad as tri_pad  # noqa: E402
from aiter_lite.ops.triton.normalization import rmsnorm as rms  # noqa: E402
from op_benchmarks.utils.norm import NormBench  # noqa: E402

PAD_OP = "fused_add_rmsnorm_pad"
OPS = ("rms_norm", "rmsnorm2d_fwd_with_add", "rms_norm_bwd", "rmsnorm2d_fwd_with_add_bwd", PAD_OP)
EPS = 1e-6
PAD_TO = 256  # gpt-oss's x_pad_to_multiple in vLLM / SGLang (2880 -> 3072)


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


def _unfused_pad(x, w, r):
    out, res = _triton_add(x, r, w)
    return torch.nn.functional.pad(out, (0, -x.shape[-1] % PAD_TO)), res


class _RmsNormBench(NormBench):
    """NormBench's four RMSNorm ops, and aiter's padded fused add (PAD_OP) with its own providers."""

    _pad = {"triton": lambda x, w, r: tri_pad.fused_add_rmsnorm_pad(x, w, EPS, r, PAD_TO),
            "native": lambda x, w, r: native_pad.fused_add_rmsnorm_pad(x, w, EPS, r, PAD_TO),
            "unfused": _unfused_pad}

    def nbytes(self, op: str, m: int, n: int, e: int) -> int:
        if op != PAD_OP:
            return super().nbytes(op, m, n, e)
        return (3 * m * n + m * (n + -n % PAD_TO) + n) * e

    def case(self, op: str, label: str, m: int, n: int, dtype: torch.dtype) -> harness.Case:
        if op != PAD_OP:
            return super().case(op, label, m, n, dtype)

        def make_inputs():
            x = torch.randn(m, n, device=harness.DEVICE, dtype=dtype)
            return x, torch.randn(n, device=harness.DEVICE, dtype=dtype) * 0.1 + 1, torch.randn_like(x)

        return harness.Case(op=op, label=label, dims={"M": m, "N": n}, dtype=dtype, rows=m,
                             nbytes=self.nbytes(op, m, n, dtype.itemsize), make_inputs=make_inputs,
                             extra={"pad_to": PAD_TO})

    def providers(self):
        base = super().providers()

        def make(name):
            def provider(case, inputs):
                if case.op != PAD_OP:
                    return base[name](case, inputs) if name in base else None
                if name == "compile" and "compile" not in self._pad:
                    self._pad["compile"] = harness.compile_static(self._pad["native"])
                fn = self._pad.get(name)
                return None if fn is None else (lambda: fn(*inputs))
            return provider

        return {name: make(name) for name in (*base, "unfused")}


BENCH = _RmsNormBench("rmsnorm", OPS, 1, triton_fwd=lambda x, w: rms.rms_norm(x, w, EPS), triton_add=_triton_add,
                      native_fwd=_native_fwd, native_add=_native_add, liger=_liger)
PROVIDERS = BENCH.providers()


def main(argv=None):
    return BENCH.main(argv, __doc__.splitlines()[0])


if __name__ == "__main__":
    main()
