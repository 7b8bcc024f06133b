"""Every op_benchmarks/bench_*.py runs end to end (on the CPU: a tiny case through the interpreter)."""

import importlib
import pathlib

import pandas as pd
import pytest

from op_tests.utils import ON_GPU

# bench_host times host paths, not providers: its own test below.
BENCHES = sorted(p.stem for p in (pathlib.Path(__file__).resolve().parents[1] / "op_benchmarks").glob("bench_*.py")
                 if p.stem != "bench_host")


@pytest.mark.parametrize("bench", BENCHES)
def test_bench_runs(bench, tmp_path, capsys):
    module = importlib.import_module(f"op_benchmarks.{bench}")
    out = tmp_path / f"{bench}.csv"
    argv = ["-o", str(out), "--rep", "5"] + (["-M", "1", "--model", "llama3-8B"] if ON_GPU else [])
    module.main(argv)
    df = pd.read_csv(out)
    assert {"triton", "native"} <= set(df.provider)
    assert (df.us > 0).all() and df.gpu.notna().all() and df.copy_gbps.gt(0).all()
    printed = capsys.readouterr().out
    assert "triton us" in printed and "x vs native" in printed
    if not ON_GPU:
        assert "timings mean nothing" in printed


def test_bench_compile_provider(tmp_path):
    # torch.compile of the native reference is a provider on every bench; check it once here.
    module = importlib.import_module("op_benchmarks.bench_activation")
    out = tmp_path / "compile.csv"
    module.main(["--op", "silu_and_mul", "--providers", "triton,native,compile", "--rep", "5", "-o", str(out)]
                + (["--shape", "64x1024"] if ON_GPU else []))
    assert set(pd.read_csv(out).provider) == {"triton", "native", "compile"}


def test_bench_cli_errors():
    module = importlib.import_module("op_benchmarks.bench_activation")
    with pytest.raises(SystemExit, match="unknown"):
        module.main(["--providers", "triton,cuda"])
    with pytest.raises(SystemExit, match="expected MxN"):
        module.main(["--shape", "64"])
    with pytest.raises(SystemExit, match="unknown"):
        module.main(["--model", "gpt-5"])


def test_bench_host_runs(tmp_path, capsys):
    module = importlib.import_module("op_benchmarks.bench_host")
    out = tmp_path / "host.csv"
    module.main(["--op", "rms_norm", "fused_qk_rope_reshape_and_cache", "--calls", "20", "--rounds", "3",
                 "-o", str(out)])
    df = pd.read_csv(out)
    assert list(df.op) == ["rms_norm", "fused_qk_rope_reshape_and_cache"]
    for path in ("bare", "repeated", "checked", "new", "new_checked", "registered"):
        assert (df[f"{path}_us"] > 0).all()
    assert (df.launches == 1).all() and (df.limit_us >= df.bare_us + 5).all()
    assert (df.new_ratio > 0).all()
    assert df.plan.all() == ON_GPU  # plans hold compiled kernels: a GPU's only
    assert "repeated within the limit" in capsys.readouterr().out
    with pytest.raises(SystemExit, match="unknown"):
        module.main(["--op", "no_such_op"])
