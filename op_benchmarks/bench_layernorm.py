"""Benchmark LayerNorm (layer_norm, layernorm2d_fwd_with_add) and the backward of each.

    python op_benchmarks/bench_layernorm.py                        # 5 models' hidden sizes, M = 1..32768
    python op_benchmarks/bench_layernorm.py --model all -o ln.csv
    python op_benchmarks/bench_layernorm.py --sweep                # N = 256..262144 at M * N = 2**26
    python op_benchmarks/bench_layernorm.py --shape 4096x8192 --op layer_norm_bwd
    python op_benchmarks/bench_layernorm.py --direction bwd -o ln_bwd.csv  # llama3-8B/70B, M = 1..32768
    python op_benchmarks/bench_layernorm.py --op layernorm2d_fwd_with_add_bwd -M 4096 16384

With no --op and no --direction the ops are layer_norm, layernorm2d_fwd_with_add and
layer_norm_bwd; --direction fwd: the two forward ops; --direction bwd: the backward of each
(every --op turned into that direction), on llama3-8B's and llama3-70B's hidden sizes unless
--model says otherwise. The CSV's op column names the direction (<op>_bwd rows are backward).
Shapes are (M, N): M tokens, N the hidden size (the normalized dim). Weight and bias in the input's dtype.
Bytes moved (each input read once, each output written once; e = element size):
    layer_norm                    read x, weight, bias; write y                          (2 * M * N + 2 * N) * e
    layernorm2d_fwd_with_add      read x, residual_in, weight, bias; write out, res_out  (4 * M * N + 2 * N) * e
    layer_norm_bwd                read x, dy, weight, fp32 mean and rstd;                (3 * M * N + 3 * N) * e + 8 * M
                                  write dx, dw, db
    layernorm2d_fwd_with_add_bwd  read the saved res_out, dy, res_out's gradient,        (4 * M * N + 3 * N) * e + 8 * M
                                  weight, fp32 mean and rstd; write dx (also the
                                  residual's gradient: one tensor), dw, db
The add op is timed out of place (fresh outputs each call). A backward op times
torch.autograd.grad of a forward run once beforehand, with respect to x, weight and bias (and
the residual): triton through the public op under autograd, native and compile the fp32
reference under autograd (compile: its compiled backward), liger LigerLayerNormFunction
(Liger has no fused add + LayerNorm). --cudagraph captures the backward ops too.
"""

import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

from op_benchmarks.utils import harness  # noqa: E402, F401  (sets TRITON_INTERPRET on CPU before aiter_lite loads)

import torch  # noqa: E402

from aiter_lite.ops.native.normalization import layernorm as native  # noqa: E402
from aiter_lite.ops.triton.normalization import layernorm as ln  # noqa: E402
from op_benchmarks.utils.norm import NormBench  # noqa: E402

OPS = ("layer_norm", "layernorm2d_fwd_with_add", "layer_norm_bwd", "layernorm2d_fwd_with_add_bwd")
EPS = 1e-5


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


def _liger(case, inputs):
    try:
        from liger_kernel.ops.layer_norm import LigerLayerNormFunction as LN
    except ImportError:
        return None
    # (X, W, B, eps); math in fp32, one cast at the end, as ours. Liger has no fused add + LayerNorm.
    return (lambda x, w, b: LN.apply(x, w, b, EPS)), None, inputs


BENCH = NormBench("layernorm", OPS, 2, triton_fwd=lambda x, w, b: ln.layer_norm(x, w, b, EPS),
                  triton_add=_triton_add, native_fwd=_native_fwd, native_add=_native_add, liger=_liger)
PROVIDERS = BENCH.providers()


def main(argv=None):
    return BENCH.main(argv, __doc__.splitlines()[0])


if __name__ == "__main__":
    main()
