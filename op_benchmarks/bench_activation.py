"""Benchmark gated activations (silu_and_mul, gelu_and_mul, gelu_tanh_and_mul) and their backward; vLLM's
forward-only activations on request (mul_and_silu, fatrelu_and_mul, swigluoai_and_mul, gelu_new, gelu_fast,
gelu_quick).

    python op_benchmarks/bench_activation.py                       # llama3-8B/70B MLPs, M = 1..32768
    python op_benchmarks/bench_activation.py --model all -o act.csv
    python op_benchmarks/bench_activation.py -M 1 16 64 --cudagraph
    python op_benchmarks/bench_activation.py --shape 4096x14336 --op silu_and_mul
    python op_benchmarks/bench_activation.py --direction bwd -o act_bwd.csv   # the backward of each op, M = 1..8192
    python op_benchmarks/bench_activation.py --op silu_and_mul_bwd -M 4096 16384
    python op_benchmarks/bench_activation.py --op swigluoai_and_mul gelu_new --shape 4096x2880

Shapes are (M, N): M tokens, N the MLP's intermediate size (the input row holds 2N).
Bytes moved (each input read once, each output written once; e = element size):
    <op>        read x (M x 2N); write y (M x N)                          3 * M * N * e
    <op>_bwd    read x (M x 2N) and dy (M x N); write dx (M x 2N)         5 * M * N * e
    gelu_new, gelu_fast, gelu_quick (elementwise): read x (M x N); write y 2 * M * N * e
The forward-only ops time their public op (mul_and_silu: act_and_mul_rounded with act_first=False)
against their fp32 reference (native, compile); they have no backward.
A backward op times ``torch.autograd.grad(y, x, dy)`` of a forward run once beforehand:
triton is the public op (``act_and_mul``) with x requiring grad, native and compile are
the fp32 reference under autograd (compile: its compiled backward), liger is
LigerSiLUMulFunction / LigerGELUMulFunction on gate and up as two tensors (its
gradients land in them). ``--direction bwd`` runs the backward of every op (or of each
--op); the CSV's op column names the direction (--cudagraph captures the backward too), and
by default at M = 1, 16, 128, 1024, 4096, 8192: all providers' graphs at 16384 x 14336 hold
more than an H100's memory (the fp32 reference keeps x in fp32).
"""

import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

from op_benchmarks.utils import harness  # noqa: E402  (sets TRITON_INTERPRET on CPU before aiter_lite loads)

import torch  # noqa: E402

from aiter_lite.ops.native import activation as native  # noqa: E402
from aiter_lite.ops.triton import activation as act  # noqa: E402

OPS = {"silu_and_mul": "silu", "gelu_and_mul": "gelu", "gelu_tanh_and_mul": "gelu_tanh"}
# Forward only (vLLM's ops): the public Triton op and the fp32 reference, each ``fn(out, x)``
# (gated) or ``fn(x)`` (elementwise).
FORWARD_ONLY = {
    "mul_and_silu": (lambda out, x: act.act_and_mul_rounded(out, x, "silu", False),
                     lambda out, x: native.act_and_mul_rounded(out, x, "silu", False)),
    "fatrelu_and_mul": (lambda out, x: act.fatrelu_and_mul(out, x, 0.1),
                        lambda out, x: native.fatrelu_and_mul(out, x, 0.1)),
    "swigluoai_and_mul": (act.swigluoai_and_mul, native.swigluoai_and_mul),
    "gelu_new": (act.gelu_new, native.gelu_new),
    "gelu_fast": (act.gelu_fast, native.gelu_fast),
    "gelu_quick": (act.gelu_quick, native.gelu_quick),
}
ELEMENTWISE = ("gelu_new", "gelu_fast", "gelu_quick")
ALL_OPS = [*OPS, *(op + "_bwd" for op in OPS), *FORWARD_ONLY]
DEFAULT_MODELS = ["llama3-8B", "llama3-70B"]
DEFAULT_M = [1, 16, 64, 128, 512, 2048, 8192, 16384, 32768]
# With a backward op: past 8192 x 28672 (16384 x 14336 included) the providers' graphs, the fp32
# reference's gradient temporaries and the check hold more than an H100's 80 GB.
DEFAULT_M_BWD = [1, 16, 128, 1024, 4096, 8192]


def _activation(op: str) -> str:
    return OPS[op.removesuffix("_bwd")]


def _grads_agree(result, reference, dtype) -> bool:
    """x's gradient, whether a provider returns it whole or as gate and up halves."""
    return harness.agrees(torch.cat(result, -1), torch.cat(reference, -1), dtype)


def _case(op, label, m, n, dtype):
    if op in ELEMENTWISE:
        return harness.Case(
            op=op, label=label, dims={"M": m, "N": n}, dtype=dtype, rows=m, nbytes=2 * m * n * dtype.itemsize,
            make_inputs=lambda: (torch.randn(m, n, device=harness.DEVICE, dtype=dtype),),
        )
    if not op.endswith("_bwd"):
        return harness.Case(
            op=op, label=label, dims={"M": m, "N": n}, dtype=dtype, rows=m,
            nbytes=3 * m * n * dtype.itemsize,
            make_inputs=lambda: (torch.randn(m, 2 * n, device=harness.DEVICE, dtype=dtype),),
        )
    return harness.Case(
        op=op, label=label, dims={"M": m, "N": n}, dtype=dtype, rows=m,
        nbytes=5 * m * n * dtype.itemsize,
        make_inputs=lambda: (torch.randn(m, 2 * n, device=harness.DEVICE, dtype=dtype, requires_grad=True),
                             torch.randn(m, n, device=harness.DEVICE, dtype=dtype)),
        agrees=lambda result, reference: _grads_agree(result, reference, dtype),
    )


def _timed(case, inputs, fwd):
    """``fwd(x)`` for a forward op; for a backward op, its gradient (fwd run once, here)."""
    if not case.op.endswith("_bwd"):
        (x,) = inputs
        return lambda: fwd(x)
    x, dy = inputs
    return harness.backward_of(lambda: fwd(x), x, dy)


def _forward_only(case, inputs, which):
    (x,), fn = inputs, FORWARD_ONLY[case.op][which]
    if case.op in ELEMENTWISE:
        return lambda: fn(x)
    n = case.dims["N"]
    return lambda: fn(torch.empty(x.shape[0], n, device=x.device, dtype=x.dtype), x)


def _triton(case, inputs):
    if case.op in FORWARD_ONLY:
        return _forward_only(case, inputs, 0)
    n, activation = case.dims["N"], _activation(case.op)
    return _timed(case, inputs, lambda x: act.act_and_mul(
        torch.empty(x.shape[0], n, device=x.device, dtype=x.dtype), x, activation))


def _native(case, inputs):
    if case.op in FORWARD_ONLY:
        return _forward_only(case, inputs, 1)
    activation = _activation(case.op)
    return _timed(case, inputs, lambda x: native.gated(x, activation))


_compiled = []
_compiled_ops = {}


def _compile(case, inputs):
    if case.op in FORWARD_ONLY:
        if case.op not in _compiled_ops:
            _compiled_ops[case.op] = harness.compile_static(FORWARD_ONLY[case.op][1])
        compiled, (x,), n = _compiled_ops[case.op], inputs, case.dims["N"]
        if case.op in ELEMENTWISE:
            return lambda: compiled(x)
        return lambda: compiled(torch.empty(x.shape[0], n, device=x.device, dtype=x.dtype), x)
    if not _compiled:
        _compiled.append(harness.compile_static(native.gated))
    activation = _activation(case.op)
    # For a backward op AOTAutograd compiles the backward graph along with the forward.
    return _timed(case, inputs, lambda x: _compiled[0](x, activation))


def _liger(case, inputs):
    if case.op in FORWARD_ONLY:
        return None
    try:
        if case.op.startswith("silu_and_mul"):
            from liger_kernel.ops.swiglu import LigerSiLUMulFunction as F
        elif case.op.startswith("gelu_tanh_and_mul"):
            from liger_kernel.ops.geglu import LigerGELUMulFunction as F
        else:
            return None  # Liger has no erf-GELU gated op
    except ImportError:
        return None
    x, n = inputs[0], case.dims["N"]
    # Liger takes gate and up as separate contiguous tensors (its natural use).
    a, b = x[:, :n].detach().contiguous(), x[:, n:].detach().contiguous()
    if not case.op.endswith("_bwd"):
        return lambda: F.apply(a, b)
    # Its backward writes the gradients over the saved gate and up (its own copies here):
    # later timed calls run on those values, which does not change the time.
    a.requires_grad_(), b.requires_grad_()
    return harness.backward_of(lambda: F.apply(a, b), (a, b), inputs[1])


PROVIDERS = {"triton": _triton, "native": _native, "compile": _compile, "liger": _liger}


def main(argv=None):
    p = harness.make_parser(__doc__.splitlines()[0], ("M", "N"))
    p.add_argument("--op", nargs="+", choices=ALL_OPS, help=f"default: {', '.join(OPS)}")
    harness.add_direction_arg(p)
    args = p.parse_args(argv)
    if args.direction == "bwd" and set(args.op or ()) & set(FORWARD_ONLY):
        p.error(f"{', '.join(sorted(set(args.op) & set(FORWARD_ONLY)))}: forward only (vLLM's ops), no backward")
    args.op = harness.directed_ops(args, list(OPS))
    default_m = DEFAULT_M_BWD if any(op.endswith("_bwd") for op in args.op) else DEFAULT_M
    shapes = harness.row_shapes(args, DEFAULT_MODELS, default_m, lambda cfg: [
        (suffix, cfg[key]) for key, suffix in (("intermediate_size", ""), ("moe_intermediate_size", "-moe"))
        if key in cfg])
    cases = harness.build_cases(args, args.op, shapes, _case)
    tiny = [_case(op, "tiny", 3, 96, torch.bfloat16) for op in args.op]
    return harness.run(args, "activation", cases, PROVIDERS, tiny)


if __name__ == "__main__":
    main()
