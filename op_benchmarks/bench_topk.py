"""Benchmark top-k (topk) and MoE routing (moe_topk_softmax, moe_biased_grouped_topk, routing_sigmoid_top1).

    python op_benchmarks/bench_topk.py                             # sampling: M = 1..256 x 128256, k = 1, 50, 1024; 4 x 262144, k = 1024
    python op_benchmarks/bench_topk.py --model all -M 1 64 -k 50   # every model's vocabulary
    python op_benchmarks/bench_topk.py --shape 16x151936 -k 1 20 --dtype fp32
    python op_benchmarks/bench_topk.py --op moe_topk_softmax moe_biased_grouped_topk
    python op_benchmarks/bench_topk.py --op moe_biased_grouped_topk -M 1 64 --cudagraph
    python op_benchmarks/bench_topk.py --op routing_sigmoid_top1 -M 1 64 4096 --cudagraph

topk shapes are (M, N, K): M rows, N the row length (a vocabulary), K = k, the largest
k of each row with their int64 indices. MoE shapes are (M, N, K): M tokens, N experts,
K experts chosen per token; moe_topk_softmax runs Mixtral (8 experts, top 2), Qwen3 (128,
top 8), 256 and 512 experts (top 8); moe_biased_grouped_topk runs DeepSeek-V3 (256
experts, 8 groups, 4 kept, top 8, renormalized, scale 2.5). --shape MxN gives a
vocabulary row for topk (-k values) and a token count x experts for the MoE ops (top 8;
moe_biased_grouped_topk in 8 groups, 4 kept). routing_sigmoid_top1 (Llama 4's router, from the
hidden states: x (M, H) @ w (H, N), sigmoid, top 1, the shared expert appended) runs Llama 4
Scout (16 experts) and Maverick (128), H = 5120; its K is 1 and H the hidden column.

Bytes moved (each input read once, each output written once; e = input element size):
    topk                  read M x N; write M x K values (e) and indices (8)   M * N * e + M * K * (e + 8)
    MoE routing           read M x N logits (and N fp32 bias); write M x K
                          fp32 weights and int32 ids                         M * N * e + 4 * N + M * K * 8
    routing_sigmoid_top1  read x (M x H) and w (H x N); write M x 2 fp32
                          weights and int32 ids (the shared expert's too)    (M + N) * H * e + M * 16
Providers: triton (aiter_lite), native (aiter_lite's reference: a stable torch.sort,
the MoE native ops), torch (eager torch.topk; for the MoE ops vLLM's routing written
out in torch ops, op_benchmarks/utils/topk.py), compile (torch.compile of the same
torch.topk / torch-ops routing; for routing_sigmoid_top1 the router GEMM x @ w in the input
dtype, torch.topk of its logits, their sigmoid: Llama 4's router without the fusion). Liger
has no top-k. torch.topk's tie order is unspecified, so the torch and compile topk providers
are checked on their values only; the MoE logits leave no near-ties (op_benchmarks/utils/topk.py),
so every MoE provider is checked on weights and ids. routing_sigmoid_top1's logits come from a
GEMM, rounded to the input's dtype by the torch peers: its experts may differ at a near tie,
where the weights must then agree (``_top1_agrees``).
"""

import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

from op_benchmarks.utils import harness  # noqa: E402  (sets TRITON_INTERPRET on CPU before aiter_lite loads)

import torch  # noqa: E402

from aiter_lite.ops.native import moe_routing as native_moe  # noqa: E402
from aiter_lite.ops.native import topk as native  # noqa: E402
from aiter_lite.ops.native.moe import moe_routing_sigmoid_top1_fused as native_top1  # noqa: E402
from aiter_lite.ops.triton import moe_routing as tri_moe  # noqa: E402
from aiter_lite.ops.triton import topk as tri  # noqa: E402
from aiter_lite.ops.triton.moe import moe_routing_sigmoid_top1_fused as tri_top1  # noqa: E402
from op_benchmarks.utils import topk as peers  # noqa: E402

OPS = ("topk", "moe_topk_softmax", "moe_biased_grouped_topk", "routing_sigmoid_top1")
DEFAULT_MODELS = ["llama3-8B"]
DEFAULT_M = [1, 16, 64, 256]
DEFAULT_K = [1, 50, 1024]
LONG_ROW = (4, 262144, 1024)  # (M, N, k), with the default sampling shapes
DEFAULT_TOKENS = [1, 16, 64, 256, 1024, 4096, 16384, 65536]
# (label, experts, groups, groups kept, top k)
SOFTMAX_ROUTING = [("mixtral", 8, 1, 1, 2), ("qwen3-moe", 128, 1, 1, 8), ("E256", 256, 1, 1, 8),
                   ("E512", 512, 1, 1, 8)]
BIASED_ROUTING = [("deepseek-v3", 256, 8, 4, 8)]
SIGMOID_TOP1_ROUTING = [("llama4-scout", 16), ("llama4-maverick", 128)]  # (label, experts)
LLAMA4_HIDDEN = 5120
RENORMALIZE = True
SCALE = 2.5  # DeepSeek-V3's routed_scaling_factor


def _topk_case(label, m, n, k, dtype):
    return harness.Case(
        op="topk", label=label, dims={"M": m, "N": n, "K": k}, dtype=dtype, rows=m,
        nbytes=m * n * dtype.itemsize + m * k * (dtype.itemsize + 8),
        make_inputs=lambda: (torch.randn(m, n, device=harness.DEVICE, dtype=dtype) * 3,),
    )


def _moe_case(op, label, tokens, experts, groups, kept, k, dtype):
    def make_inputs():
        x = peers.routing_logits(tokens, experts, groups, dtype, harness.DEVICE)
        return (x, peers.small_bias(experts, harness.DEVICE)) if op == "moe_biased_grouped_topk" else (x,)

    return harness.Case(
        op=op, label=label, dims={"M": tokens, "N": experts, "K": k}, dtype=dtype, rows=tokens,
        nbytes=tokens * experts * dtype.itemsize + (4 * experts if op == "moe_biased_grouped_topk" else 0)
        + tokens * k * 8,
        make_inputs=make_inputs, extra={"groups": groups, "topk_group": kept},
    )


def _top1_case(label, tokens, experts, hidden, dtype):
    def make_inputs():
        x = torch.randn(tokens, hidden, device=harness.DEVICE, dtype=dtype)
        return x, (torch.randn(hidden, experts, device=harness.DEVICE) * hidden ** -0.5).to(dtype)

    return harness.Case(
        op="routing_sigmoid_top1", label=label, dims={"M": tokens, "N": experts, "K": 1}, dtype=dtype, rows=tokens,
        nbytes=(tokens + experts) * hidden * dtype.itemsize + tokens * 16, make_inputs=make_inputs,
        extra={"hidden": hidden}, agrees=_top1_agrees,
    )


def _top1_agrees(result, reference) -> bool:
    """The same experts, or (a near tie, which the peers' logits rounded to the input's dtype may
    break either way) weights within the bf16 tolerance; the shared column exactly."""
    (ids, w), (ref_ids, ref_w) = result, reference
    close = (w.float() - ref_w).abs() <= 2e-2 + 3e-2 * ref_w.abs()
    return bool(close.all() and torch.equal(ids[:, 1:].int(), ref_ids[:, 1:]))


def _torch_top1(x, w):
    """Llama 4's router in torch ops (vLLM's custom routing): the GEMM, torch.topk of the logits,
    their sigmoid; the shared expert appended."""
    weights, ids = torch.topk(x @ w, 1, dim=-1)
    weights = torch.sigmoid(weights.float())
    return torch.cat([ids.to(torch.int32), torch.full_like(ids, w.shape[1], dtype=torch.int32)], 1), \
        torch.cat([weights, torch.ones_like(weights)], 1)


def _routing_args(case):
    """(topk, groups, groups kept) of a MoE case."""
    return case.dims["K"], case.extra["groups"], case.extra["topk_group"]


def _provider(topk_ops, moe_ops, top1_ops):
    """The timed call of a case on one backend's top-k and routing modules."""

    def make(case, inputs):
        if case.op == "topk":
            (x,) = inputs
            return lambda: topk_ops.topk(x, case.dims["K"])
        if case.op == "routing_sigmoid_top1":
            return lambda: top1_ops.routing_sigmoid_top1(*inputs, 1, True)
        k, groups, kept = _routing_args(case)
        if case.op == "moe_topk_softmax":
            return lambda: moe_ops.moe_topk_softmax(inputs[0], k, RENORMALIZE)
        return lambda: moe_ops.moe_biased_grouped_topk(*inputs, k, groups, kept, RENORMALIZE, SCALE)

    return make


_triton = _provider(tri, tri_moe, tri_top1)
_native = _provider(native, native_moe, native_top1)


def _torch_topk(x, k):
    return torch.topk(x, k)


def _peer(case, inputs, fns):
    """torch.topk (values checked, indices timed) or the vLLM routing in torch ops; ``fns``
    holds the three callables, eager or compiled."""
    if case.op == "topk":
        (x,) = inputs
        return lambda: fns["topk"](x, case.dims["K"])[0]
    if case.op == "routing_sigmoid_top1":
        return lambda: fns["routing_sigmoid_top1"](*inputs)
    k, groups, kept = _routing_args(case)
    if case.op == "moe_topk_softmax":
        return lambda: fns["moe_topk_softmax"](inputs[0], k, RENORMALIZE)
    return lambda: fns["moe_biased_grouped_topk"](*inputs, k, groups, kept, RENORMALIZE, SCALE)


_EAGER = {"topk": _torch_topk, "moe_topk_softmax": peers.vllm_fused_topk,
          "moe_biased_grouped_topk": peers.vllm_biased_grouped_topk, "routing_sigmoid_top1": _torch_top1}
_compiled = {}


def _compile(case, inputs):
    if case.op not in _compiled:
        _compiled[case.op] = harness.compile_static(_EAGER[case.op])
    return _peer(case, inputs, _compiled)


PROVIDERS = {"triton": _triton, "native": _native, "torch": lambda case, inputs: _peer(case, inputs, _EAGER),
             "compile": _compile, "liger": lambda case, inputs: None}
GPU_PROVIDERS = "triton,native,torch,compile"


def _topk_cases(args):
    """--shape, else --model / -M (vocabulary rows) x -k; with none of those, also the long row."""
    ks = args.k or DEFAULT_K
    shapes = harness.row_shapes(args, DEFAULT_MODELS, DEFAULT_M, lambda cfg: [("", cfg["vocab_size"])])
    cases, seen = [], set()
    for dname in args.dtype:
        extra = [("long-row", {"M": LONG_ROW[0], "N": LONG_ROW[1]}, [LONG_ROW[2]])]
        plain = not (args.shape or args.model or args.M or args.k)
        for label, dims, case_ks in [(label, dims, ks) for label, dims in shapes] + (extra if plain else []):
            for k in case_ks:
                key = (dims["M"], dims["N"], k, dname)
                if k <= dims["N"] and key not in seen:
                    seen.add(key)
                    cases.append(_topk_case(label, dims["M"], dims["N"], k, harness.DTYPES[dname]))
    return cases


def _moe_cases(args, op):
    if op == "routing_sigmoid_top1":
        geoms = ([("custom", harness.parse_shape(s, ("M", "N"))) for s in args.shape] if args.shape else
                 [(label, {"M": t, "N": e}) for label, e in SIGMOID_TOP1_ROUTING for t in args.M or DEFAULT_TOKENS])
        return [_top1_case(label, d["M"], d["N"], LLAMA4_HIDDEN, harness.DTYPES[dname])
                for dname in args.dtype for label, d in geoms]
    if args.shape:
        geoms = [("custom", harness.parse_shape(s, ("M", "N"))) for s in args.shape]
        biased = op == "moe_biased_grouped_topk"
        geoms = [(label, d["N"], 8 if biased else 1, 4 if biased else 1,
                  min(8 if d["N"] >= 16 else 2, d["N"]), [d["M"]]) for label, d in geoms]
    else:
        table = BIASED_ROUTING if op == "moe_biased_grouped_topk" else SOFTMAX_ROUTING
        geoms = [(*g, args.M or DEFAULT_TOKENS) for g in table]
    return [_moe_case(op, label, t, e, g, kept, k, harness.DTYPES[dname])
            for dname in args.dtype for label, e, g, kept, k, tokens in geoms for t in tokens]


def _tiny(ops):
    cases = []
    for op in ops:
        if op == "topk":
            cases.append(_topk_case("tiny", 3, 200, 5, torch.bfloat16))
        elif op == "moe_topk_softmax":
            cases.append(_moe_case(op, "tiny", 5, 16, 1, 1, 4, torch.bfloat16))
        elif op == "routing_sigmoid_top1":
            cases.append(_top1_case("tiny", 5, 16, 64, torch.bfloat16))
        else:
            cases.append(_moe_case(op, "tiny", 5, 32, 4, 2, 4, torch.bfloat16))
    return cases


def main(argv=None):
    p = harness.make_parser(__doc__.splitlines()[0], ("M", "N"))
    p.add_argument("--op", nargs="+", default=["topk"], choices=list(OPS))
    p.add_argument("-k", type=int, nargs="+", help=f"topk: k values (default {DEFAULT_K})")
    args = p.parse_args(argv)
    if args.providers is None and harness.ON_GPU:
        args.providers = GPU_PROVIDERS  # liger has no top-k; torch.topk is the peer to beat
    cases = []
    for op in args.op:
        cases += _topk_cases(args) if op == "topk" else _moe_cases(args, op)
    return harness.run(args, "topk", cases, PROVIDERS, _tiny(args.op))


if __name__ == "__main__":
    main()
