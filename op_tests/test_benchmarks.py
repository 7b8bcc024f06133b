"""Every op_benchmarks/bench_*.py runs end to end (on the CPU: a tiny case through the interpreter)."""

import argparse
import importlib
import pathlib

import pandas as pd
import pytest

from op_tests.utils import ON_GPU

# bench_host times host paths and bench_training whole training steps, not providers: their own tests below.
BENCHES = sorted(p.stem for p in (pathlib.Path(__file__).resolve().parents[1] / "op_benchmarks").glob("bench_*.py")
                 if p.stem not in ("bench_host", "bench_training"))


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


# The backward ops each bench runs under --direction bwd.
BACKWARD = {
    "bench_activation": ["silu_and_mul_bwd", "gelu_and_mul_bwd", "gelu_tanh_and_mul_bwd"],
    "bench_rmsnorm": ["rms_norm_bwd", "rmsnorm2d_fwd_with_add_bwd"],
    "bench_layernorm": ["layer_norm_bwd", "layernorm2d_fwd_with_add_bwd"],
    "bench_rope": ["rope_cached_thd_positions_2c_fwd_bwd"],
}
SMALL = ["-M", "1", "--model", "llama3-8B"] if ON_GPU else []


@pytest.mark.parametrize("bench", sorted(BACKWARD))
def test_bench_backward_runs(bench, tmp_path, capsys):
    # The run stops with "disagree" where a provider's gradients miss the native reference's,
    # so a finished run is triton's backward checked against the reference.
    module = importlib.import_module(f"op_benchmarks.{bench}")
    fwd, bwd = tmp_path / "fwd.csv", tmp_path / "bwd.csv"
    module.main(["--direction", "bwd", "-o", str(bwd), "--rep", "5"] + SMALL)
    df = pd.read_csv(bwd)
    assert sorted(set(df.op)) == sorted(BACKWARD[bench])
    assert {"triton", "native"} <= set(df.provider)
    assert (df.us > 0).all() and (df.gbps > 0).all() and (df.pct_copy > 0).all()
    assert "triton us" in capsys.readouterr().out
    module.main(["--direction", "fwd", "-o", str(fwd), "--rep", "5"] + SMALL)
    forward = pd.read_csv(fwd)
    assert not forward.op.str.endswith("_bwd").any()
    assert list(forward.columns) == list(df.columns)  # the op column alone says the direction


def test_bench_backward_checked(monkeypatch):
    # Wrong gradients stop the run: of x (activation), of a parameter alone (RMSNorm's weight).
    act = importlib.import_module("op_benchmarks.bench_activation")
    right = act.PROVIDERS["triton"]

    def wrong_dx(case, inputs):
        fn = right(case, inputs)
        return lambda: tuple(1.5 * g for g in fn())

    monkeypatch.setitem(act.PROVIDERS, "triton", wrong_dx)
    with pytest.raises(SystemExit, match="disagree"):
        act.main(["--op", "silu_and_mul_bwd", "--providers", "triton,native", "--rep", "5"] + SMALL)
    rms = importlib.import_module("op_benchmarks.bench_rmsnorm")
    fwd, add = rms.BENCH._triton
    # The same y, and an extra 0.5 * sum(dy) in weight's gradient.
    monkeypatch.setattr(rms.BENCH, "_triton", (lambda x, w: fwd(x, w) + 0.5 * (w - w.detach()), add))
    with pytest.raises(SystemExit, match="disagree"):
        rms.main(["--op", "rms_norm_bwd", "--providers", "triton,native", "--rep", "5"] + SMALL)


def test_bench_directions():
    from op_benchmarks.utils import harness

    def ops(direction, op=None):
        return harness.directed_ops(argparse.Namespace(direction=direction, op=op), ["rms_norm", "rms_norm_bwd"])

    assert ops(None) == ["rms_norm", "rms_norm_bwd"]
    assert ops("fwd") == ["rms_norm"]
    assert ops("bwd") == ["rms_norm_bwd"]
    assert ops("bwd", ["silu_and_mul"]) == ["silu_and_mul_bwd"]
    rope = importlib.import_module("op_benchmarks.bench_rope")
    for flag in ("--bwd", "--inplace"):
        with pytest.raises(SystemExit, match="drop --bwd"):
            rope.main(["--direction", "bwd", flag])


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


def test_bench_training_runs(tmp_path, capsys):
    """A training step of a Hugging Face Llama, unpatched and patched (the Triton backend; on
    the CPU a tiny model through the interpreter): the same first loss."""
    pytest.importorskip("transformers", reason="bench_training needs transformers (pip install -e '.[hf]')")
    module = importlib.import_module("op_benchmarks.bench_training")
    out = tmp_path / "training.csv"
    argv = ["-o", str(out), "--providers", "hf", "aiter_lite", "--backend", "triton"]
    module.main(argv + ([] if not ON_GPU else ["--steps", "2", "--warmup", "1", "--seq", "64", "--batch", "1"]))
    df = pd.read_csv(out).set_index("provider")
    assert list(df.index) == ["hf", "aiter_lite"] and (df.ms > 0).all()
    assert abs(df.loss["aiter_lite"] - df.loss["hf"]) < 2e-2 * abs(df.loss["hf"])
    assert "training step" in capsys.readouterr().out
