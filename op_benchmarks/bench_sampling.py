"""Benchmark sampling (aiter_lite.ops.triton.sampling) against vLLM's sort-based torch sampler.

    python op_benchmarks/bench_sampling.py                                   # batch 1..256, 4 vocabularies
    python op_benchmarks/bench_sampling.py --op top_k_top_p -M 1 64 --cudagraph
    python op_benchmarks/bench_sampling.py --shape 256x262144 --providers triton,native,softmax
    python op_benchmarks/bench_sampling.py --model llama3-8B,qwen2.5-7B -M 1 16   # those models' vocabularies

Shapes are (M, N): M rows (requests), N the vocabulary. Ops:
    top_k_top_p   top_k_top_p_sampling_from_logits(logits, 50, 0.9): a token a row
    top_k_top_p_rows  the same with a tensor of k and one of p a row (as vLLM's sampler holds them)
    top_p         top_p_sampling_from_probs(probs, 0.9)
    top_p_renorm  top_p_renorm_probs(probs, 0.9): fp32 rows
    from_uniform  sampling_from_uniform(logits, u, k, p, from_logits=True): top_k_top_p_rows with the
                  caller's uniform numbers (the registered op a compiled drawing form calls)
Providers: triton (this project), native (vLLM's torch sampler written out from its formula:
apply_top_k_top_p by a sort, softmax, then the exponential race ``(probs / q).argmax()``; the
renorm op: its sort-based top-p, renormalized), compile (torch.compile of it), softmax (this
project's softmax over the same rows: the bandwidth a one-pass row op reaches). top_p's native
form takes the log of the probabilities first (vLLM's sampler filters logits). Draws are
random: a token agrees when it lies in the kept set of the reference.
Bytes: the rows read once (bf16 logits, fp32 probabilities) and, for top_p_renorm, written once.
"""

import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

from op_benchmarks.utils import harness  # noqa: E402  (sets TRITON_INTERPRET on CPU before aiter_lite loads)

import torch  # noqa: E402

from aiter_lite.ops.native import sampling as ref  # noqa: E402
from aiter_lite.ops.triton import sampling as smp  # noqa: E402
from aiter_lite.ops.triton.softmax import softmax as tri_softmax  # noqa: E402

OPS = ("top_k_top_p", "top_k_top_p_rows", "top_p", "top_p_renorm", "from_uniform")
TOP_K, TOP_P = 50, 0.9
DEFAULT_M = [1, 16, 64, 256]
DEFAULT_N = [128256, 151936, 201088, 262144]


def _vllm_top_k_top_p(logits, k, p):
    """vLLM's apply_top_k_top_p (v1 sampler, forward_native)."""
    logits_sort, logits_idx = logits.sort(dim=-1, descending=False)
    if k is not None:
        kth = logits_sort.gather(1, (logits_sort.size(1) - k).unsqueeze(1))
        logits_sort.masked_fill_(logits_sort < kth, -float("inf"))
    if p is not None:
        probs_sum = logits_sort.softmax(dim=-1).cumsum(dim=-1)
        top_p_mask = probs_sum <= 1 - p.unsqueeze(1)
        top_p_mask[:, -1] = False
        logits_sort.masked_fill_(top_p_mask, -float("inf"))
    return logits_sort.scatter(dim=-1, index=logits_idx, src=logits_sort)


def _vllm_sample(logits, k, p):
    probs = _vllm_top_k_top_p(logits, k, p).softmax(dim=-1, dtype=torch.float32)
    q = torch.empty_like(probs).exponential_()
    return probs.div_(q).argmax(dim=-1)


def _native_fn(op):
    if op.startswith("top_k_top_p") or op == "from_uniform":
        return lambda x, k, p, *u: _vllm_sample(x.float(), k, p)
    if op == "top_p":
        return lambda x, k, p: _vllm_sample(x.log(), None, p)
    return lambda x, k, p: ref.top_p_renorm_probs(x, p)


def _case(op, m, n):
    dev = harness.DEVICE
    logits = op.startswith("top_k_top_p") or op == "from_uniform"
    dtype = torch.bfloat16 if logits else torch.float32
    kept, inputs_x = {}, {}

    def make_inputs():
        x = torch.randn(m, n, device=dev) * 3
        x = x.to(dtype) if logits else torch.softmax(x, -1)
        k = torch.full((m,), TOP_K, device=dev, dtype=torch.long)
        p = torch.full((m,), TOP_P, device=dev)
        pr = torch.softmax(x.float(), -1) if logits else x
        kept["mask"] = ref.kept(pr, top_k=TOP_K if logits else None, top_p=TOP_P) & (pr > 0)
        inputs_x["x"] = x
        return (x, k, p, torch.rand(m, device=dev)) if op == "from_uniform" else (x, k, p)

    def agrees(result, reference):
        if isinstance(result, tuple):  # the softmax provider
            return True
        if op == "top_p_renorm":  # kept sets equal but for a boundary group; equal rows to fp32 rounding
            same = (result > 0).eq(reference > 0).all(-1)
            return (ref.kept_sets_differ(result > 0, reference > 0, inputs_x["x"], TOP_P) is None
                    and bool(torch.allclose(result[same], reference[same], atol=1e-6, rtol=1e-4)))
        r = result.long().reshape(-1, 1)
        return bool(((r >= 0).all() and kept["mask"].gather(1, r.clamp(min=0)).all()))

    e = dtype.itemsize
    nbytes = m * n * e * (2 if op == "top_p_renorm" else 1)
    return harness.Case(op=op, label="vocab", dims={"M": m, "N": n}, dtype=dtype, rows=m, nbytes=nbytes,
                        make_inputs=make_inputs, agrees=agrees)


def _triton(case, inputs):
    x, k, p = inputs[:3]
    if case.op == "from_uniform":
        return lambda: smp.sampling_from_uniform(x, inputs[3], k, p, None, None, None, True)
    if case.op == "top_k_top_p":
        return lambda: smp.top_k_top_p_sampling_from_logits(x, TOP_K, TOP_P)
    if case.op == "top_k_top_p_rows":
        return lambda: smp.top_k_top_p_sampling_from_logits(x, k, p)
    if case.op == "top_p":
        return lambda: smp.top_p_sampling_from_probs(x, TOP_P)
    return lambda: smp.top_p_renorm_probs(x, TOP_P)


def _native(case, inputs):
    f = _native_fn(case.op)
    return lambda: f(*inputs)


_compiled = {}


def _compile(case, inputs):
    if case.op not in _compiled:
        _compiled[case.op] = harness.compile_static(_native_fn(case.op))
    f = _compiled[case.op]
    try:
        f(*inputs)
    except Exception as e:  # noqa: BLE001  (Inductor's own failure, reported and worked around)
        # Inductor 2.11 fails to generate the split cumsum of a few vocabulary-wide rows
        # (SplitScan codegen: "list indices must be integers or slices"). The same graph
        # compiled without split reductions (what Inductor does past a handful of rows).
        print(f"compile {case.op} {case.dims}: {type(e).__name__}; compiled again without split reductions")
        with torch._inductor.config.patch(split_reductions=False):
            f(*inputs)
    return lambda: f(*inputs)


def _softmax(case, inputs):
    x = inputs[0]
    return lambda: (tri_softmax(x), "softmax")  # a bandwidth reference, not the op: tagged, not compared


PROVIDERS = {"triton": _triton, "native": _native, "compile": _compile, "softmax": _softmax}


def main(argv=None):
    p = harness.make_parser(__doc__.splitlines()[0], ("M", "N"))
    p.add_argument("--op", nargs="+", choices=OPS, default=list(OPS))
    args = p.parse_args(argv)
    if args.shape:
        shapes = [tuple(int(v) for v in s.split("x")) for s in args.shape]
    else:  # --model: each model's vocabulary
        vocabs = sorted({c["vocab_size"] for c in harness.load_models(args.model, []).values()}) or DEFAULT_N
        shapes = [(m, n) for n in vocabs for m in (args.M or DEFAULT_M)]
    cases = [_case(op, m, n) for op in args.op for m, n in shapes]
    tiny = [_case(op, 3, 100) for op in args.op]
    return harness.run(args, "sampling", cases, PROVIDERS, tiny)


if __name__ == "__main__":
    main()
