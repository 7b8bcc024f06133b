"""scripts/decoder_layer.py: a Llama decoder layer on the Triton backend agrees with the native
one step by step (prefill and decode, both QKV paths), its check catches a wrong kernel, the
paged cache and attention give a chunked or decoded sequence the outputs of one whole prefill,
and the command line runs end to end."""

import importlib.util
import os
import subprocess
import sys
import types
from pathlib import Path

import pytest
import torch

from op_tests.utils import ON_GPU

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "decoder_layer.py"
SMALL = ["--small", "--prompt-lens", "3", "17", "--decode-steps", "2"]  # 17: a sequence over two blocks


def _load():
    spec = importlib.util.spec_from_file_location("decoder_layer", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the file executes
    spec.loader.exec_module(module)
    return module


dl = _load()


@pytest.mark.parametrize("qkv", dl.QKV_MODES)
@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
def test_triton_matches_native(qkv, dtype):
    results = dl.run(dl.parse_args([*SMALL, "--qkv", qkv, "--dtype", dtype]))
    assert [r.step for r in results] == ["prefill", "decode 1", "decode 2"]
    assert [r.tokens for r in results] == [20, 2, 2]
    for r in results:
        assert r.ok, f"{qkv} {dtype} {r.step}: max |diff| {r.max_diff}, cache diff {r.cache_diff} ({r.worst})"
        assert set(r.ms) == {"triton", "native"} and min(r.ms.values()) > 0


def test_check_catches_a_wrong_rotation(monkeypatch):
    # Triton's RoPE + cache op fed the tokens' positions in reverse order: outputs and cached keys move.
    op = dl.triton_fusions.fused_qk_rope_reshape_and_cache

    def reversed_positions(q, k, v, kc, vc, slots, pos, *args, **kwargs):
        return op(q, k, v, kc, vc, slots, pos.flip(0), *args, **kwargs)

    monkeypatch.setitem(dl.FUSIONS, "triton", types.SimpleNamespace(fused_qk_rope_reshape_and_cache=reversed_positions))
    args = [*SMALL, "--dtype", "bf16"]
    results = dl.run(dl.parse_args(args))
    assert not any(r.ok for r in results)
    assert all(r.worst for r in results)
    assert dl.main(args) == 1


@pytest.mark.parametrize("backend", dl.BACKENDS)
def test_chunks_and_decode_match_one_prefill(backend):
    # The cache write, the block-table gather and the three attention masks (causal prefill, a
    # chunk after cached tokens, one decode token) against a single prefill of every token.
    cfg = dl.load_config("llama3-8B", small=True)
    lens, bs = [12, 9], 4
    tables, num_blocks = dl.block_tables(lens, bs, seed=5)
    weights = dl.build_weights(cfg, torch.float32, dl.DEVICE, seed=5)
    cos, sin = dl.rope_tables(cfg, max(lens))
    x = [torch.randn(n, cfg.hidden, device=dl.DEVICE) for n in lens]

    def layer():
        return dl.DecoderLayer(cfg, weights, backend, cos, sin, num_blocks, bs, "rope_cache")

    with torch.inference_mode():
        whole = layer()(torch.cat(x), dl.make_batch([0, 0], lens, tables, bs))
        expected = torch.split(whole, lens)
        steps = [([0, 0], [7, 4]), ([7, 4], [3, 3]), ([10, 7], [1, 1]), ([11, 8], [1, 1])]
        pieces = [[], []]
        stepped = layer()
        for starts, counts in steps:
            xs = torch.cat([xi[s:s + n] for xi, s, n in zip(x, starts, counts, strict=True)])
            out = stepped(xs, dl.make_batch(starts, counts, tables, bs))
            for i, part in enumerate(torch.split(out, counts)):
                pieces[i].append(part)
    for i in range(len(lens)):
        torch.testing.assert_close(torch.cat(pieces[i]), expected[i], atol=2e-5, rtol=2e-5)


def test_main_prints_the_table(capsys):
    assert dl.main([*SMALL, "--dtype", "fp32", "--qkv", "split_rope"]) == 0
    out = capsys.readouterr().out
    for text in ("triton ms", "native ms", "prefill", "decode 2", "median", "OK: all 3 steps agree"):
        assert text in out
    assert "FAIL" not in out


def test_one_backend_is_timed_not_checked(capsys):
    results = dl.run(dl.parse_args([*SMALL, "--backends", "native"]))
    assert all(r.ok is None and set(r.ms) == {"native"} for r in results)
    assert dl.main([*SMALL, "--backends", "native"]) == 0
    assert "not checked" in capsys.readouterr().out


@pytest.mark.parametrize("argv", [["--qkv", "rope"], ["--backends", "triton,cuda"], ["--backends", ""],
                                  ["--model", "deepseek-v3"], ["--dtype", "fp8"], ["--decode-steps", "-1"],
                                  ["--prompt-lens", "0"], ["--block-size", "x"]])
def test_bad_flags(argv, capsys):
    with pytest.raises(SystemExit) as e:
        dl.parse_args(argv)
    assert e.value.code == 2
    assert "error" in capsys.readouterr().err


def test_script_runs_standalone():
    # A fresh interpreter without TRITON_INTERPRET in the environment: the script sets it itself on the CPU.
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    proc = subprocess.run([sys.executable, str(SCRIPT), "--small", "--prompt-lens", "2", "5", "--decode-steps", "1"],
                          check=False, capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "OK: all 2 steps agree" in proc.stdout
    if not ON_GPU:
        assert "timings mean nothing" in proc.stdout
