"""A training step of a Hugging Face Llama: unpatched, patched by aiter_lite, patched by Liger.

    python op_benchmarks/bench_training.py                       # 2 layers at llama3-8B width, 8 x 512 tokens, bf16
    python op_benchmarks/bench_training.py --layers 2 --batch 8 --seq 512 -o training.csv
    python op_benchmarks/bench_training.py --providers hf aiter_lite liger
    python op_benchmarks/bench_training.py --providers aiter_lite liger_same --profile 25   # GPU time by kernel

One step is forward, loss and backward (``loss.backward()``; the optimizer is left out:
it is the same for every provider). Each provider builds the same random model (one seed,
random norm weights) and runs alone first: its first loss and the peak memory allocated over
``--steps`` steps. Then every provider's model is built at once and timed with CUDA events in
``--rounds`` rounds, the providers taking turns (a GPU's clock drifts over a minute by more
than the differences measured); the median over all rounds is reported. Providers:

* ``hf``: the model as Hugging Face builds it (eager PyTorch ops, SDPA attention);
* ``aiter_lite_same``: ``aiter_lite.transformers.apply_aiter_lite(model,
  fused_linear_cross_entropy=False)`` (RMSNorm, the gated MLP's activation, RoPE);
* ``liger_same``: Liger-Kernel's ``apply_liger_kernel_to_llama(model=...)`` with the same
  three patches (rope, rms_norm, swiglu; no fused cross entropy);
* ``aiter_lite``: ``apply_aiter_lite(model)``, its defaults: the three and the loss by
  ``fused_linear_cross_entropy`` (the logits are never materialized);
* ``liger``: Liger's defaults: the three and its fused linear cross entropy.

Liger's patch also rewrites the modeling module's globals; here its rotary function is pinned
on the Liger model's attention modules and the globals restored, so each patch stays on its own
model. The loss of every provider's first step is printed: the
same model, the same batch, the same loss within bf16 noise.
"""

from __future__ import annotations

import argparse
import gc
import pathlib
import statistics
import sys
import types

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

from op_benchmarks.utils import harness  # noqa: E402  (sets TRITON_INTERPRET on CPU before aiter_lite loads)

import torch  # noqa: E402

PROVIDERS = ("hf", "aiter_lite_same", "liger_same", "aiter_lite", "liger")
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
    if provider in ("aiter_lite", "aiter_lite_same"):
        from aiter_lite.transformers import apply_aiter_lite

        report = apply_aiter_lite(model, backend=backend, fused_linear_cross_entropy=provider == "aiter_lite")
        if report.skipped:
            raise RuntimeError(f"aiter_lite left modules unpatched: {report}")
    elif provider in ("liger_same", "liger"):
        from liger_kernel.transformers import apply_liger_kernel_to_llama
        from transformers.models.llama import modeling_llama

        from aiter_lite.transformers import _with_global

        # Liger also patches the modeling module's globals (the rotary function, the norm and
        # MLP classes): its rotary function is pinned on this model's attention modules and the
        # globals restored, so that the other providers' models (built before or after) stay
        # Hugging Face's own.
        saved = {name: getattr(modeling_llama, name) for name in _LIGER_GLOBALS}
        flce = provider == "liger"
        apply_liger_kernel_to_llama(rope=True, rms_norm=True, swiglu=True, cross_entropy=False,
                                    fused_linear_cross_entropy=flce, model=model)
        rotary = modeling_llama.apply_rotary_pos_emb
        for layer in model.model.layers:
            attn = layer.self_attn
            attn.forward = types.MethodType(_with_global(type(attn).forward, "apply_rotary_pos_emb", rotary), attn)
        for name, value in saved.items():
            setattr(modeling_llama, name, value)


_LIGER_GLOBALS = ("apply_rotary_pos_emb", "LlamaRMSNorm", "LlamaMLP")


def _sync():
    if harness.ON_GPU:
        torch.cuda.synchronize()


def _build(provider: str, args, dtype: torch.dtype):
    """The provider's patched model and its step (forward, loss, backward on one fixed batch)."""
    model = _model(args.layers, dtype, tiny=not harness.ON_GPU)
    _patch(provider, model, args.backend)
    g = torch.Generator(device="cpu").manual_seed(1)
    ids = torch.randint(0, model.config.vocab_size, (args.batch, args.seq), generator=g).to(harness.DEVICE)

    def step():
        model.zero_grad(set_to_none=True)
        loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        return loss

    return model, step


def _timed(step, n: int, host: list | None = None) -> list[float]:
    """Milliseconds of each of ``n`` steps (CUDA events on a GPU); ``host`` gets the host's
    time to issue each step (until ``step`` returns, before waiting for the GPU)."""
    import time

    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        if harness.ON_GPU:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            step()
            end.record()
            t1 = time.perf_counter()
            end.synchronize()
            times.append(start.elapsed_time(end))
        else:
            step()
            t1 = time.perf_counter()
            times.append((t1 - t0) * 1e3)
        if host is not None:
            host.append((t1 - t0) * 1e3)
    return times


def run_provider(provider: str, args, dtype: torch.dtype) -> dict:
    """One provider alone: its first loss, the peak memory of its steps (and their time)."""
    model, step = _build(provider, args, dtype)
    first_loss = step().item()
    for _ in range(args.warmup):
        step()
    _sync()
    if harness.ON_GPU:
        torch.cuda.reset_peak_memory_stats()
    times = _timed(step, args.steps)
    peak = torch.cuda.max_memory_allocated() / 2**30 if harness.ON_GPU else float("nan")
    if args.profile and harness.ON_GPU:
        _profile(provider, step, args)
    return dict(provider=provider, layers=args.layers, batch=args.batch, seq=args.seq, dtype=args.dtype,
                ms=statistics.median(times), ms_min=min(times), peak_gib=peak, loss=first_loss)


def interleaved_times(order: list[str], args, dtype: torch.dtype) -> tuple[dict, dict]:
    """Every provider's model at once, timed in ``--rounds`` rounds of ``--steps`` steps each,
    the providers taking turns: clock and temperature drift fall on all of them alike.
    Returns each provider's step times and host times (ms)."""
    built = {p: _build(p, args, dtype) for p in order}
    for _, step in built.values():
        for _ in range(args.warmup):
            step()
    _sync()
    times = {p: [] for p in order}
    host = {p: [] for p in order}
    for _ in range(args.rounds):
        for p in order:
            times[p] += _timed(built[p][1], args.steps, host[p])
    del built
    return times, host


def _profile(provider: str, step, args) -> None:
    """The GPU time of three steps by kernel (torch.profiler), largest first; CSV beside --output."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(3):
            step()
        _sync()
    rows = [(e.key, e.self_device_time_total / 3, e.count // 3) for e in prof.key_averages()
            if e.self_device_time_total > 0]
    rows.sort(key=lambda r: -r[1])
    total = sum(r[1] for r in rows)
    print(f"\n{provider}: GPU time per step {total / 1e3:.2f} ms in kernels; the {args.profile} largest:")
    for name, us, n in rows[:args.profile]:
        print(f"  {us:9.1f} us {n:4d}x  {name[:110]}")
    # Where the GPU waits for the host: gaps between consecutive kernels of the last step.
    kernels = sorted((e.time_range.start, e.time_range.end, e.name) for e in prof.events()
                     if e.device_type == torch.autograd.DeviceType.CUDA and e.time_range.end > e.time_range.start)
    gaps = [(b[0] - a[1], a[2], b[2]) for a, b in zip(kernels, kernels[1:]) if b[0] > a[1]]
    step_gaps = gaps[-(len(gaps) // 3):] if gaps else []
    print(f"  idle between kernels: {sum(g for g, _, _ in gaps) / 3e3:.2f} ms per step; the largest of one step:")
    for g, before, after in sorted(step_gaps, key=lambda g: -g[0])[:8]:
        print(f"  {g:9.1f} us  after {before[:50]}  before {after[:50]}")
    if args.output:
        import csv

        with open(str(args.output).removesuffix(".csv") + f"_profile_{provider}.csv", "w", newline="") as f:
            w = csv.writer(f)
            w.writerow(["kernel", "us_per_step", "calls_per_step"])
            w.writerows(rows)


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
    parser.add_argument("--steps", type=int, default=20, help="timed steps (per round with --rounds)")
    parser.add_argument("--rounds", type=int, default=5,
                        help="time every provider's model together, taking turns for this many rounds (0: each "
                             "provider's time from its memory run alone)")
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--providers", nargs="+", default=list(PROVIDERS), choices=PROVIDERS)
    parser.add_argument("--backend", choices=("triton", "native"), help="aiter_lite's backend (default: its own pick)")
    parser.add_argument("--profile", type=int, default=0, metavar="N",
                        help="after timing, print each provider's N most expensive kernels per step (torch.profiler)")
    parser.add_argument("-o", "--output", help="CSV file to write")
    args = parser.parse_args(argv)
    if not harness.ON_GPU:  # the interpreter: a tiny model, a smoke run whose timings mean nothing
        args.batch, args.seq, args.steps, args.warmup = 2, 8, 1, 0
        args.providers = [p for p in args.providers if not p.startswith("liger")]
    dtype = harness.DTYPES[args.dtype]
    order = [p for p in PROVIDERS if p in args.providers]
    rows = [_run_apart(p, args, dtype) for p in order]
    if args.rounds and harness.ON_GPU:
        times, host = interleaved_times(order, args, dtype)
        for r in rows:
            ts = sorted(times[r["provider"]])
            r["ms_alone"] = r["ms"]
            r["ms"], r["ms_min"], r["ms_p90"] = statistics.median(ts), ts[0], ts[int(0.9 * (len(ts) - 1))]
            r["host_ms"] = statistics.median(host[r["provider"]])
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
    how = f"{args.rounds} interleaved rounds of {args.steps} steps" if "ms_alone" in rows[0] else f"{args.steps} steps"
    print(f"median of {how}; peak memory of each provider alone")
    print(f"{'provider':<16}{'ms (median)':>12}{'ms (min)':>10}{'ms (p90)':>10}{'host ms':>9}{'x HF':>7}"
          f"{'peak GiB':>10}{'loss':>10}")
    nan = float("nan")
    for r in rows:
        print(f"{r['provider']:<16}{r['ms']:>12.2f}{r['ms_min']:>10.2f}{r.get('ms_p90', nan):>10.2f}"
              f"{r.get('host_ms', nan):>9.2f}{r['speedup_vs_hf']:>7.3f}{r['peak_gib']:>10.2f}{r['loss']:>10.4f}")
    return rows


if __name__ == "__main__":
    main()
