"""Tile sweep of the MX / NV quantization kernel on a GPU: each op timed with each pinned
launch config beside the default, and a device copy, in one run.

    python scripts/tune_mx.py [--ops mxfp4 nvfp4 ...] [--shapes 16384x7168 ...] [-o tune_mx.csv]

Bytes as bench_mx_quant.py counts them. Each config is pinned by replacing the module's
config chooser (launch plans reset between configs, so each call takes the new tile).
Prints, per op and shape, every config's µs and % of copy, the default's marked.
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from op_benchmarks.utils import harness  # noqa: E402  (sets TRITON_INTERPRET on CPU before aiter_lite loads)

import torch  # noqa: E402

from aiter_lite.ops.triton.quant import mx_quant as tri  # noqa: E402
from aiter_lite.utils import fast_launch  # noqa: E402
from op_benchmarks import bench_mx_quant as bench  # noqa: E402

Config = tri.MxQuantLaunchConfig
# 32 values a lane (one MX block), and 64 (two blocks: twice the loads in flight a warp)
ROW_TILES = [Config(m, n, w) for m, n, w in (
    (1, 1024, 1), (2, 1024, 2), (4, 1024, 4), (1, 512, 1), (2, 512, 1), (4, 512, 2), (8, 512, 4),
    (1, 2048, 2), (2, 2048, 4), (4, 256, 1), (8, 256, 2), (16, 256, 4),
    (2, 1024, 1), (4, 1024, 2), (8, 1024, 4), (8, 512, 2), (16, 256, 2))]
# BLOCK_N 0: the row's padded width in registers; else the row in chunks of BLOCK_N (ROW_LOOP)
RMS_TILES = [Config(m, 0, w) for m, w in ((1, 2), (1, 4), (1, 8), (1, 16), (2, 4), (2, 8), (2, 16), (4, 8), (4, 16))] + [
    Config(m, n, w, ROW_LOOP=True) for m, n, w in ((1, 1024, 1), (2, 1024, 2), (4, 1024, 4), (1, 512, 1),
                                                   (4, 512, 2), (2, 2048, 4))]


def _name(c: Config) -> str:
    return (f"{c.BLOCK_M}x{c.BLOCK_N or 'row'}w{c.num_warps}{'loop' if c.ROW_LOOP else ''}"
            f"{'rm' if c.ROW_MAJOR else ''}")


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--ops", nargs="+", default=["mxfp4", "nvfp4", "mxfp8", "silu_mxfp4", "rms_mxfp4", "add_rms_mxfp4",
                                                 "rms_mxfp8"])
    p.add_argument("--shapes", nargs="+", default=["16384x7168", "16384x2048", "4096x16384"])
    p.add_argument("--rep", type=int, default=50)
    p.add_argument("--row-major", action="store_true",
                   help="each tile in both grid orders (a row block's column blocks in turn: 'rm'), not the default's")
    p.add_argument("--tiles", nargs="+", help="only these tiles (names as printed, e.g. 4x1024w4)")
    p.add_argument("-o", "--output")
    args = p.parse_args(argv)
    copy = harness.copy_bandwidth_gbps()
    print(f"copy {copy:.0f} GB/s on {torch.cuda.get_device_name() if torch.cuda.is_available() else 'the CPU'}")
    chooser = tri.mx_quant_launch_config
    rows = []
    for op in args.ops:
        for shape in args.shapes:
            m, n = (int(v) for v in shape.split("x"))
            if op.startswith(("rms", "add_rms")) and n > bench.RMS_MAX_N:
                continue
            case = bench._case(op, "tune", m, n, torch.bfloat16)
            inputs = case.make_inputs()
            tiles = RMS_TILES if "rms" in op else ROW_TILES
            if args.tiles:
                tiles = [t for t in tiles if _name(t) in args.tiles]
            if args.row_major:
                tiles = [dataclasses.replace(t, ROW_MAJOR=rm) for t in tiles for rm in (False, True)]
            for cfg in [None, *tiles]:
                used = []

                def pinned(producer, fmt, n_rows, n_cols, profile=None, *rest, _cfg=cfg, _used=used):
                    c = chooser(producer, fmt, n_rows, n_cols, profile, *rest)
                    if _cfg is not None:
                        c = dataclasses.replace(_cfg, BLOCK_N=_cfg.BLOCK_N or c.BLOCK_N,
                                                ROW_MAJOR=_cfg.ROW_MAJOR if args.row_major else c.ROW_MAJOR)
                    _used.append(c)
                    return c

                tri.mx_quant_launch_config = pinned
                fast_launch.reset()
                fn = bench._call(tri, case, inputs)
                try:
                    ms = harness._time_ms(fn, False, args.rep)  # on a CPU one interpreted call: a smoke test
                except Exception as e:  # noqa: BLE001 (a tile that does not build is a row of the table)
                    print(f"{op} {shape} {cfg}: {type(e).__name__}: {str(e)[:120]}")
                    continue
                gbps = case.nbytes / ms / 1e6
                c = used[-1]
                rows.append(dict(op=op, shape=shape, config="default" if cfg is None else _name(cfg),
                                 tile=_name(c), us=ms * 1e3, gbps=gbps,
                                 pct_copy=100 * gbps / copy))
            tri.mx_quant_launch_config = chooser
    if args.output:
        with open(args.output, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=list(rows[0]))
            w.writeheader()
            w.writerows(rows)
    for (op, shape) in dict.fromkeys((r["op"], r["shape"]) for r in rows):
        group = [r for r in rows if r["op"] == op and r["shape"] == shape]
        best = max(group, key=lambda r: r["gbps"])
        default = group[0]
        print(f"{op:14s} {shape:11s} default {default['tile']:>15s} {default['us']:7.1f} us {default['pct_copy']:5.1f}%"
              f" | best {best['config']:>15s} {best['us']:7.1f} us {best['pct_copy']:5.1f}%")


if __name__ == "__main__":
    main()
