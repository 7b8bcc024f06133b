"""Sweep normalization launch configs on a GPU (RMSNorm, bf16); the evidence behind
norm_launch_config / norm_bwd_launch_config. Prints the best per shape; writes a CSV.

    PYTHONPATH=. python scripts/tune_norm.py --ns 256,4096,32768 --elems 67108864 -o tune_norm.csv
"""

import argparse
import itertools

import pandas as pd
import torch
from triton.testing import do_bench

from aiter_lite.ops.triton.normalization import norm as nm
from aiter_lite.ops.triton.normalization.norm import NormLaunchConfig
from aiter_lite.utils.launch import num_sms


def fwd_configs(n):
    bn = 1 << (n - 1).bit_length()
    if bn <= 32768:
        for bm, w in itertools.product([1, 2, 4, 8, 16, 32, 64], [4, 8, 16, 32]):
            tile = bm * bn
            if 1024 <= tile <= 32768 and 4 <= tile // (w * 32) <= 64:
                yield NormLaunchConfig(bm, bn, w, False)
    if bn >= 8192:
        for b, w in itertools.product([2048, 4096, 8192, 16384], [4, 8, 16]):
            if 8 <= b // (w * 32) <= 64:
                yield NormLaunchConfig(1, b, w, True)


def bwd_configs(n, sms):
    bn = 1 << (n - 1).bit_length()
    cands = []
    if bn <= 16384:
        for bm, w in itertools.product([1, 2, 4, 8, 16, 32], [4, 8, 16]):
            tile = bm * bn
            if 1024 <= tile <= 16384 and 4 <= tile // (w * 32) <= 32:
                cands.append(NormLaunchConfig(bm, bn, w, False))
    if bn >= 8192:
        for bm, b, w in itertools.product([1, 4, 8], [512, 1024, 2048], [4, 8]):
            if 4 <= bm * b // (w * 32) <= 32:
                cands.append(NormLaunchConfig(bm, b, w, True))
    for cfg, mult in itertools.product(cands, [1, 2, 4, 8]):
        yield cfg, mult * sms


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--ns", default="256,1024,4096,8192,16384,32768,65536,262144")
    p.add_argument("--elems", type=int, default=2**26, help="M * N")
    p.add_argument("--what", default="fwd,bwd")
    p.add_argument("-o", default="tune_norm.csv")
    a = p.parse_args()
    dev = torch.device("cuda")
    sms = num_sms(dev)
    rows = []
    for n in map(int, a.ns.split(",")):
        m = a.elems // n
        x = torch.randn(m, n, device=dev, dtype=torch.bfloat16)
        w = torch.randn(n, device=dev, dtype=torch.bfloat16)
        y = torch.empty_like(x)
        rstd = torch.empty(m, device=dev, dtype=torch.float32)
        dy = torch.randn_like(x)
        for what in a.what.split(","):
            if what == "fwd":
                default = nm.norm_launch_config(m, n, dev)
                cands = [(c, None) for c in fwd_configs(n)]
                nbytes = 4 * m * n

                def run(c, _):
                    nm.norm_fwd(x, y, w, None, 1e-6, is_rms=True, config=c)
            else:
                default = nm.norm_bwd_launch_config(m, n, dev)
                cands = list(bwd_configs(n, sms))
                nm.norm_fwd(x, y, w, None, 1e-6, is_rms=True, rstd=rstd)
                nbytes = 6 * m * n

                def run(c, progs):
                    nm.norm_bwd(dy, x, w, None, rstd, is_rms=True, weight_offset=0.0, need_dw=True, need_db=False,
                                dx_dtype=x.dtype, config=None if c is None else (c, progs))
            res = []
            for c, progs in [(None, None)] + cands:
                try:
                    for _ in range(3):
                        run(c, progs)
                    ms = do_bench(lambda: run(c, progs), warmup=10, rep=40, return_mode="median")
                except Exception as e:  # a config the compiler rejects (registers, shared memory)
                    print(f"  skip {c}: {type(e).__name__}")
                    continue
                name = "default" if c is None else f"{c.BLOCK_M}x{c.BLOCK_N}w{c.num_warps}{'L' if c.LOOPED else ''}" + (
                    f"p{progs // sms}" if progs else "")
                res.append((ms * 1e3, name))
                rows.append(dict(what=what, m=m, n=n, cfg=name, us=ms * 1e3, gbs=nbytes / ms / 1e6))
            res.sort()
            d = [u for u, k in res if k == "default"][0]
            print(f"{what} {m}x{n}: default={d:.1f}us ({nbytes / d / 1e3:.0f} GB/s) {default} | best " +
                  " ".join(f"{k}:{u:.1f}" for u, k in res[:5]), flush=True)
        pd.DataFrame(rows).to_csv(a.o, index=False)


if __name__ == "__main__":
    main()
