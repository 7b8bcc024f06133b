"""Every entry kernel reaches sm_90's Triton IR with its float scalars typed fp64, as
torch.compile passes them, and computes nothing in fp64: each pins its scalars to fp32
first (``eps = tl.cast(eps, tl.float32)``). Lowered, never run: no GPU needed; see
op_tests/utils/kernel_builds.py for how the launches are recorded and typed."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _has_nvidia_backend() -> bool:
    try:
        from triton.backends import backends
    except ImportError:
        return False
    return "nvidia" in backends


@pytest.mark.skipif(not _has_nvidia_backend(), reason="this Triton has no NVIDIA backend to build sm_90 code with")
def test_entry_kernels_build_with_fp64_scalars():
    # A process of its own: the interpreter (TRITON_INTERPRET, set by conftest on the CPU)
    # leaves no JITFunction to build.
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p)
    env["AITER_FAST_LAUNCH"] = "0"  # launches are recorded, never made: no plans
    run = subprocess.run([sys.executable, "-m", "op_tests.utils.kernel_builds"], cwd=ROOT, env=env,
                         capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-4000:]
    *builds, found = [json.loads(line) for line in run.stdout.splitlines() if line.startswith("{")]

    missing = sorted(set(found["entry_kernels"]) - {b["kernel"] for b in builds})
    assert not missing, f"entry kernels no case launches (add one to kernel_builds.cases): {missing}"
    failures = []
    for b in builds:
        where = f"{b['kernel']} (case {b['case']!r}, fp64: {', '.join(b['fp64']) or 'none'})"
        if "error" in b:
            failures.append(f"{where} does not build:\n{b['error'][-1500:]}")
        elif b["fp64_ops"]:
            failures.append(f"{where} computes in fp64:\n  " + "\n  ".join(b["fp64_ops"][:8]))
    assert not failures, f"{len(failures)} of {len(builds)} builds:\n\n" + "\n\n".join(failures)
