"""Every op_benchmarks/bench_*.py runs end to end (on the CPU: a tiny case through the interpreter)."""

import importlib
import pathlib

import pandas as pd
import pytest

from op_tests.utils import ON_GPU

BENCHES = sorted(p.stem for p in (pathlib.Path(__file__).resolve().parents[1] / "op_benchmarks").glob("bench_*.py"))


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
