"""Every Triton kernel of aiter_lite built for every GPU it claims, on a machine without one.

    python scripts/check_targets.py [--fast] [--targets gfx942 sm_80 ...] [-j 2]
                                    [--csv targets.csv] [--markdown platforms.md]

For each target (gfx942 = MI300X, gfx950 = MI355X, sm_80 = A100, sm_90 = H100 / H200,
sm_100 = B200, sm_120 = RTX 50) the public wrappers are called on meta tensors with launch
configs chosen for that target's :class:`DeviceProfile` (``use_profile``) and every
``kernel[grid](...)`` recorded, not run: the specializations that target would compile.
The sweep covers every registered op at tiny sizes in each activation dtype and each
quantized dtype the target stores, the benchmark models (``model_configs.json``) at decode
and prefill token counts, and the regimes small sizes leave out (looped, wide and split
rows, backward, fp8 caches). Each distinct specialization is compiled for the target
(``triton.compile`` with its ``GPUTarget``), and read back: registers (VGPRs on AMD),
spills and scratch (local memory), shared memory / LDS, warps, and how many programs an
SM / CU holds. ``--fast`` compiles one specialization per kernel regime (its constexpr
flags and pointer dtypes; the largest tile of the regime), the form CI runs.

A target fails on: a build error; any spill or scratch (every build here is one the target
picks; a stack frame on NVIDIA, except libdevice's trig reduction in ``TRIG_STACK``); a program wider than 1024 lanes or with more shared memory / LDS than the target
has; a kernel whose programs wait for each other (``split_rows.co_resident``) launched with
more programs than the target holds at once; a quantized dtype the target cannot store
that does not raise a ValueError naming the op. Exits non-zero on any failure; prints
the kernels x targets table last.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import io
import json
import math
import multiprocessing
import os
import re
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.pop("TRITON_INTERPRET", None)  # JITFunctions to build, not the interpreter's

import torch  # noqa: E402

from aiter_lite.spec.device import A100, B200, H100, MI300X, MI355X, RTX5090, DeviceProfile  # noqa: E402
from aiter_lite.spec.quant import QUANT_DTYPES  # noqa: E402
from op_tests.utils import kernel_builds as kb  # noqa: E402

TARGETS: dict[str, DeviceProfile] = {"gfx942": MI300X, "gfx950": MI355X, "sm_80": A100, "sm_90": H100,
                                     "sm_100": B200, "sm_120": RTX5090}
ACT_DTYPES = (torch.float32, torch.float16, torch.bfloat16)
# Kernels whose NVIDIA builds keep a stack frame without spilling: libdevice's accurate
# sin / cos (angles computed in the kernel) reduce arguments past 105615 rad through a
# 28-byte local array, on a path only such angles take (a RoPE position of 131072 at
# frequency 1 does). Reported, not failed; any other stack frame fails.
TRIG_STACK = {"_rope_kernel"}
DECODE_PREFILL = (1, 16, 256, 4096, 32768)
FAST_MODELS = ("llama3-8B", "deepseek-v3")


# ---------------------------------------------------------------------------
# the sweep


def _model_dims(cfg: dict, tokens: int):
    """op_args sizes of a benchmark model at ``tokens`` tokens."""
    from op_benchmarks.utils.op_args import Dims

    experts = cfg.get("num_experts", 8)
    groups = cfg.get("n_group", 1)
    return Dims(tokens=tokens, hidden=cfg["hidden_size"], inter=cfg.get("moe_intermediate_size", cfg["intermediate_size"]),
                heads=cfg["num_attention_heads"], kv_heads=cfg["num_key_value_heads"], head_dim=cfg["head_dim"],
                rope_rows=max(8192, tokens), experts=experts, topk=cfg.get("num_experts_per_tok", 2), groups=groups,
                topk_group=cfg.get("topk_group", 1), vocab=cfg["vocab_size"], k=50, group_size=128,
                blocks=max(64, 2 * tokens), block_size=16, kv_lora=cfg.get("kv_lora_rank", 512),
                rope_dim=cfg.get("qk_rope_head_dim", 64))


def sweep(profile: DeviceProfile, fast: bool, only: tuple[str, ...] = ()) -> list[tuple[str, object]]:
    """(case, call) pairs: every op at tiny sizes in every activation and quantized dtype
    the target stores, the models at decode and prefill sizes, the regime cases."""
    from aiter_lite.library import OPS
    from op_benchmarks.utils.op_args import TINY, op_args

    def call(fn, args):
        return lambda: fn(*args)

    fp8 = profile.fp8_e4m3 or torch.float8_e5m2
    out = []
    for name, spec in OPS.items():
        for dtype in ACT_DTYPES:
            for qdtype in profile.quant_dtypes:
                out.append((f"{name} tiny {_short(dtype)} -> {_short(qdtype)}",
                            call(spec.triton, op_args(name, TINY, "meta", dtype, qdtype))))
    models = json.loads((ROOT / "op_benchmarks" / "model_configs.json").read_text())
    for model, cfg in models.items():
        if fast and model not in FAST_MODELS:
            continue
        for tokens in (1, 4096) if fast else DECODE_PREFILL:
            dims = _model_dims(cfg, tokens)
            for name, spec in OPS.items():
                out.append((f"{name} {model} T={tokens}", call(spec.triton, op_args(name, dims, "meta",
                                                                                       torch.bfloat16, fp8))))
    out += kb.cases(fp8, tiny=False)
    return [c for c in out if not only or any(o in c[0] for o in only)]


def _short(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.").replace("float", "f")


def _largest_tile(meta: dict) -> int:
    return math.prod(v for k, v in meta.items() if k.startswith("BLOCK") and isinstance(v, int) and v > 0)


def jobs(profile: DeviceProfile, fast: bool, only: tuple[str, ...] = ()) -> tuple[list[dict], list[str]]:
    """The distinct specializations the sweep launches for ``profile`` (one per regime
    where ``fast``, its largest tile), and the cases that raised."""
    from triton.compiler import make_backend

    backend = make_backend(profile.gpu_target())
    found, errors = {}, []
    for case, call in sweep(profile, fast, only):
        try:
            launches = kb.record_cases([(case, call)], profile)
        except ValueError as e:
            if profile.fp8_e4m3 is None and "cannot be written" in str(e):
                continue  # an op's default e4m3 on a device without one: refused as it should be
            errors.append(f"{case}: ValueError: {e}")
            continue
        except Exception as e:  # noqa: BLE001 (a wrapper that cannot pick a launch for this target)
            errors.append(f"{case}: {type(e).__name__}: {e}")
            continue
        for case_, kernel, grid, args, meta in launches:
            signature, constexprs, attrs, options, _ = kb._typed(kernel, args, meta, backend, fp64=False)
            named = dict(zip(kernel.arg_names, args)) | meta
            named["grid"] = math.prod(grid)
            need = kernel.co_resident(named) if hasattr(kernel, "co_resident") else 1
            exact = (id(kernel), tuple(signature.items()), repr(sorted(constexprs.items())), options.num_warps,
                     options.num_stages)
            quantized = tuple(sorted({v for v in signature.values() if v.startswith(("*fp8", "*i8"))}))
            key = (id(kernel), kb._regime(kernel, meta), quantized) if fast else exact
            job = dict(kernel=kernel, case=case_, signature=signature, constexprs=constexprs, attrs=attrs,
                       options=options, need=need, tile=_largest_tile(meta), warps=options.num_warps)
            old = found.get(key)
            if old is None or (fast and job["tile"] > old["tile"]):
                if old is not None:
                    job["need"] = max(job["need"], old["need"])
                found[key] = job
            else:
                old["need"] = max(old["need"], need)
    return list(found.values()), errors


# ---------------------------------------------------------------------------
# builds and their resources

_JOBS: list = []


def _resources_nvidia(compiled, ptxas_log: str) -> dict:
    """ptxas's report of the build (every build here is a fresh one: the run has a cache
    of its own): registers, spill stores, the stack frame, and Triton's shared memory."""
    value = lambda pattern: int(re.search(pattern, ptxas_log).group(1))  # noqa: E731
    return dict(regs=value(r"Used (\d+) registers"), spill=value(r"(\d+) bytes spill stores"), scratch=0,
                stack=value(r"(\d+) bytes stack frame"), smem=compiled.metadata.shared)


def _resources_amd(compiled) -> dict:
    asm = compiled.asm["amdgcn"]
    value = lambda k: int(re.search(rf"\.{k}:\s+(\d+)", asm).group(1))  # noqa: E731
    return dict(regs=value("vgpr_count"), spill=value("vgpr_spill_count") + value("sgpr_spill_count"),
                scratch=value("private_segment_fixed_size"), stack=0,
                smem=max(value("group_segment_fixed_size"), compiled.metadata.shared))  # Triton's LDS is dynamic


def _build(index: int) -> dict:
    import triton
    from triton.compiler import ASTSource

    target_name, profile, job = _JOBS[index]
    kernel = job["kernel"]
    result = dict(target=target_name, kernel=kernel.fn.__name__, module=kernel.fn.__module__.rsplit(".", 1)[-1],
                  case=job["case"], warps=job["warps"], need=job["need"])
    log = io.StringIO()  # ptxas's report (knobs.nvidia.dump_ptxas_log)
    with tempfile.TemporaryFile("w+") as diagnostics:
        try:
            with kb._stderr_to(diagnostics), contextlib.redirect_stdout(log):
                compiled = triton.compile(ASTSource(kernel, job["signature"], job["constexprs"], job["attrs"]),
                                          target=profile.gpu_target(), options=job["options"].__dict__)
        except Exception as e:  # noqa: BLE001 (the error is the result)
            diagnostics.seek(0)
            result["error"] = kb._error(e, diagnostics.read()).splitlines()[:6]
            return result
    res = _resources_amd(compiled) if profile.backend == "hip" else _resources_nvidia(compiled, log.getvalue())
    res["resident"] = profile.resident_programs(job["warps"], res["regs"], res["smem"])
    return result | res


def problems(r: dict, profile: DeviceProfile) -> list[str]:
    """Why a build fails its target (empty: it passes)."""
    if "error" in r:
        return ["does not build: " + " | ".join(r["error"])]
    out = []
    if r["spill"] or r["scratch"]:
        out.append(f"spills ({r['spill']} B spilled, {r['scratch']} B scratch)")
    if r["stack"] and not r["spill"] and r["kernel"] not in TRIG_STACK:
        out.append(f"a {r['stack']} B stack frame")
    if r["warps"] * profile.warp_size > 1024:
        out.append(f"{r['warps']} warps of {profile.warp_size} lanes: more than 1024 a program")
    if r["smem"] > profile.smem_per_block:
        out.append(f"{r['smem']} B shared memory, more than {profile.smem_per_block}")
    if r["resident"] < 1:
        out.append("no program fits an SM")
    elif r["need"] > r["resident"] * profile.sms:
        out.append(f"{r['need']} programs must run at once; {profile.name} holds {r['resident']} x {profile.sms}")
    return out


def dtype_checks(profile: DeviceProfile) -> list[str]:
    """A quantized dtype the target cannot store must raise a ValueError naming the op and
    the dtypes it can: the failures."""
    from aiter_lite.library import OPS
    from aiter_lite.spec.device import use_profile
    from op_benchmarks.utils.op_args import TINY, op_args

    failures = []
    for dtype in QUANT_DTYPES:
        if dtype in profile.quant_dtypes:
            continue
        for name in ("static_per_tensor_quant_fp8_i8", "rms_norm_dynamic_per_token_quant", "act_mul_and_fp8_quant",
                     "scaled_fp8_quant", "fused_qk_rope_reshape_and_cache"):
            args = list(op_args(name, TINY, "meta", torch.bfloat16, dtype))
            if name == "fused_qk_rope_reshape_and_cache":  # the dtype is the caches'
                args[3], args[4] = (torch.empty(a.shape, dtype=dtype, device="meta") for a in args[3:5])
            elif name == "act_mul_and_fp8_quant":  # (x, activation, scale, dtype_quant, scale_ub)
                args[3] = dtype
            elif name == "scaled_fp8_quant":  # the registered op's (input, scale, scale_ub, per_token, dtype)
                args[4] = dtype
            try:
                with use_profile(profile):
                    OPS[name].triton(*args)
            except ValueError as e:
                if name not in str(e) or str(profile.quant_dtypes[-1]) not in str(e):
                    failures.append(f"{name} with {dtype}: unclear error: {e}")
                continue
            except Exception as e:  # noqa: BLE001
                failures.append(f"{name} with {dtype}: {type(e).__name__} instead of ValueError: {e}")
                continue
            failures.append(f"{name} with {dtype}: no error ({profile.name} cannot store it)")
    return failures


# ---------------------------------------------------------------------------
# report


def table(results: list[dict], targets: list[str]) -> str:
    """Kernels x targets: registers / spill bytes / shared KB of the heaviest build (most
    registers), "FAIL" where any build fails, and the builds' count."""
    by = {}
    for r in results:
        by.setdefault(r["kernel"], {}).setdefault(r["target"], []).append(r)
    width = max(len(k) for k in by) if by else 10
    lines = [f"{'kernel':<{width}}  " + "  ".join(f"{t:>16}" for t in targets)]
    for kernel in sorted(by):
        cells = []
        for t in targets:
            rs = by[kernel].get(t, [])
            if not rs:
                cells.append(f"{'-':>16}")
            elif any(r["problems"] for r in rs):
                cells.append(f"{'FAIL x' + str(sum(bool(r['problems']) for r in rs)):>16}")
            else:
                top = max(rs, key=lambda r: r["regs"])
                cells.append(f"{top['regs']:>4}r {top['spill']}s {top['smem'] // 1024:>3}K x{len(rs):<3}")
        lines.append(f"{kernel:<{width}}  " + "  ".join(cells))
    return "\n".join(lines)


def platforms_markdown(results: list[dict], targets: list[str], dtype_failures: dict, hardware: dict) -> str:
    """The README's Platforms table: a row per target."""
    rows = ["| target | GPU | builds | failures | spills | max registers / lane | max shared / LDS | e4m3 | "
            "tested on hardware |", "|---|---|---|---|---|---|---|---|---|"]
    for t in targets:
        rs = [r for r in results if r["target"] == t]
        ok = [r for r in rs if "error" not in r]
        spills = sum(1 for r in ok if r["spill"] or r["scratch"])
        failures = sum(1 for r in rs if r["problems"]) + len(dtype_failures.get(t, []))
        profile = TARGETS[t]
        e4m3 = _short(profile.fp8_e4m3) if profile.fp8_e4m3 else "none (e5m2, int8)"
        rows.append(f"| {t} | {profile.name} | {len(ok)} / {len(rs)} | {failures} | {spills} | "
                    f"{max((r['regs'] for r in ok), default=0)} | {max((r['smem'] for r in ok), default=0) // 1024} KB | "
                    f"{e4m3} | {hardware.get(t, 'no: compile-checked')} |")
    return "\n".join(rows)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--fast", action="store_true", help="one specialization per kernel regime (CI)")
    p.add_argument("--targets", nargs="+", default=list(TARGETS), choices=list(TARGETS))
    p.add_argument("-j", "--jobs", type=int, default=os.cpu_count() or 1, help="compiling processes")
    p.add_argument("--only", nargs="+", default=(), help="just the cases whose name holds one of these")
    p.add_argument("--csv", help="every build's row")
    p.add_argument("--markdown", help="the Platforms table (README)")
    args = p.parse_args(argv)

    import triton
    from triton import knobs

    kb.offline()
    # Every build a fresh one (ptxas's report comes with a build, not from Triton's cache),
    # in a cache of this run's own.
    knobs.nvidia.dump_ptxas_log = True
    cache = tempfile.TemporaryDirectory(prefix="check_targets_")
    knobs.cache.dir = cache.name
    start = time.time()
    work, failures, dtype_failures = [], [], {}
    for t in args.targets:
        profile = TARGETS[t]
        found, errors = jobs(profile, args.fast, tuple(args.only))
        failures += [f"{t}: {e}" for e in errors]
        dtype_failures[t] = dtype_checks(profile)
        failures += [f"{t}: {e}" for e in dtype_failures[t]]
        work += [(t, profile, j) for j in found]
    _JOBS[:] = work
    recorded = time.time() - start
    with multiprocessing.get_context("fork").Pool(max(args.jobs, 1)) as pool:
        results = pool.map(_build, range(len(work)), chunksize=1)
    for r, (t, profile, _) in zip(results, work):
        r["problems"] = problems(r, profile)
        failures += [f"{t} {r['kernel']} ({r['case']}, {r['warps']} warps): {why}" for why in r["problems"]]

    if args.csv:
        fields = ["target", "kernel", "module", "case", "warps", "regs", "spill", "scratch", "stack", "smem",
                  "resident", "need", "error", "problems"]
        with open(args.csv, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=fields, extrasaction="ignore")
            w.writeheader()
            for r in results:
                w.writerow({**r, "error": " | ".join(r.get("error", [])), "problems": "; ".join(r["problems"])})
    hardware = {"sm_90": "yes: H100, H200"}
    if args.markdown:
        Path(args.markdown).write_text(platforms_markdown(results, args.targets, dtype_failures, hardware) + "\n")

    print(f"triton {triton.__version__}, torch {torch.__version__}: {len(work)} builds "
          f"({'fast' if args.fast else 'full'} sweep) for {', '.join(args.targets)}; recorded in {recorded:.0f} s, "
          f"built in {time.time() - start - recorded:.0f} s on {args.jobs} processes")
    for line in failures:
        print("FAIL", line)
    print()
    print(platforms_markdown(results, args.targets, dtype_failures, hardware))
    print()
    print("registers (VGPRs on AMD) / spilled bytes / shared memory KB of each kernel's heaviest build, x builds")
    print(table(results, args.targets))
    print(f"\n{len(failures)} failures")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
