"""Host time of one eager call at decode size, for every registered op.

    python op_benchmarks/bench_host.py                       # every op, 1 token
    python op_benchmarks/bench_host.py --tokens 1 64 --op rms_norm fused_add_rms_norm

At decode sizes a kernel runs for a few microseconds and the host's work per call
(argument checks, launch configuration, Triton's launcher) decides the step time.
Each op runs with its arguments at ``decode_dims(tokens)`` (op_benchmarks.utils.op_args:
llama3-8B widths, DeepSeek-V3 routing and MLA cache, bf16 activations, fp8 outputs)
through these paths:

* bare: the kernel launches one checked call made, repeated as
  ``kernel[grid](*args, **meta)`` on the same tensors (Triton's own launcher, no checks,
  no allocation): the baseline;
* repeated: the op's Python function, as a serving loop calls it, the same argument
  signature call after call (launch plans on: after its first ``RECORD_AT`` calls it launches
  from its plan, ``aiter_lite.utils.fast_launch``);
* checked: the same with plans off (``AITER_FAST_LAUNCH=0``);
* new: plans on, a signature never seen before on every call (``--new`` argument sets of
  ``tokens + 1``, ``tokens + 2``, ... rows, every key forgotten before each round), as a
  serving stack sees each new prefill length; ``new_checked``: as many other new sets with
  plans off, the two paths taking turns call by call (the sets trade places each round);
* registered: ``torch.ops.aiter_lite.<name>``, the dispatcher on top of eager.

A path's time is the host time of ``--calls`` calls back to back (the GPU keeps up:
nothing waits for it) over the call count, the median of ``--rounds`` rounds taken in
turn. The targets: repeated within ``max(1.2 x bare, bare + 5 us)``; new within
``1.2 x new_checked``.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import pathlib
import statistics
import sys
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

from op_benchmarks.utils import harness  # noqa: E402  (sets TRITON_INTERPRET on CPU before aiter_lite loads)

import torch  # noqa: E402
import triton  # noqa: E402

import aiter_lite.library as library  # noqa: E402
from aiter_lite.ops.triton.quant import get_fp8_e4m3_dtype  # noqa: E402
from aiter_lite.utils import fast_launch  # noqa: E402
from op_benchmarks.utils.op_args import TINY, decode_dims, op_args  # noqa: E402

PATHS = ("bare", "repeated", "checked", "new", "new_checked", "registered")
NEW_LIMIT = 1.2  # a new signature against the checked path


def _limit(bare_us: float) -> float:
    return max(1.2 * bare_us, bare_us + 5.0)


def _host_us(fn, calls: int) -> float:
    t0 = time.perf_counter()
    for _ in range(calls):
        fn()
    return (time.perf_counter() - t0) / calls * 1e6


def _sync():
    if harness.ON_GPU:
        torch.cuda.synchronize()


def _paths(name: str, args: tuple) -> tuple[dict, int]:
    """The same-signature paths of one op on ``args``, and how many launches a call makes."""
    spec = library.OPS[name]
    _, launches = fast_launch.record(spec.triton, *args)

    def bare():
        for kernel, grid, a, meta in launches:
            kernel[grid](*a, **meta)

    def checked():
        with fast_launch.plans_off():
            spec.triton(*args)

    registered = getattr(torch.ops.aiter_lite, name)
    return {"bare": bare, "repeated": lambda: spec.triton(*args), "checked": checked,
            "registered": lambda: registered(*args)}, len(launches)


def _new_signatures(name: str, new_sets: list, checked_sets: list) -> tuple:
    """Host us a call of never-seen signatures (plans forgotten first), plans on over
    ``new_sets`` and plans off over ``checked_sets``, call for call in turn: both paths see
    the host as warm or cold (a first pass over fresh argument sets runs slower on its own)."""
    fn = library.OPS[name].triton
    fast_launch.reset()
    new = checked = 0.0
    for a, b in zip(new_sets, checked_sets):
        t0 = time.perf_counter()
        fn(*a)
        new += time.perf_counter() - t0
        with fast_launch.plans_off():
            t0 = time.perf_counter()
            fn(*b)
            checked += time.perf_counter() - t0
    _sync()
    return new / len(new_sets) * 1e6, checked / len(checked_sets) * 1e6


def measure(names: list[str], tokens: int, calls: int, rounds: int, n_new: int) -> list[dict]:
    dims = decode_dims(tokens) if harness.ON_GPU else TINY
    qdtype = get_fp8_e4m3_dtype() if harness.ON_GPU else torch.int8
    dtype = torch.bfloat16 if harness.ON_GPU else torch.float32
    rows = []
    for name in names:
        args = op_args(name, dims, harness.DEVICE, dtype, qdtype)
        sets = [op_args(name, dataclasses.replace(dims, tokens=dims.tokens + i), harness.DEVICE, dtype, qdtype)
                for i in range(1, 2 * n_new + 1)]
        halves = sets[:n_new], sets[n_new:]
        fast_launch.reset()
        fns, n_launches = _paths(name, args)
        for fn in fns.values():  # compile, record the plan, warm the caches
            for _ in range(fast_launch.RECORD_AT + 1):
                fn()
        planned = fast_launch.plan_count() > 0
        with fast_launch.plans_off():
            for a in sets:  # every specialization the new row counts make, compiled
                library.OPS[name].triton(*a)
        _sync()
        times = {p: [] for p in PATHS}
        for r in range(rounds):
            for p, fn in fns.items():
                _sync()
                times[p].append(_host_us(fn, calls))
            new, new_checked = _new_signatures(name, halves[r % 2], halves[1 - r % 2])
            times["new"].append(new)
            times["new_checked"].append(new_checked)
            fast_launch.reset()
            for _ in range(fast_launch.RECORD_AT + 1):  # the repeated call's plan again
                fns["repeated"]()
        _sync()
        us = {p: statistics.median(t) for p, t in times.items()}
        print(f"{name:>44} x{dims.tokens}: bare {us['bare']:.1f} us, repeated {us['repeated']:.1f} us, "
              f"new {us['new']:.1f} us (checked {us['new_checked']:.1f})", flush=True)
        rows.append(dict(op=name, tokens=dims.tokens, launches=n_launches, plan=planned,
                         **{f"{p}_us": round(v, 2) for p, v in us.items()},
                         limit_us=round(_limit(us["bare"]), 2), ok=us["repeated"] <= _limit(us["bare"]),
                         new_ratio=round(us["new"] / us["new_checked"], 3),
                         new_ok=us["new"] <= NEW_LIMIT * us["new_checked"]))
    return rows


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--op", nargs="+", default=None, help="registered op names (default: every op)")
    p.add_argument("--tokens", nargs="+", type=int, default=[1], help="decode batch sizes (default 1)")
    p.add_argument("--calls", type=int, default=200, help="calls a round (default 200)")
    p.add_argument("--rounds", type=int, default=15, help="rounds a path, the median reported (default 15)")
    p.add_argument("--new", type=int, default=32, help="new signatures a round, for the 'new' paths (default 32)")
    p.add_argument("-o", "--output", help="CSV file to write")
    args = p.parse_args(argv)
    import pandas as pd

    names = args.op or sorted(library.OPS)
    unknown = [n for n in names if n not in library.OPS]
    if unknown:
        raise SystemExit(f"--op: unknown {unknown}; registered ops: {', '.join(sorted(library.OPS))}")
    if not harness.ON_GPU:
        print("bench_host: no GPU found; tiny arguments through the Triton interpreter, two calls a round. "
              "This is a smoke test: its timings mean nothing.")
        args.calls, args.rounds, args.tokens, args.new = 2, 1, [TINY.tokens], 2
    rows = [r for t in args.tokens for r in measure(names, t, args.calls, args.rounds, args.new)]
    df = pd.DataFrame(rows)
    df["gpu"] = torch.cuda.get_device_name() if harness.ON_GPU else "cpu (interpreter)"
    df["torch"], df["triton"] = torch.__version__, triton.__version__
    df["timestamp"] = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    if args.output:
        df.to_csv(args.output, index=False)
    cols = ["op", "tokens", "launches", "plan"] + [f"{p}_us" for p in PATHS] + ["limit_us", "ok", "new_ratio",
                                                                               "new_ok"]
    with pd.option_context("display.max_rows", None, "display.width", 250):
        print(f"\n{df.gpu[0]} | torch {torch.__version__} triton {triton.__version__} | host us a call, "
              f"median of {args.rounds} rounds of {args.calls} calls ({args.new} new signatures); "
              f"limit = max(1.2 x bare, bare + 5); new within {NEW_LIMIT} x new_checked")
        print(df[cols].to_string(index=False))
    print(f"\nrepeated within the limit: {int(df.ok.sum())} of {len(df)}; "
          f"new signature within {NEW_LIMIT} x checked: {int(df.new_ok.sum())} of {len(df)}")
    return df


if __name__ == "__main__":
    main()
