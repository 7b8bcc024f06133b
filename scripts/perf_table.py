"""Summarise benchmark CSVs (from op_benchmarks/bench_*.py -o) as the tables in docs/.

    python scripts/perf_table.py bench_activation.csv bench_activation_cudagraph.csv

Per shape: µs of each provider, aiter_lite's GB/s and % of the copy measured in
the same run, and peer/triton = the best peer's time over aiter_lite's (above 1:
aiter_lite is faster). Peers are every provider but triton and native.
"""

import argparse

import pandas as pd


def table(df: pd.DataFrame) -> pd.DataFrame:
    dims = [c for c in df.columns if c.isupper() or c == "op"]
    us = df.pivot_table(index=dims, columns="provider", values="us", sort=False)
    tri = df[df.provider == "triton"].set_index(dims)
    out = us.round(2).add_suffix(" us")
    out["triton GB/s"] = tri["gbps"].round(0)
    out["triton %copy"] = tri["pct_copy"].round(1)
    peers = [p for p in us.columns if p not in ("triton", "native")]
    if peers:
        out["peer/triton"] = (us[peers].min(axis=1) / us["triton"]).round(3)
    return out


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("csv", nargs="+")
    for path in p.parse_args(argv).csv:
        df = pd.read_csv(path)
        r = df.iloc[0]
        mode = "CUDA graphs" if r.get("cudagraph", False) else "eager (do_bench, L2 flushed)"
        print(f"{path}: {r.gpu}, torch {r.torch}, triton {r.triton}, copy {r.copy_gbps:.0f} GB/s, {mode}")
        with pd.option_context("display.width", 250, "display.max_rows", 1000, "display.max_columns", 50):
            print(table(df).to_string())
        print()


if __name__ == "__main__":
    main()
