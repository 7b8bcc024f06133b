"""Benchmark cross entropy over a vocabulary, and the fused linear cross entropy of a language
model's head (forward + backward: a training step's loss).

    python op_benchmarks/bench_cross_entropy.py                        # llama3-8B, qwen3, gemma2 vocabularies
    python op_benchmarks/bench_cross_entropy.py --op fused_linear_cross_entropy -M 4096 16384
    python op_benchmarks/bench_cross_entropy.py --shape 4096x128256 --op cross_entropy_fwd_bwd

Shapes are (M, N): M tokens, N the vocabulary (fused_linear_cross_entropy: H is the model's
hidden size, the CSV's hidden column). Bytes moved (e = element size; targets left out):
    cross_entropy                 read logits                                  M * N * e
    cross_entropy_fwd_bwd         read logits, write their gradient          2 * M * N * e
    fused_linear_cross_entropy    read x, weight; write their gradients      2 * (M + N) * H * e
(the fused op's time is its matmuls, 6 * M * N * H flops: its TFLOP/s are in the CSV, and
the peak memory of each provider's call is printed after the table).
Each op is timed as a training step uses it: ``cross_entropy_fwd_bwd`` and the fused op are
the loss and ``torch.autograd.grad`` of it, forward and backward in one call (the mean over
targets, one ignored in 8). Providers: triton (aiter_lite); native (what Hugging Face runs:
the logits upcast to fp32, ``torch.nn.functional.cross_entropy``; the fused op first computes
the logits with a matmul in the input's dtype); compile (torch.compile of native); liger
(``liger_cross_entropy``, which overwrites the logits with their gradient, and
``liger_fused_linear_cross_entropy``, not under ``--cudagraph``: it reads the count of
targets on the host).
"""

import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

from op_benchmarks.utils import harness  # noqa: E402  (sets TRITON_INTERPRET on CPU before aiter_lite loads)

import torch  # noqa: E402

from aiter_lite.ops.triton import cross_entropy as tri  # noqa: E402

OPS = ("cross_entropy", "cross_entropy_fwd_bwd", "fused_linear_cross_entropy")
DEFAULT_MODELS = ["llama3-8B", "qwen3-235B-A22B", "gemma2-27B"]
DEFAULT_M = [1024, 4096, 16384]


def _targets(m: int, n: int) -> torch.Tensor:
    t = torch.randint(0, n, (m,), device=harness.DEVICE)
    t[1::8] = -100  # one row in 8 ignored, never every row (at M = 1 the mean would be 0 / 0)
    return t


def _case(op, label, m, n, dtype, hidden: int = 4096):
    def make_inputs():
        t = _targets(m, n)
        if op == "fused_linear_cross_entropy":
            x = torch.randn(m, hidden, device=harness.DEVICE, dtype=dtype)
            w = torch.randn(n, hidden, device=harness.DEVICE, dtype=dtype) * hidden ** -0.5
            return x.requires_grad_(), w.requires_grad_(), t
        x = torch.randn(m, n, device=harness.DEVICE, dtype=dtype) * 4
        return x.requires_grad_(op != "cross_entropy"), t

    e = dtype.itemsize
    if op == "fused_linear_cross_entropy":
        nbytes, extra = 2 * (m + n) * hidden * e, {"hidden": hidden, "tflop": 6 * m * n * hidden / 1e12}
    else:
        nbytes, extra = (1 if op == "cross_entropy" else 2) * m * n * e, {}
    return harness.Case(op=op, label=label, dims={"M": m, "N": n}, dtype=dtype, rows=m, nbytes=nbytes,
                        make_inputs=make_inputs, extra=extra, agrees=_agrees)


def _agrees(result, reference) -> bool:
    """The loss and each gradient within 1% of the reference's norm (bf16 logits' gradients
    are one rounding apart; the fused op's weight gradient sums chunks in bf16)."""
    outs = [result] if isinstance(result, torch.Tensor) else list(result)
    refs = [reference] if isinstance(reference, torch.Tensor) else list(reference)
    return all(((a.float() - b.float()).norm() <= 1e-2 * b.float().norm() + 1e-6).item() for a, b in zip(outs, refs))


def _step(loss_fn, wrt):
    """loss and its gradients in one call (a training step's loss, forward and backward)."""
    def call():
        loss = loss_fn()
        return (loss.detach(), *torch.autograd.grad(loss, wrt)) if wrt else loss
    return call


def _hf_loss(logits, t):
    return torch.nn.functional.cross_entropy(logits.float(), t, ignore_index=-100)


def _hf_linear_loss(x, w, t):
    return torch.nn.functional.cross_entropy((x @ w.t()).float(), t, ignore_index=-100)


def _fns(case, inputs, ce, linear_ce):
    if case.op == "fused_linear_cross_entropy":
        x, w, t = inputs
        return _step(lambda: linear_ce(x, w, t), (x, w))
    x, t = inputs
    return _step(lambda: ce(x, t), (x,) if case.op.endswith("_fwd_bwd") else ())


def _triton(case, inputs):
    return _fns(case, inputs, tri.cross_entropy, tri.fused_linear_cross_entropy)


def _native(case, inputs):
    return _fns(case, inputs, _hf_loss, _hf_linear_loss)


_compiled = {}


def _compile(case, inputs):
    if not _compiled:
        _compiled["ce"] = torch.compile(_hf_loss, dynamic=False)
        _compiled["linear"] = torch.compile(_hf_linear_loss, dynamic=False)
    return _fns(case, inputs, _compiled["ce"], _compiled["linear"])


_CUDAGRAPH = []  # set by main: Liger's fused op reads a count on the host (no graph capture)


def _liger(case, inputs):
    if case.op == "fused_linear_cross_entropy" and _CUDAGRAPH:
        return None
    try:
        from liger_kernel.transformers.functional import liger_cross_entropy, liger_fused_linear_cross_entropy
    except ImportError:
        return None
    if case.op == "cross_entropy_fwd_bwd":  # it overwrites the logits with their gradient: a copy a call
        x, t = inputs
        return _fns(case, (x.detach().clone().requires_grad_(), t), lambda a, b: liger_cross_entropy(a, b), None)
    return _fns(case, inputs, lambda a, b: liger_cross_entropy(a, b), liger_fused_linear_cross_entropy)


PROVIDERS = {"triton": _triton, "native": _native, "compile": _compile, "liger": _liger}


def peak_memory(cases, providers: dict) -> list[dict]:
    """Each provider's peak memory of one call of the fused op above what its inputs hold, GiB."""
    rows = []
    for case in cases:
        if case.op != "fused_linear_cross_entropy":
            continue
        inputs = case.make_inputs()
        for name, make in providers.items():
            fn = make(case, inputs)
            if fn is None:
                continue
            fn()
            torch.cuda.synchronize()
            base = torch.cuda.memory_allocated()
            torch.cuda.reset_peak_memory_stats()
            fn()
            torch.cuda.synchronize()
            rows.append(dict(M=case.dims["M"], N=case.dims["N"], provider=name,
                             peak_gib=(torch.cuda.max_memory_allocated() - base) / 2**30))
        del inputs
    return rows


def main(argv=None):
    p = harness.make_parser(__doc__.splitlines()[0], ("M", "N"))
    p.add_argument("--op", nargs="+", default=list(OPS), choices=list(OPS))
    args = p.parse_args(argv)
    _CUDAGRAPH[:] = [True] if args.cudagraph else []
    models = harness.load_models(args.model, DEFAULT_MODELS)
    hidden = {cfg["vocab_size"]: cfg["hidden_size"] for cfg in models.values()}
    shapes = harness.row_shapes(args, DEFAULT_MODELS, DEFAULT_M, lambda cfg: [("", cfg["vocab_size"])])
    cases = harness.build_cases(args, args.op, shapes,
                                lambda op, label, m, n, dtype: _case(op, label, m, n, dtype, hidden.get(n, 4096)))
    tiny = [_case(op, "tiny", 3, 1000, torch.bfloat16, 64) for op in args.op]
    df = harness.run(args, "cross_entropy", cases, PROVIDERS, tiny)
    if harness.ON_GPU and "fused_linear_cross_entropy" in args.op:
        wanted = args.providers.split(",") if args.providers else list(PROVIDERS)
        mem = peak_memory(cases, {k: v for k, v in PROVIDERS.items() if k in wanted})
        print("\nfused_linear_cross_entropy: peak memory of one call (forward + backward) above its inputs, GiB")
        for r in mem:
            print(f"  M={r['M']:>6} N={r['N']:>7} {r['provider']:<8} {r['peak_gib']:8.3f}")
        if args.output and mem:
            import pandas as pd

            pd.DataFrame(mem).to_csv(str(args.output).removesuffix(".csv") + "_memory.csv", index=False)
    return df


if __name__ == "__main__":
    main()
