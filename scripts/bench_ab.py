"""Kernel time of two checkouts side by side, on one GPU in one run: did a change move it?

    python scripts/bench_ab.py --base ../aiter_lite_old -o out/ \
        "bench_activation -M 16384" "bench_rmsnorm --sweep" "bench_rope -M 32768"

Each bench runs with ``--providers triton`` from the base checkout and from this one in
turn (base, this, base, this with ``--repeat 2``: a clock drift then hits both alike), each
in its own process with that checkout first on ``PYTHONPATH``. The report joins the two
CSVs shape by shape: the median µs of each, and this checkout's time over the base's;
rows beyond ``--tolerance`` are marked. Writes ``ab.csv`` (every shape) under ``-o``.
"""

from __future__ import annotations

import argparse
import os
import pathlib
import shlex
import subprocess
import sys

HERE = pathlib.Path(__file__).resolve().parents[1]
KEY_DROP = {"provider", "us", "gbps", "pct_copy", "rows_per_s", "spread_pct", "timestamp", "triton_speedup", "torch",
            "triton", "copy_gbps", "gpu"}


def _run(tree: pathlib.Path, bench: str, extra: list[str], csv: pathlib.Path) -> None:
    env = dict(os.environ, PYTHONPATH=f"{tree}{os.pathsep}{os.environ.get('PYTHONPATH', '')}")
    cmd = [sys.executable, str(tree / "op_benchmarks" / f"{bench}.py"), "--providers", "triton", "-o", str(csv),
           *extra]
    done = subprocess.run(cmd, env=env, cwd=tree, capture_output=True, text=True)
    if done.returncode:
        raise SystemExit(f"{bench} in {tree} failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("benches", nargs="+", help='"bench_name [its arguments]"')
    p.add_argument("--base", required=True, help="the other checkout (its repository root)")
    p.add_argument("--repeat", type=int, default=1, help="base / this rounds per bench; the median kept")
    p.add_argument("--tolerance", type=float, default=0.02, help="mark rows this much slower or faster")
    p.add_argument("-o", "--output", default="ab_out")
    args = p.parse_args(argv)
    import pandas as pd

    out = pathlib.Path(args.output)
    out.mkdir(parents=True, exist_ok=True)
    base = pathlib.Path(args.base).resolve()
    frames = []
    for spec in args.benches:
        bench, *extra = shlex.split(spec)
        runs = {"base": [], "this": []}
        for r in range(args.repeat):
            for side, tree in (("base", base), ("this", HERE)):
                csv = out / f"{bench}_{side}_{r}.csv"
                _run(tree, bench, extra, csv)
                runs[side].append(pd.read_csv(csv))
        key = [c for c in runs["this"][0].columns if c not in KEY_DROP]
        med = {side: pd.concat(dfs).query("provider == 'triton'").groupby(key, dropna=False, sort=False)["us"]
               .median() for side, dfs in runs.items()}
        joined = pd.concat({"base_us": med["base"], "this_us": med["this"]}, axis=1).reset_index()
        if "bench" not in joined:
            joined.insert(0, "bench", bench)
        frames.append(joined)
        print(f"{bench}: {len(joined)} shapes", flush=True)
    df = pd.concat(frames, ignore_index=True)
    df["ratio"] = df.this_us / df.base_us
    df["flag"] = ["slower" if r > 1 + args.tolerance else "faster" if r < 1 - args.tolerance else ""
                  for r in df.ratio]
    df.to_csv(out / "ab.csv", index=False)
    with pd.option_context("display.width", 250, "display.max_rows", 2000, "display.max_columns", 40):
        print(df.round(3).to_string(index=False))
    print(f"\n{len(df)} shapes; this / base median {df.ratio.median():.3f}, min {df.ratio.min():.3f}, "
          f"max {df.ratio.max():.3f}; beyond {args.tolerance:.0%}: {int((df.flag != '').sum())}")
    return df


if __name__ == "__main__":
    main()
