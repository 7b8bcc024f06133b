"""Benchmark aiter's MLP / MoE fusions: fused_clamp_act_mul (unquantized), fused_mul_add, fused_routing_from_topk.

    python op_benchmarks/bench_mlp_fusions.py                      # deepseek-v3 / llama3-8B MLPs, M = 1..16384
    python op_benchmarks/bench_mlp_fusions.py --op clamp_act_mul -M 1 16 --cudagraph
    python op_benchmarks/bench_mlp_fusions.py --shape 4096x2048 --op mul_add

Shapes are (M, N): M tokens, N the MLP's intermediate size (clamp_act_mul's input row holds
2N). The quantized forms of fused_clamp_act_mul are in bench_quant.py (clamp_silu_group_128,
clamp_silu_ue8m0_32).
Bytes moved (each input read once, each output written once; e = element size):
    clamp_act_mul  fused_clamp_act_mul(x, swiglu_limit=7, activation="silu", weights=w): read x
                   (M x 2N) and fp32 row weights w (M x 1); write y (M x N)      3 M N e + 4 M
    mul_add        fused_mul_add(x, a, 0.5, out): read x and a (M x N), write out   3 M N e
    routing        fused_routing_from_topk(w, ids, E): M tokens' top-8 of E = N experts (int32 ids,
                   weights in x's dtype): read ids and weights, write hist, topk_indx, gate_indx,
                   gate_scal                                         8 M (4 + 4 + 4 + e + e) / 8 + 4 N
                   (M at most 1024: 8192 pairs, one program)
Providers: triton (aiter_lite), native (the fp32 reference), compile (torch.compile of it),
unfused (what runs without the fusion: clamp_act_mul as torch's two clamps, this project's
act_mul and torch's weight multiply; mul_add as torch's multiply then add in x's dtype;
routing: none, native is already the torch chain a stack runs without it).
"""

import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

from op_benchmarks.utils import harness  # noqa: E402  (sets TRITON_INTERPRET on CPU before aiter_lite loads)

import torch  # noqa: E402

from aiter_lite.ops.native import fusions as native  # noqa: E402
from aiter_lite.ops.triton import activation as tri_act  # noqa: E402
from aiter_lite.ops.triton import fusions as tri  # noqa: E402

OPS = ("clamp_act_mul", "mul_add", "routing")
TOPK = 8
DEFAULT_MODELS = ["deepseek-v3", "llama3-8B"]
DEFAULT_M = [1, 16, 128, 1024, 4096, 16384]
LIMIT = 7.0


def _case(op, label, m, n, dtype):
    e = dtype.itemsize

    def make_inputs():
        dev = harness.DEVICE
        if op == "routing":
            return (torch.rand(m, TOPK, device=dev).to(dtype),
                    torch.rand(m, n, device=dev).argsort(1)[:, :TOPK].int().contiguous())
        if op == "clamp_act_mul":
            return (torch.randn(m, 2 * n, device=dev, dtype=dtype) * 4, torch.rand(m, 1, device=dev) + 0.5)
        return (torch.randn(m, n, device=dev, dtype=dtype), torch.randn(m, n, device=dev, dtype=dtype),
                torch.empty(m, n, device=dev, dtype=dtype))

    nbytes = 3 * m * n * e + (4 * m if op == "clamp_act_mul" else 0)
    if op == "routing":
        nbytes = m * TOPK * (12 + 2 * e) + 4 * n
    return harness.Case(op=op, label=label, dims={"M": m, "N": n}, dtype=dtype, rows=m, nbytes=nbytes,
                        make_inputs=make_inputs)


def _call(fns, case, inputs):
    if case.op == "routing":
        w, ids = inputs
        return lambda: fns.fused_routing_from_topk(w, ids, case.dims["N"])
    if case.op == "clamp_act_mul":
        x, w = inputs
        return lambda: fns.fused_clamp_act_mul(x, None, None, LIMIT, "silu", w)
    x, a, out = inputs
    out = torch.empty_like(out)
    return lambda: fns.fused_mul_add(x, a, 0.5, out)


def _unfused(case, inputs):
    if case.op == "routing":
        return None
    if case.op == "clamp_act_mul":
        x, w = inputs
        n = x.shape[1] // 2
        return lambda: w * tri_act.act_mul(x[:, :n].clamp(max=LIMIT), x[:, n:].clamp(-LIMIT, LIMIT), "silu")
    x, a, out = inputs
    out = torch.empty_like(out)
    return lambda: torch.add(torch.mul(x, a), 0.5, out=out)


class _Compiled:
    def __init__(self):
        self.fused_clamp_act_mul = harness.compile_static(native.fused_clamp_act_mul)
        self.fused_mul_add = harness.compile_static(native.fused_mul_add)
        self.fused_routing_from_topk = harness.compile_static(native.fused_routing_from_topk)


_compiled = []


def _compile(case, inputs):
    if not _compiled:
        _compiled.append(_Compiled())
    return _call(_compiled[0], case, inputs)


PROVIDERS = {"triton": lambda c, i: _call(tri, c, i), "native": lambda c, i: _call(native, c, i),
             "compile": _compile, "unfused": _unfused}


def main(argv=None):
    p = harness.make_parser(__doc__.splitlines()[0], ("M", "N"))
    p.add_argument("--op", nargs="+", choices=OPS, default=list(OPS))
    args = p.parse_args(argv)
    shapes = harness.row_shapes(args, DEFAULT_MODELS, DEFAULT_M, lambda cfg: [
        (suffix, cfg[key]) for key, suffix in (("intermediate_size", ""), ("moe_intermediate_size", "-moe"))
        if key in cfg])
    routing = [(label + "-experts", {"M": dims["M"], "N": e}) for label, dims in shapes if dims["M"] <= 1024
               for e in (64, 256)] if not args.shape else shapes
    cases = [*harness.build_cases(args, [op for op in args.op if op != "routing"], shapes, _case),
             *harness.build_cases(args, [op for op in args.op if op == "routing"], routing, _case)]
    tiny = [_case(op, "tiny", 3, 96, torch.bfloat16) for op in args.op]
    return harness.run(args, "mlp_fusions", cases, PROVIDERS, tiny)


if __name__ == "__main__":
    main()
