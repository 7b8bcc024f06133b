"""Sweep activation launch configs on a GPU; prints the best per shape and writes a CSV.

    PYTHONPATH=. python scripts/tune_activation.py -o tune.csv

The evidence behind act_launch_config's constants; not part of the test suite.
"""

import argparse
import itertools
import sys

import pandas as pd
import torch
import triton
from triton.testing import do_bench, do_bench_cudagraph

from aiter_lite.ops.native import activation as native
from aiter_lite.ops.triton.activation import ActLaunchConfig, act_and_mul, act_launch_config
from aiter_lite.spec.device import device_profile


def _configs():
    for bn, tile, w in itertools.product([128, 256, 512, 1024, 2048, 4096],
                                         [256, 512, 1024, 2048, 4096, 8192, 16384], [1, 2, 4, 8]):
        if tile >= bn and 128 <= tile // w <= 4096:
            yield ActLaunchConfig(tile // bn, bn, w)


def _parse(text):
    for c in text.split(","):
        m, rest = c.split("x")
        n, w = rest.split("w")
        yield ActLaunchConfig(int(m), int(n), int(w))


def main(argv=None):
    p = argparse.ArgumentParser()
    p.add_argument("-o", default="tune_activation.csv")
    p.add_argument("--ns", default="14336,28672")
    p.add_argument("--ms", default="1,64,128,512,4096,16384,32768")
    p.add_argument("--act", default="silu")
    p.add_argument("--dtype", default="bfloat16")
    p.add_argument("--cudagraph", action="store_true")
    p.add_argument("--configs", help="comma list like 2x1024w8 (default: the full sweep)")
    a = p.parse_args(argv)
    dtype = getattr(torch, a.dtype)
    bench = (lambda f: do_bench_cudagraph(f, rep=50, return_mode="median")) if a.cudagraph else (
        lambda f: do_bench(f, warmup=25, rep=60, return_mode="median"))
    src = torch.empty(2**30, dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    t = do_bench(lambda: dst.copy_(src), warmup=50, rep=300, return_mode="median")
    copy_gbs = 2 * src.numel() / t / 1e6
    print(f"device copy: {copy_gbs:.0f} GB/s  torch {torch.__version__} triton {triton.__version__} "
          f"{torch.cuda.get_device_name()}", flush=True)
    del src, dst
    rows = []
    try:
        from liger_kernel.ops.swiglu import LigerSiLUMulFunction
    except Exception:
        LigerSiLUMulFunction = None
    sys.path.insert(0, ".")
    from op_benchmarks.utils.harness import compile_static

    compiled = compile_static(native.gated)
    for n in map(int, a.ns.split(",")):
        for m in map(int, a.ms.split(",")):
            x = torch.randn(m, 2 * n, device="cuda", dtype=dtype)
            y = torch.empty(m, n, device="cuda", dtype=dtype)
            nbytes = 3 * m * n * x.element_size()
            for _ in range(3):
                compiled(x, a.act)
            ref = {"compile": bench(lambda: compiled(x, a.act))}
            if LigerSiLUMulFunction is not None and a.act == "silu":
                ga, up = x[:, :n].contiguous(), x[:, n:].contiguous()
                ref["liger"] = bench(lambda: LigerSiLUMulFunction.apply(ga, up))
            ref["default"] = bench(lambda: act_and_mul(y, x, a.act))
            for name, ms in ref.items():
                rows.append(dict(n=n, m=m, cfg=name, us=ms * 1e3, gbs=nbytes / ms / 1e6))
            for cfg in _parse(a.configs) if a.configs else _configs():
                if cfg.BLOCK_N > 2 * triton.next_power_of_2(n) or cfg.BLOCK_M > 2 * triton.next_power_of_2(m):
                    continue
                for _ in range(3):  # compile, then let clocks settle before timing
                    act_and_mul(y, x, a.act, config=cfg)
                ms = bench(lambda: act_and_mul(y, x, a.act, config=cfg))
                rows.append(dict(n=n, m=m, cfg=f"{cfg.BLOCK_M}x{cfg.BLOCK_N}w{cfg.num_warps}", us=ms * 1e3,
                                 gbs=nbytes / ms / 1e6))
            df = pd.DataFrame([r for r in rows if r["n"] == n and r["m"] == m]).sort_values("us")
            refs = " ".join(f"{k}={df[df.cfg == k].us.iloc[0]:.1f}" for k in ref)
            top = " ".join(f"{c}:{u:.1f}" for c, u in zip(df.cfg[:6], df.us[:6]))
            print(f"n={n} m={m} best {df.gbs.iloc[0]:.0f}GB/s | {refs} | top {top}", flush=True)
            pd.DataFrame(rows).to_csv(a.o, index=False)
    print(f"copy {copy_gbs:.0f} GB/s; default for 32768x14336: {act_launch_config(32768, 14336, device_profile(x.device))}")


if __name__ == "__main__":
    sys.exit(main())
