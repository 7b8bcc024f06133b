"""A training step of a Hugging Face Llama: unpatched, patched by aiter_lite, patched by Liger.

    python op_benchmarks/bench_training.py                       # 2 layers at llama3-8B width, 8 x 512 tokens, bf16
    python op_benchmarks/bench_training.py --layers 2 --batch 8 --seq 512 -o training.csv
    python op_benchmarks/bench_training.py --providers hf aiter_lite

One step is forward, loss and backward (``loss.backward()``; the optimizer is left out:
it is the same for every provider). Each provider builds the same random model (one seed,
random norm weights), runs ``--warmup`` steps, then times ``--steps`` steps with CUDA events
and reports the median, and the peak memory allocated over the timed steps. Providers:

* ``hf``: the model as Hugging Face builds it (eager PyTorch ops, SDPA attention);
* ``aiter_lite``: ``aiter_lite.transformers.apply_aiter_lite(model)`` (RMSNorm, the gated
  MLP's activation, RoPE);
* ``liger_same``: Liger-Kernel's ``apply_liger_kernel_to_llama(model=...)`` with the same
  three patches (rope, rms_norm, swiglu; no fused cross entropy);
* ``liger``: Liger's defaults, which add its fused linear cross entropy (the logits are never
  materialized: a loss kernel, outside aiter_lite's op families).

Liger patches the modeling module's globals and classes (every model built afterwards gets
them), so it runs after the others. The loss of every provider's first step is printed: the
same model, the same batch, the same loss within bf16 noise.
"""

from __future__ import annotations

import argparse
import gc
import pathlib
import statistics
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

from op_benchmarks.utils import harness  # noqa: E402  (sets TRITON_INTERPRET on CPU before aiter_lite loads)

import torch  # noqa: E402

PROVIDERS = ("hf", "aiter_lite", "liger_same", "liger")
# llama3-8B's widths
LLAMA3_8B = dict(vocab_size=128256, hidden_size=4096, intermediate_size=14336, num_attention_heads=32,
                 num_key_value_heads=8, head_dim=128, rope_theta=500000.0, max_position_embeddings=8192,
                 rms_norm_eps=1e-5)
TINY = dict(vocab_size=256, hidden_size=64, intermediate_size=96, num_attention_heads=4, num_key_value_heads=2,
            head_dim=16, max_position_embeddings=128)


def _model(layers: int, dtype: torch.dtype, tiny: bool):
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(**(TINY if tiny else LLAMA3_8B), num_hidden_layers=layers, tie_word_embeddings=False)
    config._attn_implementation = "sdpa"
    torch.manual_seed(0)
    with torch.device(harness.DEVICE):
        model = LlamaForCausalLM(config).to(dtype)
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() == 1:  # norm weights: random around 1, not all ones
                p.add_(torch.randn_like(p) * 0.1)
    return model.train()


def _patch(provider: str, model, backend: str | None) -> None:
    if provider == "aiter_lite":
        from aiter_lite.transformers import apply_aiter_lite

        report = apply_aiter_lite(model, backend=backend)
        if report.skipped:
            raise RuntimeError(f"aiter_lite left modules unpatched: {report}")
    elif provider in ("liger_same", "liger"):
        from liger_kernel.transformers import apply_liger_kernel_to_llama

        flce = provider == "liger"
        apply_liger_kernel_to_llama(rope=True, rms_norm=True, swiglu=True, cross_entropy=False,
                                    fused_linear_cross_entropy=flce, model=model)


def _sync():
    if harness.ON_GPU:
        torch.cuda.synchronize()


def run_provider(provider: str, args, dtype: torch.dtype) -> dict:
    model = _model(args.layers, dtype, tiny=not harness.ON_GPU)
    _patch(provider, model, args.backend)
    g = torch.Generator(device="cpu").manual_seed(1)
    ids = torch.randint(0, model.config.vocab_size, (args.batch, args.seq), generator=g).to(harness.DEVICE)

    def step():
        model.zero_grad(set_to_none=True)
        loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        return loss

    first_loss = step().item()
    for _ in range(args.warmup):
        step()
    _sync()
    times = []
    if harness.ON_GPU:
        torch.cuda.reset_peak_memory_stats()
        for _ in range(args.steps):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            step()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end))
        peak = torch.cuda.max_memory_allocated() / 2**30
    else:
        import time

        for _ in range(args.steps):
            t0 = time.perf_counter()
            step()
            times.append((time.perf_counter() - t0) * 1e3)
        peak = float("nan")
    row = dict(provider=provider, layers=args.layers, batch=args.batch, seq=args.seq, dtype=args.dtype,
               ms=statistics.median(times), ms_min=min(times), peak_gib=peak, loss=first_loss)
    return row


def _run_apart(provider: str, args, dtype: torch.dtype) -> dict:
    """One provider's row, its model freed before the next is built."""
    row = run_provider(provider, args, dtype)
    gc.collect()
    if harness.ON_GPU:
        torch.cuda.empty_cache()
    return row


def main(argv=None) -> list[dict]:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--seq", type=int, default=512)
    parser.add_argument("--dtype", default="bf16", choices=sorted(harness.DTYPES))
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--providers", nargs="+", default=list(PROVIDERS), choices=PROVIDERS)
    parser.add_argument("--backend", choices=("triton", "native"), help="aiter_lite's backend (default: its own pick)")
    parser.add_argument("-o", "--output", help="CSV file to write")
    args = parser.parse_args(argv)
    if not harness.ON_GPU:  # the interpreter: a tiny model, a smoke run whose timings mean nothing
        args.batch, args.seq, args.steps, args.warmup = 2, 8, 1, 0
        args.providers = [p for p in args.providers if not p.startswith("liger")]
    dtype = harness.DTYPES[args.dtype]
    order = [p for p in PROVIDERS if p in args.providers]  # Liger's global patches last
    rows = [_run_apart(p, args, dtype) for p in order]
    base = next((r for r in rows if r["provider"] == "hf"), None)
    for r in rows:
        r["speedup_vs_hf"] = base["ms"] / r["ms"] if base else float("nan")
        r["gpu"] = torch.cuda.get_device_name() if harness.ON_GPU else "cpu (interpreter)"
    if args.output:
        import csv

        with open(args.output, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=list(rows[0]))
            w.writeheader()
            w.writerows(rows)
    print(f"\ntraining step (forward + loss + backward), {args.layers} layers, batch {args.batch} x {args.seq}, "
          f"{args.dtype}, {rows[0]['gpu']}")
    print(f"{'provider':<12}{'ms (median)':>12}{'ms (min)':>10}{'x HF':>7}{'peak GiB':>10}{'loss':>10}")
    for r in rows:
        print(f"{r['provider']:<12}{r['ms']:>12.2f}{r['ms_min']:>10.2f}{r['speedup_vs_hf']:>7.3f}"
              f"{r['peak_gib']:>10.2f}{r['loss']:>10.4f}")
    return rows


if __name__ == "__main__":
    main()
