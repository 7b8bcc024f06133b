"""Sweep normalization launch configs on a GPU (bf16); the evidence behind
norm_launch_config / norm_bwd_launch_config. Prints the best per shape; writes a CSV.

    PYTHONPATH=. python scripts/tune_norm.py --ns 256,4096,32768 --elems 67108864 -o tune_norm.csv
    PYTHONPATH=. python scripts/tune_norm.py --what fwd,add --kind ln --evict ,evict_last

``--what``: fwd (norm), add (fused residual add + norm), bwd, addbwd (the fused-add forms'
backward, which adds residual_out's gradient). ``--kind``: rms or ln. ``--cudagraph``: time
CUDA-graph replays (no host time: what a small shape's kernel takes).
``--evict``: cache hints tried for the in-register forward's loads; ``--fams``: config
families besides the default (tile, looped, small, static, split, wfirst; none for the default alone).
"""

import argparse
import dataclasses
import itertools

import pandas as pd
import torch
from triton.testing import do_bench, do_bench_cudagraph

from aiter_lite.ops.triton.normalization import norm as nm
from aiter_lite.ops.triton.normalization.norm import NormLaunchConfig
from aiter_lite.spec.device import device_profile


def fwd_configs(n, fams):
    bn = 1 << (n - 1).bit_length()
    if bn <= 65536 and "tile" in fams:  # 65536 in registers spills: measured, not assumed
        for bm, w in itertools.product([1, 2, 4, 8, 16, 32, 64], [4, 8, 16, 32]):
            tile = bm * bn
            if 1024 <= tile <= max(32768, bn) and 4 <= tile // (w * 32) <= 64:
                yield NormLaunchConfig(bm, bn, w, False)
    if bn >= 8192 and "looped" in fams:
        for b, w, pre in itertools.product([4096, 8192, 16384], [4, 8, 16], [False, True]):
            if 8 <= b // (w * 32) <= 64 and not (pre and b // (w * 32) > 32):
                yield NormLaunchConfig(1, b, w, True, PREFETCH=pre)
    if "small" in fams:  # small programs, many per SM: 1-2 warps per tile, short looped chunks
        for bm, w in itertools.product([1, 2, 4, 8], [1, 2]):
            if 256 <= bm * bn <= 4096:
                yield NormLaunchConfig(bm, bn, w, False)
        if bn >= 4096:
            for b, w in itertools.product([1024, 2048, 4096], [4, 8, 16]):
                if 2 <= b // (w * 32) <= 16 and b < bn:
                    yield NormLaunchConfig(1, b, w, True)
    if bn >= 8192 and "static" in fams:  # the row width compiled in, every chunk unrolled
        for b, w in itertools.product([2048, 4096, 8192], [8, 16, 32]):
            if 4 <= b // (w * 32) <= 16 and 2 <= bn // b <= 32:
                yield NormLaunchConfig(1, b, w, True, STATIC=True)
    if bn >= 16384 and "split" in fams:  # segments of one tile each, one program each, held in registers
        for b, w in itertools.product([4096, 8192, 16384], [4, 8, 16]):
            if b < bn and 8 <= b // (w * 32) <= 64:
                yield NormLaunchConfig(1, b, w, False, SPLIT=True)


def bwd_configs(n, sms, fams, mults):
    bn = 1 << (n - 1).bit_length()
    cands = []
    if bn <= 16384 and "tile" in fams:
        for bm, w in itertools.product([1, 2, 4, 8, 16, 32], [4, 8, 16]):
            tile = bm * bn
            if 2048 <= tile <= 16384 and 8 <= tile // (w * 32) <= 32:
                cands.append(NormLaunchConfig(bm, bn, w, False))
    if bn >= 8192 and "looped" in fams:
        for bm, b, w in itertools.product([1, 4, 8], [512, 1024, 2048], [4, 8]):
            if 4 <= bm * b // (w * 32) <= 32:
                cands.append(NormLaunchConfig(bm, b, w, True))
    for cfg, mult, pre in itertools.product(cands, mults, [False, True]):
        yield dataclasses.replace(cfg, PREFETCH=pre), mult * sms


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--ns", default="256,1024,4096,8192,16384,32768,65536,262144")
    p.add_argument("--elems", type=int, default=2**26, help="M * N")
    p.add_argument("--m", type=int, default=0, help="a fixed row count instead of --elems / N")
    p.add_argument("--what", default="fwd,bwd")
    p.add_argument("--kind", default="rms", choices=["rms", "ln"])
    p.add_argument("--evict", default="", help="comma-separated load hints for the in-register forward")
    p.add_argument("--fams", default="tile,looped", help="config families to try besides the default")
    p.add_argument("--mults", default="1,2,4,8", help="backward programs per SM to try")
    p.add_argument("--cudagraph", action="store_true", help="time CUDA-graph replays")
    p.add_argument("-o", default="tune_norm.csv")
    a = p.parse_args()
    dev = torch.device("cuda")
    sms = device_profile(dev).sms
    rows = []
    for n in map(int, a.ns.split(",")):
        m = a.m or a.elems // n
        x = torch.randn(m, n, device=dev, dtype=torch.bfloat16)
        w = torch.randn(n, device=dev, dtype=torch.bfloat16)
        y = torch.empty_like(x)
        b = None if a.kind == "rms" else torch.randn(n, device=dev, dtype=torch.bfloat16)
        rms = a.kind == "rms"
        rstd = torch.empty(m, device=dev, dtype=torch.float32)
        mean = None if rms else torch.empty(m, device=dev, dtype=torch.float32)
        dy = torch.randn_like(x)
        for what in a.what.split(","):
            if what in ("fwd", "add"):
                default = nm.norm_launch_config(m, n, device_profile(dev), what == "add", rms)
                cands = list(fwd_configs(n, a.fams))
                if what == "fwd":
                    nbytes = 4 * m * n
                    kw = {}
                else:
                    nbytes = 8 * m * n
                    kw = dict(residual=torch.randn_like(x), residual_out=torch.empty_like(x))

                def run(c, _):
                    nm._launch_norm_fwd(x, y, w, b, 1e-6, rms, config=c, **kw)
                if a.evict:  # the default's tile and each in-register candidate with every hint
                    tiles = [dataclasses.replace(default, EVICT="")] + [c for c in cands if not c.LOOPED]
                    cands = [dataclasses.replace(c, EVICT=ev) for c in tiles for ev in a.evict.split(",")] + [
                        c for c in cands if c.LOOPED]
                if "wfirst" in a.fams:  # the weight loaded with the row, for the default and every tile
                    cands += [dataclasses.replace(c, W_FIRST=True) for c in [default] + cands
                              if not c.LOOPED and not c.SPLIT]
                cands = [(None, None)] + [(c, None) for c in cands]
            else:
                add = what == "addbwd"
                default = nm.norm_bwd_launch_config(m, n, device_profile(dev), rms, add)
                cands = [(None, None)] + list(bwd_configs(n, sms, a.fams, [int(v) for v in a.mults.split(",")]))
                nm._launch_norm_fwd(x, y, w, b, 1e-6, rms, rstd=rstd, mean=mean)
                nbytes = (8 if add else 6) * m * n
                dx, dw = torch.empty_like(x), torch.empty(n, dtype=w.dtype, device=dev)
                db = None if rms else torch.empty(n, dtype=w.dtype, device=dev)
                dres = torch.randn_like(x) if add else None

                def run(c, progs):
                    nm._launch_norm_bwd(dy, x, w, mean, rstd, dx, dw, db, rms, 0.0,
                                        None if c is None else nm.NormBwdLaunchConfig(c, progs), dres=dres)
            res = []
            for c, progs in cands:
                try:
                    for _ in range(3):
                        run(c, progs)
                    if a.cudagraph:
                        ms = do_bench_cudagraph(lambda: run(c, progs), rep=40, return_mode="median")
                    else:
                        ms = do_bench(lambda: run(c, progs), warmup=10, rep=40, return_mode="median")
                except Exception as e:  # a config the compiler rejects (registers, shared memory)
                    print(f"  skip {c}: {type(e).__name__}")
                    continue
                name = "default" if c is None else (
                    f"{c.BLOCK_M}x{c.BLOCK_N}w{c.num_warps}{'L' if c.LOOPED else ''}{'P' if c.PREFETCH else ''}"
                    f"{'C' if c.STATIC else ''}{'S' if c.SPLIT else ''}{'W' if c.W_FIRST else ''}{'/' + c.EVICT if c.EVICT else ''}")
                if progs:
                    name += f"p{progs // sms}"
                res.append((ms * 1e3, name))
                rows.append(dict(what=what, kind=a.kind, m=m, n=n, cfg=name, us=ms * 1e3, gbs=nbytes / ms / 1e6))
            res.sort()
            d = min(u for u, k in res if k.startswith("default"))
            print(f"{a.kind} {what} {m}x{n}: default={d:.1f}us ({nbytes / d / 1e3:.0f} GB/s) {default} | best " +
                  " ".join(f"{k}:{u:.1f}" for u, k in res[:5]), flush=True)
        pd.DataFrame(rows).to_csv(a.o, index=False)


if __name__ == "__main__":
    main()
