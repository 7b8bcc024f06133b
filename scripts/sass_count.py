"""SASS instructions a kernel issues for one program, counted offline (no GPU): what an
instruction-bound kernel costs an element, before and after a change.

    python scripts/sass_count.py mxfp4 nvfp4 rms_mxfp4 --shape 16384x7168 [--target 90] [--dump DIR]

Each case calls a public op on meta tensors with the launch config chosen for the H100
(or the target's profile), records its launches, builds the first for ``cuda:<target>``
and counts the SASS of its entry function (cuobjdump from Triton's bundled tools): all
instructions, and per element of the program's tile (straight-line code: the kernels
counted here have no loops over the tile). Registers and spills come from the build.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.pop("TRITON_INTERPRET", None)

import torch  # noqa: E402


def _meta(*shape, dtype=torch.bfloat16):
    return torch.empty(*shape, device="meta", dtype=dtype)


# Hopper's integer / logic pipe (16 lanes a scheduler: half the issue rate), after Nsight
# Compute's pipe names; FP32 arithmetic and IMAD go to the FMA pipe (32 lanes).
ALU = {"LOP3", "IADD3", "SHF", "LEA", "PRMT", "ISETP", "SEL", "VIADDMNMX", "VIMNMX", "VIADD", "FMNMX", "FSEL",
       "FSETP", "PLOP3", "P2R", "R2P", "IABS", "SGXT", "BMSK", "MOV", "IMNMX", "FLO", "POPC", "BREV", "LOP"}
FMA = {"FMUL", "FADD", "FFMA", "IMAD", "HFMA2", "HADD2", "HMUL2", "IMUL", "FMUL2", "FADD2", "FFMA2"}


def cases(m: int, n: int) -> dict:
    from aiter_lite.ops.triton import activation as act
    from aiter_lite.ops.triton import fusions as fus
    from aiter_lite.ops.triton.quant import quant as qt
    from aiter_lite.ops.triton.quant import fused_fp8_quant as ffq
    from aiter_lite.ops.triton.quant import mx_quant as mx

    x = _meta(m, n)
    w = _meta(n)
    g = _meta(m, 2 * n)
    return {
        "silu_and_mul": lambda: act.silu_and_mul(x, g),
        "silu_and_mul_rounded": lambda: act.act_and_mul_rounded(x, g, "silu"),
        "mul_and_silu": lambda: act.act_and_mul_rounded(x, g, "silu", False),
        "fatrelu_and_mul": lambda: act.fatrelu_and_mul(x, g, 0.1),
        "gelu_new": lambda: act.gelu_new(x),
        "gelu_fast": lambda: act.gelu_fast(x),
        "gelu_quick": lambda: act.gelu_quick(x),
        "gelu_fast_fp16": lambda: act.gelu_fast(_meta(m, n, dtype=torch.float16)),
        "gelu_quick_fp16": lambda: act.gelu_quick(_meta(m, n, dtype=torch.float16)),
        "mul_and_silu_fp16": lambda: act.act_and_mul_rounded(_meta(m, n, dtype=torch.float16),
                                                             _meta(m, 2 * n, dtype=torch.float16), "silu", False),
        "int8_azp_dynamic": lambda: qt.dynamic_per_token_int8_azp_quant(
            _meta(m, n, dtype=torch.int8), x, _meta(m, 1, dtype=torch.float32), _meta(m, 1, dtype=torch.int32)),
        "per_token_fp8": lambda: qt.dynamic_per_token_quant_fp8_i8(
            _meta(m, n, dtype=torch.float8_e4m3fn), x, _meta(m, 1, dtype=torch.float32)),
        "per_token_int8": lambda: qt.dynamic_per_token_quant_fp8_i8(
            _meta(m, n, dtype=torch.int8), x, _meta(m, 1, dtype=torch.float32)),
        "mxfp4": lambda: mx.dynamic_mxfp4_quant(x),
        "gated_fp8_group": lambda: ffq.fused_rms_gated_fp8_group_quant(x, w, None, _meta(m, n), 1e-6,
                                                                        out_dtype=torch.float8_e4m3fn,
                                                                        group_size=128),
        "mxfp8": lambda: mx.dynamic_mxfp8_quant(x, None, torch.float8_e4m3fn),
        "nvfp4": lambda: mx.dynamic_nvfp4_quant(x, _meta(1, dtype=torch.float32)),
        "silu_mxfp4": lambda: mx.act_mul_and_mxfp4_quant(_meta(m, 2 * n), "silu"),
        "rms_mxfp4": lambda: mx.fused_rms_mxfp4_quant(x, w, 1e-6),
        "add_rms_mxfp4": lambda: mx.fused_rms_mxfp4_quant(x, w, 1e-6, None, None, 0.0, _meta(m, n)),
        "rms_mxfp8": lambda: mx.fused_rms_mxfp8_quant(x, w, 1e-6),
        # the classic paged caches: m tokens of n // 128 KV heads of 128, blocks of 16 (a prefill's tiles)
        **{f"kv_write_classic{sfx}": lambda dt=dt, xw=16 // dt.itemsize: fus.kv_cache_write(
            _meta(m, n // 128, 128), _meta(m, n // 128, 128), _meta(m // 16, n // 128, 128 // xw, 16, xw, dtype=dt),
            _meta(m // 16, n // 128, 128, 16, dtype=dt), _meta(m, dtype=torch.int64), None, None, False)
           for sfx, dt in (("", torch.bfloat16), ("_fp8", torch.float8_e4m3fn))},
        # vLLM's fp8 write: divided by a runtime scale
        "kv_write_classic_fp8_div": lambda: fus.kv_cache_write(
            _meta(m, n // 128, 128), _meta(m, n // 128, 128), _meta(m // 16, n // 128, 8, 16, 16, dtype=torch.uint8)
            .view(torch.float8_e4m3fn), _meta(m // 16, n // 128, 128, 16, dtype=torch.float8_e4m3fn),
            _meta(m, dtype=torch.int64), _meta(1, dtype=torch.float32), _meta(1, dtype=torch.float32), False),
        "kv_write_flash_fp8_div": lambda: fus.kv_cache_write(
            _meta(m, n // 128, 128), _meta(m, n // 128, 128), _meta(m // 16, 16, n // 128, 128, dtype=torch.float8_e4m3fn),
            _meta(m // 16, 16, n // 128, 128, dtype=torch.float8_e4m3fn), _meta(m, dtype=torch.int64),
            _meta(1, dtype=torch.float32), _meta(1, dtype=torch.float32), True),
        # vLLM's convert_fp8: m cache blocks of n elements, bf16 into e4m3 and back
        "cache_convert": lambda: fus.convert_kv_cache(_meta(m, n, dtype=torch.float8_e4m3fn), x, 1.0),
        "cache_convert_back": lambda: fus.convert_kv_cache(x, _meta(m, n, dtype=torch.float8_e4m3fn), 1.0),
        "flatten_mxfp4": lambda: mx.fused_flatten_mxfp4_quant(_meta(m, n // 128, 128)),
        "flatten_mxfp4_strided": lambda: mx.fused_flatten_mxfp4_quant(
            _meta(n // 128, m, 128).transpose(0, 1)),
    }


def sass(kernel, args, meta, target: int, dump: Path | None, name: str) -> dict:
    import triton
    from triton.compiler import ASTSource, make_backend
    from triton.backends.compiler import GPUTarget

    from op_tests.utils import kernel_builds as kb

    tgt = GPUTarget("cuda", target, 32)
    backend = make_backend(tgt)
    signature, constexprs, attrs, options, _ = kb._typed(kernel, args, meta, backend, fp64=False)
    compiled = triton.compile(ASTSource(kernel, signature, constexprs, attrs), target=tgt,
                              options=options.__dict__)
    tool = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "cuobjdump"
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(compiled.asm["cubin"])
        f.flush()
        text = subprocess.run([str(tool), "-sass", f.name], capture_output=True, text=True, check=True).stdout
        res = subprocess.run([str(tool), "-res-usage", f.name], capture_output=True, text=True, check=True).stdout
    ops = [m.group(1).split(".")[0] for m in re.finditer(r"/\*[0-9a-f]{4}\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]*)", text)]
    ops = [o for o in ops if o not in ("NOP",)]
    if dump is not None:
        dump.mkdir(parents=True, exist_ok=True)
        (dump / f"{name}.sass").write_text(text)
        (dump / f"{name}.ptx").write_text(compiled.asm["ptx"])
        (dump / f"{name}.ttgir").write_text(compiled.asm["ttgir"])
    usage = dict(re.findall(r"(REG|LOCAL):(\d+)", res))
    return dict(total=len(ops), hist=Counter(ops), regs=int(usage["REG"]), spills=int(usage["LOCAL"]))


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("ops", nargs="+")
    p.add_argument("--shape", default="16384x7168")
    p.add_argument("--target", type=int, default=90)
    p.add_argument("--dump", type=Path)
    p.add_argument("--hist", action="store_true", help="print each op's opcode histogram")
    p.add_argument("--mx", help="MX ops' launch config fields over the chosen one, e.g. PER_SM=8,BLOCK_M=4")
    args = p.parse_args(argv)
    m, n = (int(v) for v in args.shape.split("x"))

    from aiter_lite.spec.device import B200, H100, use_profile
    from aiter_lite.utils.fast_launch import record
    from op_tests.utils import kernel_builds as kb

    kb.offline()
    if args.mx:
        import dataclasses

        from aiter_lite.ops.triton.quant import mx_quant as mx

        chooser = mx.mx_quant_launch_config
        fields = {k: int(v) for k, v in (kv.split("=") for kv in args.mx.split(","))}
        mx.mx_quant_launch_config = lambda *a, **k: dataclasses.replace(chooser(*a, **k), **fields)
    profile = {90: H100, 100: B200}.get(args.target, H100)
    table = cases(m, n)
    print(f"{'op':24s} {'tile':>14s} {'warps':>5s} {'regs':>4s} {'spill':>5s} {'SASS':>6s} {'/elem':>6s} "
          f"{'ALU/el':>6s} {'FMA/el':>6s}")
    for name in args.ops:
        with use_profile(profile):
            _, launches = record(table[name])
        kernel, grid, kargs, meta = launches[0]
        # a persistent program: one tile an iteration; group-tiled kernels: BLOCK_G groups of GROUP columns;
        # the cache writes: BLOCK_T tokens of BLOCK_H heads of BLOCK_D channels
        cols = (meta.get("BLOCK_N") or meta.get("BLOCK_G", 1) * meta.get("GROUP", 1)
                * meta.get("BLOCK_H", 1) * meta.get("BLOCK_D", 1))
        elems = meta.get("BLOCK_M", meta.get("BLOCK_T", 1)) * cols
        r = sass(kernel, kargs, meta, args.target, args.dump, name)
        lanes = 32 * meta["num_warps"]
        tile = f"{meta.get('BLOCK_M', meta.get('BLOCK_T'))}x{cols}"
        print(f"{name:24s} {tile:>14s} {meta['num_warps']:5d} {r['regs']:4d} {r['spills']:5d} {r['total']:6d} "
              f"{r['total'] * lanes / elems:6.1f} {sum(r['hist'][k] for k in ALU) * lanes / elems:6.1f} "
              f"{sum(r['hist'][k] for k in FMA) * lanes / elems:6.1f}")
        if args.hist:
            print("   ", ", ".join(f"{k} {v}" for k, v in r["hist"].most_common(30)))


if __name__ == "__main__":
    main()
