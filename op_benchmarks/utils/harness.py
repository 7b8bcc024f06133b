"""One benchmark harness for every bench_<op>.py: CLI, providers, bytes moved, timing, report, CSV.

A bench script describes its cases (shape, bytes moved, how to build inputs) and
its providers (name -> callable factory); ``run`` does the rest:

* times each provider as ``triton.testing.do_bench`` does (the median of single calls, L2
  flushed before each, ``do_bench_clean``), with the flush's lines written back before the
  timed call, or, with ``--cudagraph``, by replaying a CUDA graph (no launch overhead);
* checks every provider's output against the native reference before timing it;
* a backward op (named ``<op>_bwd``; ``--direction bwd`` picks them) times
  ``torch.autograd.grad`` through a forward run once beforehand (``backward_of``),
  and its check compares the gradients (under ``--cudagraph`` the forward runs on the
  capturing stream, where the autograd engine then runs the backward);
* measures a 1 GiB device-to-device copy in the same run, the bandwidth ceiling;
* prints µs, GB/s, % of copy and aiter_lite's speedup over each provider, and
  writes a CSV row per (case, provider) with GPU name, versions and a timestamp.

With no GPU the scripts run a tiny case through Triton's interpreter: a smoke
test whose timings mean nothing, and say so.
"""

from __future__ import annotations

import argparse
import datetime
import functools
import json
import os
import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import torch

ON_GPU = torch.cuda.is_available()
if not ON_GPU:
    # Before any aiter_lite kernel module is imported (bench scripts import this first).
    os.environ.setdefault("TRITON_INTERPRET", "1")

import triton  # noqa: E402

DEVICE = torch.device("cuda") if ON_GPU else torch.device("cpu")
MODEL_CONFIGS = Path(__file__).resolve().parent.parent / "model_configs.json"
DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}
ALL_PROVIDERS = ("triton", "native", "compile", "liger")
CPU_PROVIDERS = ("triton", "native")


@dataclass
class Case:
    """One benchmarked shape: what it is called, what it moves, how to build its inputs."""

    op: str
    label: str  # e.g. "llama3-8B"
    dims: dict  # e.g. {"M": 128, "N": 14336}; one CSV column each
    dtype: torch.dtype
    nbytes: int  # each input read once, each output written once
    make_inputs: Callable[[], tuple]
    rows: int = 0  # tokens, for --metric throughput
    extra: dict = field(default_factory=dict)  # more CSV columns
    agrees: Callable | None = None  # (result, reference) -> bool where a float tolerance does not fit


def load_models(spec: str | None, default: list[str]) -> dict:
    """Model configs named by ``--model`` (comma list or ``all``)."""
    configs = json.loads(MODEL_CONFIGS.read_text())
    names = list(configs) if spec == "all" else (spec.split(",") if spec else default)
    unknown = [n for n in names if n not in configs]
    if unknown:
        raise SystemExit(f"--model: unknown {unknown}; known: {', '.join(configs)}")
    return {n: configs[n] for n in names}


def parse_bool(text: str) -> bool:
    """An argparse type for true / false flags (true, yes, 1 / false, no, 0)."""
    if text.lower() in ("true", "yes", "1"):
        return True
    if text.lower() in ("false", "no", "0"):
        return False
    raise argparse.ArgumentTypeError(f"expected true or false, got {text!r}")


def parse_shape(text: str, names: tuple[str, ...]) -> dict:
    """'4096x14336' -> {'M': 4096, 'N': 14336} for names ('M', 'N')."""
    parts = text.lower().split("x")
    if len(parts) != len(names) or not all(p.isdigit() for p in parts):
        raise SystemExit(f"--shape {text!r}: expected {'x'.join(names)} with integers, e.g. {'x'.join(['64'] * len(names))}")
    return dict(zip(names, map(int, parts)))


def make_parser(description: str, shape_names: tuple[str, ...]) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--model", help="model name(s) from model_configs.json, comma separated, or 'all'")
    p.add_argument("-M", type=int, nargs="+", help="row (token) counts")
    p.add_argument("--shape", nargs="+", help=f"explicit shapes {'x'.join(shape_names)}, overriding --model")
    p.add_argument("--dtype", nargs="+", default=["bf16"], choices=list(DTYPES))
    p.add_argument("--metric", default="bandwidth", choices=["time", "bandwidth", "throughput"])
    p.add_argument("--providers", help=f"comma list of {', '.join(ALL_PROVIDERS)} (default: all on a GPU)")
    p.add_argument("--cudagraph", action="store_true", help="time CUDA-graph replays (no launch overhead)")
    p.add_argument("--rep", type=int, default=100, help="timing budget per measurement, ms")
    p.add_argument("--rounds", type=int, default=3,
                   help="interleaved timing rounds per shape (providers take turns); the median is reported")
    p.add_argument("-o", "--output", help="CSV file to write")
    return p


def _time_ms(fn: Callable, cudagraph: bool, rep: int) -> float:
    if not ON_GPU:  # the interpreter: a smoke test, one call (its time means nothing)
        t0 = time.perf_counter()
        fn()
        return (time.perf_counter() - t0) * 1e3
    for _ in range(3):  # compile, autotune and clock ramp-up stay out of the timing
        fn()
    torch.cuda.synchronize()
    if cudagraph and isinstance(fn, BackwardCall):
        return time_backward_cudagraph(fn, rep)
    if cudagraph:
        return triton.testing.do_bench_cudagraph(fn, rep=rep, return_mode="median")
    return do_bench_clean(fn, warmup=max(rep // 4, 25), rep=rep)


_FLUSH_BYTES = 256 * 2**20  # past the L2 of every GPU benchmarked (H200: 50 MB)


@functools.lru_cache(maxsize=1)
def _flush_buffers() -> tuple[torch.Tensor, torch.Tensor]:
    return (torch.empty(_FLUSH_BYTES // 8, dtype=torch.int64, device=DEVICE),
            torch.empty(_FLUSH_BYTES // 8, dtype=torch.int64, device=DEVICE))


def _flush_l2() -> None:
    """A cold, clean L2: one buffer zeroed (triton's flush), then another read. The zeroing
    alone leaves L2's worth of dirty lines that the timed call writes back: under
    ``triton.testing.do_bench`` an 84 MB device copy reached 79% of a 1 GiB copy's
    bandwidth on an H200 (93% after this flush), so no kernel between 64 and 128 MB could
    show 85% of copy."""
    written, read = _flush_buffers()
    written.zero_()
    read.max()


def do_bench_clean(fn: Callable, warmup: int = 25, rep: int = 100) -> float:
    """The median time of ``fn`` in ms, each call timed alone after ``_flush_l2``: triton's
    ``do_bench`` (as many calls as fit ``warmup`` / ``rep`` ms, the flush counted in the
    estimate) with a clean flush."""
    fn()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(5):
        _flush_l2()
        fn()
    end.record()
    torch.cuda.synchronize()
    estimate = start.elapsed_time(end) / 5
    for _ in range(max(1, int(warmup / estimate))):
        fn()
    n = max(1, int(rep / estimate))
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(n)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(n)]
    for s, e in zip(starts, ends):
        _flush_l2()
        s.record()
        fn()
        e.record()
    torch.cuda.synchronize()
    return statistics.median(s.elapsed_time(e) for s, e in zip(starts, ends))


SWEEP_N = [2**k for k in range(8, 19)]  # 256 .. 262144


def add_sweep_args(p: argparse.ArgumentParser) -> None:
    """--sweep / --sweep-elems: an N sweep at a fixed M * N instead of model shapes."""
    p.add_argument("--sweep", action="store_true",
                   help="instead of models: N = 256..262144 (powers of two) at M * N = --sweep-elems; ignores -M")
    p.add_argument("--sweep-elems", type=int, default=2**26, help="M * N of each --sweep shape (default 2**26)")


def row_shapes(args: argparse.Namespace, default_models: list[str], default_m: list[int],
               widths: Callable[[dict], list]) -> list[tuple[str, dict]]:
    """(label, {"M", "N"}) from --shape, else --sweep (when the bench has it), else the models.

    ``widths(config)`` lists (label suffix, N) for one model config.
    """
    if args.shape:
        return [("custom", parse_shape(s, ("M", "N"))) for s in args.shape]
    if getattr(args, "sweep", False):
        return [("sweep", {"M": args.sweep_elems // n, "N": n}) for n in SWEEP_N if n <= args.sweep_elems]
    return [(model + suffix, {"M": m, "N": n})
            for model, cfg in load_models(args.model, default_models).items()
            for suffix, n in widths(cfg)
            for m in args.M or default_m]


def build_cases(args: argparse.Namespace, ops: list[str], shapes: list, make_case: Callable) -> list[Case]:
    """One case per (dtype, op, distinct shape): ``make_case(op, label, m, n, dtype)``."""
    cases, seen = [], set()
    for dname in args.dtype:
        for op in ops:
            for label, dims in shapes:
                if (op, dims["M"], dims["N"], dname) not in seen:
                    seen.add((op, dims["M"], dims["N"], dname))
                    cases.append(make_case(op, label, dims["M"], dims["N"], DTYPES[dname]))
    return cases


def add_direction_arg(p: argparse.ArgumentParser) -> None:
    """--direction fwd|bwd: the bench's forward ops, or the backward of each (the op's name + _bwd)."""
    p.add_argument("--direction", choices=("fwd", "bwd"),
                   help="fwd: the forward ops; bwd: the backward of each, named <op>_bwd (the gradient through "
                        "autograd of a forward run once, outside the timing)")


def directed_ops(args: argparse.Namespace, default: list[str]) -> list[str]:
    """--op (else ``default``), each turned into --direction's form: ``<op>_bwd`` for bwd, the
    name without ``_bwd`` for fwd. The CSV's op column then says the direction."""
    ops = args.op or default
    if args.direction == "bwd":
        ops = [op if op.endswith("_bwd") else op + "_bwd" for op in ops]
    elif args.direction == "fwd":
        ops = [op.removesuffix("_bwd") for op in ops]
    return list(dict.fromkeys(ops))


# Default models of --direction bwd: every provider's backward over the M sweep in a few
# minutes on one H100 (each shape is a torch.compile of forward and backward).
BWD_MODELS = ["llama3-8B", "llama3-70B"]


class BackwardCall:
    """The timed callable of a backward op: the gradient of ``forward()``'s outputs with
    respect to ``wrt`` for the upstream gradients ``grads``. The forward runs once, at the
    first call, outside the timing; its graph is kept, so the call repeats. It returns the
    gradients, which the check compares.

    Under CUDA graphs (:func:`time_backward_cudagraph`) the forward runs again on the
    capturing stream: the autograd engine runs each backward node on its forward's stream,
    and one recorded on another stream would leave the capture."""

    def __init__(self, forward: Callable, wrt, grads):
        self.forward, self.wrt, self.grads = forward, wrt, grads
        self._out = None

    def grad(self, out):
        return torch.autograd.grad(out, self.wrt, self.grads, retain_graph=True)

    def __call__(self):
        if self._out is None:
            self._out = self.forward()
        return self.grad(self._out)

    def release(self) -> None:
        """Drop the kept forward graph (its leaves' gradient accumulators keep the stream the
        forward ran on, and every provider's forward shares the leaves)."""
        self._out = None


def backward_of(forward: Callable, wrt, grads) -> BackwardCall:
    """``forward``'s backward as a timed callable (:class:`BackwardCall`)."""
    return BackwardCall(forward, wrt, grads)


def time_backward_cudagraph(call: BackwardCall, rep: int) -> float:
    """Median ms of one backward, from replays of a CUDA graph of back-to-back backwards
    (as ``do_bench_cudagraph``), with the forward run on the capturing stream."""
    call.release()
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        out = call.forward()
        for _ in range(3):
            call.grad(out)
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(5):
            call.grad(out)
        end.record()
        torch.cuda.synchronize()
        n = max(1, min(1000, int(rep / max(start.elapsed_time(end) / 5, 1e-3))))
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, stream=stream):
            for _ in range(n):
                call.grad(out)
        torch.cuda.synchronize()
        times = []
        for _ in range(10):
            start.record()
            graph.replay()
            end.record()
            torch.cuda.synchronize()
            times.append(start.elapsed_time(end) / n)
    del graph, out
    return statistics.median(times)


def compile_static(fn: Callable) -> Callable:
    """``torch.compile(fn)`` specialised to each shape, as Inductor does best.

    Every benchmarked shape is its own compile, so the recompile limit is raised
    (past it dynamo silently falls back to eager).
    """
    raise_recompile_limits(4096)
    return torch.compile(fn, dynamic=False)


def raise_recompile_limits(limit: int) -> None:
    """Dynamo's recompile limits at least ``limit`` (past them it silently falls back to eager)."""
    for name in ("recompile_limit", "cache_size_limit", "accumulated_recompile_limit", "accumulated_cache_size_limit"):
        if hasattr(torch._dynamo.config, name):
            setattr(torch._dynamo.config, name, max(getattr(torch._dynamo.config, name), limit))


def copy_bandwidth_gbps(rep: int = 200) -> float:
    """Device-to-device copy of 1 GiB (bytes read + bytes written over time): the ceiling."""
    n = 2**30 if ON_GPU else 2**22
    src = torch.empty(n, dtype=torch.uint8, device=DEVICE)
    dst = torch.empty_like(src)
    ms = _time_ms(lambda: dst.copy_(src), False, rep)
    return 2 * n / ms / 1e6


def _outputs(result) -> list[torch.Tensor]:
    if isinstance(result, torch.Tensor):
        return [result]
    return [t for t in result if isinstance(t, torch.Tensor)]


def agrees(result, reference, dtype, sum_rows: int = 1) -> bool:
    """Every output of ``result`` within ``dtype``'s tolerance of the reference's. Where
    ``sum_rows`` > 1, 1-D outputs are sums over that many rows (a parameter's gradient): their
    absolute budget grows by sqrt(sum_rows), as rounding in a sum of that length does."""
    atol, rtol = {torch.float32: (1e-4, 1e-4), torch.float16: (2e-3, 4e-3), torch.bfloat16: (2e-2, 3e-2)}[dtype]
    return all(
        torch.allclose(a.float(), b.float(), atol=atol * (sum_rows ** 0.5 if b.dim() == 1 else 1), rtol=rtol,
                       equal_nan=True)
        for a, b in zip(_outputs(result), _outputs(reference))
    )


def run(
    args: argparse.Namespace,
    bench: str,
    cases: list[Case],
    providers: dict[str, Callable[[Case, tuple], Callable | None]],
    tiny_cases: list[Case],
) -> "object":
    """Time every (case, provider) pair; print the report; write the CSV; return a DataFrame.

    ``providers[name](case, inputs)`` returns a zero-argument callable, or None when
    the provider lacks the op. "native" must be present: it is the reference.
    """
    import pandas as pd

    if not ON_GPU:
        print(f"{bench}: no GPU found; running a tiny case through the Triton interpreter. "
              "This is a smoke test: its timings mean nothing.")
        cases = tiny_cases
    wanted = (args.providers.split(",") if args.providers
              else [p for p in (ALL_PROVIDERS if ON_GPU else CPU_PROVIDERS) if p in providers])
    unknown = [p for p in wanted if p not in providers]
    if unknown:
        raise SystemExit(f"--providers: unknown {unknown}; this bench has {', '.join(providers)}")
    if args.cudagraph and not ON_GPU:
        raise SystemExit("--cudagraph needs a GPU")

    copy_gbps = copy_bandwidth_gbps()
    meta = dict(
        gpu=torch.cuda.get_device_name() if ON_GPU else "cpu (interpreter)",
        torch=torch.__version__,
        triton=triton.__version__,
        timestamp=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        copy_gbps=round(copy_gbps, 1),
        cudagraph=bool(args.cudagraph),
    )
    rows, wrong, failed = [], [], []
    for case in cases:
        inputs = case.make_inputs()
        ref_fn = providers["native"](case, inputs)
        t0 = time.perf_counter()
        reference = ref_fn()
        ref_ms = (time.perf_counter() - t0) * 1e3
        fns, first_ms = {}, {}
        for name in wanted:
            try:
                if name == "native":  # the reference's call is the native provider's checked call
                    fn, result, first_ms[name] = ref_fn, reference, ref_ms
                else:
                    fn = providers[name](case, inputs)
                    t0 = time.perf_counter()
                    result = None if fn is None else fn()
                    first_ms[name] = (time.perf_counter() - t0) * 1e3
            except Exception as e:  # noqa: BLE001
                if name in ("triton", "native"):  # ours and the reference: a failure is a failure
                    raise
                # A peer's own failure (Inductor, Liger) is its result at that shape: reported, not timed.
                print(f"{bench}: {name} fails at {case.op} {case.dims}: {type(e).__name__}: {str(e)[:200]}")
                failed.append(f"{case.op} {case.label} {case.dims} {name}")
                continue
            if fn is None:
                continue
            if not (case.agrees or functools.partial(agrees, dtype=case.dtype))(result, reference):
                wrong.append(f"{case.op} {case.label} {case.dims} {name}")
            fns[name] = fn
        if args.cudagraph:  # no provider's eager forward graph alive while another's is captured
            for fn in fns.values():
                if isinstance(fn, BackwardCall):
                    fn.release()
        # Providers take turns, round after round: a slow drift of clocks or a
        # noisy neighbour then hits every provider alike rather than one of them.
        if ON_GPU:
            times = {name: [] for name in fns}
            for _ in range(max(args.rounds, 1)):
                for name, fn in fns.items():
                    times[name].append(_time_ms(fn, args.cudagraph, args.rep))
        else:  # the interpreter's smoke run: the checked call's time (it means nothing), no second call
            times = {name: [first_ms[name]] for name in fns}
        for name, ts in times.items():
            ms = statistics.median(ts)
            rows.append(dict(bench=bench, op=case.op, model=case.label, **case.dims,
                             dtype=str(case.dtype).replace("torch.", ""), provider=name, us=ms * 1e3,
                             gbps=case.nbytes / ms / 1e6, pct_copy=100 * case.nbytes / ms / 1e6 / copy_gbps,
                             rows_per_s=case.rows / ms * 1e3, spread_pct=100 * (max(ts) - min(ts)) / ms,
                             **case.extra, **meta))
        del inputs, fns, reference, ref_fn  # backward cases hold autograd graphs: free before the next case
    df = pd.DataFrame(rows)
    if df.empty:
        raise SystemExit(f"{bench}: nothing was timed")
    key = [c for c in df.columns
           if c not in ("provider", "us", "gbps", "pct_copy", "rows_per_s", "spread_pct", "timestamp")]
    tri = df[df.provider == "triton"].set_index(key)["us"] if "triton" in wanted else None
    if tri is not None:
        df["triton_speedup"] = [
            row.us / tri.get(tuple(row[k] for k in key), float("nan")) for _, row in df.iterrows()
        ]
    if args.output:
        df.to_csv(args.output, index=False)
    _print_report(df, args.metric, copy_gbps, meta)
    if failed:
        print("peers that failed (not timed):\n  " + "\n  ".join(failed))
    if wrong:
        raise SystemExit("providers disagree with the native reference:\n  " + "\n  ".join(wrong))
    return df


def _print_report(df, metric: str, copy_gbps: float, meta: dict) -> None:
    """Per shape: median µs of each provider, GB/s, triton's % of copy, triton's speedup over each."""
    import pandas as pd

    dims = [c for c in df.columns if c.isupper() or c in ("op", "model", "dtype")]
    piv = lambda v: df.pivot_table(index=dims, columns="provider", values=v, sort=False)  # noqa: E731
    blocks = [piv("us").round(1).add_suffix(" us")]
    if metric in ("bandwidth", "throughput"):
        blocks.append(piv("gbps").round(0).add_suffix(" GB/s"))
        blocks.append(piv("pct_copy")[["triton"]].round(1).rename(columns={"triton": "triton %copy"})
                      if "triton" in df.provider.values else None)
    if metric == "throughput":
        blocks.append((piv("rows_per_s") / 1e6).round(2).add_suffix(" Mrows/s"))
    if "triton_speedup" in df:
        sp = piv("triton_speedup").drop(columns=["triton"], errors="ignore").round(2)
        blocks.append(sp.add_prefix("x vs "))
    table = pd.concat([b for b in blocks if b is not None], axis=1)
    print(f"\n{meta['gpu']} | torch {meta['torch']} triton {meta['triton']} | copy {copy_gbps:.0f} GB/s | "
          f"{'CUDA graphs' if meta['cudagraph'] else 'eager launches'} | median over rounds of do_bench medians; "
          "'x vs P' = P's time / triton's time")
    with pd.option_context("display.width", 300, "display.max_rows", 1000, "display.max_columns", 100):
        print(table.to_string())
