"""One Llama-style decoder layer built from aiter_lite's ops: a prefill and decode steps on a
paged KV cache, on the Triton backend and the native (PyTorch) one, checked token by token.

    python scripts/decoder_layer.py                                  # tiny layer on the CPU, llama3-8B on a GPU
    python scripts/decoder_layer.py --model qwen2.5-7B --prompt-lens 100 300 --decode-steps 16 --dtype bf16
    python scripts/decoder_layer.py --qkv split_rope --backends triton,native --seed 3

The layer, as vLLM runs Llama's (one fused QKV weight, one fused gate / up weight):

    h = RMSNorm(x)                                   aiter_lite.layers.RMSNorm
    qkv = h @ W_qkv^T                                torch
    q, k, v: RoPE on q and k, k and v into the cache --qkv rope_cache (default): a plain split, then
                                                     fused_qk_rope_reshape_and_cache (RoPE + cache write);
                                                     --qkv split_rope: fused_qkv_split_qk_rope, then a
                                                     plain slot write into the cache
    a = attention(q, the sequence's cached k, v)     torch SDPA, causal in the prefill (same for both backends)
    h, r = RMSNorm(a @ W_o^T, residual=x)            the fused residual add + RMSNorm
    out = down(SiluAndMul(h @ W_gate_up^T)) + r      aiter_lite.layers.SiluAndMul

Each backend has its own flash-layout KV cache [num_blocks, block_size, kv_heads, head_dim]; the
sequences' blocks are scattered over it in a random order. The batch is one prefill of every
prompt, then --decode-steps steps of one new token per sequence (positions = the sequences'
lengths). A single layer has no vocabulary, so every new token's input hidden state is a random
embedding, the same for both backends. After every step the Triton backend's output hidden states
and whole KV caches must agree with the native backend's within a per-dtype tolerance (see TOL);
the exit status is 1 where any step disagrees.

Shapes (hidden size, heads, key-value heads, head dim, intermediate size) come from
op_benchmarks/model_configs.json; the layer is Llama's whatever the model (a MoE model's MLP is
one dense MLP of its intermediate size). RMS eps and RoPE theta come from the config where it has
them, else Llama 3's (1e-5, 500000).

Flags:
    --model NAME            a model of model_configs.json with key-value heads (default llama3-8B)
    --small / --no-small    shrink to a tiny layer (hidden 64, 4 heads, 2 kv heads, head dim 16,
                            intermediate 128); default on when no GPU is present
    --prompt-lens N [N ..]  prompt length of each sequence (default 5 12 17 on the CPU, 128 512 1000 on a GPU)
    --decode-steps N        decode steps after the prefill (default 4)
    --dtype bf16|fp16|fp32  activations, weights and caches (default bf16 on a GPU, fp32 on the CPU)
    --backends LIST         comma list of triton, native (default triton,native; the check needs both)
    --qkv rope_cache|split_rope   which fused op rotates q and k (above)
    --block-size N          KV-cache block size (default 16)
    --warmup N              untimed runs of the whole schedule first (default 1 on a GPU, 0 on the CPU)
    --seed N                weights, inputs and block order (default 0)

Timing: each step of each backend is timed with time.perf_counter, between
torch.cuda.synchronize calls on a GPU. With no GPU, the Triton kernels run in Triton's
interpreter (TRITON_INTERPRET=1, set here before triton is imported): the check holds, the
timings mean nothing.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch

ON_GPU = torch.cuda.is_available()
if not ON_GPU:
    # Before triton or aiter_lite is imported: the kernels then run on the CPU tensors.
    os.environ["TRITON_INTERPRET"] = "1"

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import torch.nn.functional as F  # noqa: E402
from torch import nn  # noqa: E402

from aiter_lite.layers import RMSNorm, SiluAndMul  # noqa: E402
from aiter_lite.ops.native import fusions as native_fusions  # noqa: E402
from aiter_lite.ops.triton import fusions as triton_fusions  # noqa: E402

DEVICE = torch.device("cuda") if ON_GPU else torch.device("cpu")
MODEL_CONFIGS = ROOT / "op_benchmarks" / "model_configs.json"
DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}
BACKENDS = ("triton", "native")
FUSIONS = {"triton": triton_fusions, "native": native_fusions}
QKV_MODES = ("rope_cache", "split_rope")
SMALL = {"hidden_size": 64, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16,
         "intermediate_size": 128}
LLAMA3_RMS_EPS, LLAMA3_ROPE_THETA = 1e-5, 500000.0

# (atol, rtol) of the layer's output and caches against the native backend's, elementwise:
# |triton - native| <= atol * rms(native) + rtol * |native|. Both backends compute each fused op in
# fp32 and round once, so they differ by about one unit of the dtype per op (op_tests/utils/checks.py
# budgets two: rtol fp16 2e-3, bf16 1.6e-2, kept here); those units then spread through the
# projections, attention and the second norm, an absolute error relative to the activations' scale,
# hence atol times the output's rms. Measured (seeds 0-9, both --qkv paths, prefill and decode,
# tiny layer; llama3-8B shapes; prompts up to 300 tokens), the atol each step needs at those rtols:
# fp32 5e-7 (tiny) to 1.7e-6 (llama3-8B), fp16 1.2e-3, bf16 2.6e-2. Under the interpreter bf16 is the
# worst case: Triton's interpreter casts fp32 to bf16 by truncation, so half of every Triton bf16
# result lies one unit below the native backend's round-to-nearest one (GPU casts round to nearest).
# The atols sit 4-50x above the measurements and far below what a wrong rotation or cache slot
# causes (errors of the output's own size).
TOL = {torch.float32: (1e-4, 1e-5), torch.float16: (8e-3, 2e-3), torch.bfloat16: (1e-1, 1.6e-2)}


# ---------------------------------------------------------------------------------------------
# Configuration, weights, inputs


@dataclass(frozen=True)
class LayerConfig:
    name: str
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int
    rms_eps: float
    rope_theta: float

    def describe(self) -> str:
        return (f"{self.name}: hidden {self.hidden}, heads {self.heads} / {self.kv_heads} kv, head_dim "
                f"{self.head_dim}, intermediate {self.intermediate}, rms eps {self.rms_eps:g}, "
                f"rope theta {self.rope_theta:g}")


def gqa_models() -> dict:
    """The model configs whose attention has key-value heads (not MLA's latent)."""
    configs = json.loads(MODEL_CONFIGS.read_text())
    return {name: cfg for name, cfg in configs.items() if "kv_lora_rank" not in cfg}


def load_config(model: str, small: bool) -> LayerConfig:
    cfg = dict(gqa_models()[model])
    if small:
        cfg.update(SMALL)
    heads = cfg["num_attention_heads"]
    return LayerConfig(
        name=model + (" (small)" if small else ""),
        hidden=cfg["hidden_size"], heads=heads, kv_heads=cfg["num_key_value_heads"],
        head_dim=cfg.get("head_dim", cfg["hidden_size"] // heads), intermediate=cfg["intermediate_size"],
        rms_eps=cfg.get("rms_norm_eps", LLAMA3_RMS_EPS), rope_theta=cfg.get("rope_theta", LLAMA3_ROPE_THETA),
    )


def build_weights(cfg: LayerConfig, dtype: torch.dtype, device: torch.device | str = DEVICE,
                  seed: int = 0) -> dict[str, torch.Tensor]:
    """Random weights, std 1 / sqrt(fan_in) so every projection keeps unit-scale activations;
    norm weights near 1. Drawn in fp32 on the CPU from ``seed``: the same on every device."""
    gen = torch.Generator().manual_seed(seed)

    def linear(out_features: int, in_features: int) -> torch.Tensor:
        w = torch.randn(out_features, in_features, generator=gen) / math.sqrt(in_features)
        return w.to(device=device, dtype=dtype)

    def norm_weight() -> torch.Tensor:
        return (1.0 + 0.1 * torch.randn(cfg.hidden, generator=gen)).to(device=device, dtype=dtype)

    d = cfg.head_dim
    return {
        "input_norm": norm_weight(),
        "qkv": linear((cfg.heads + 2 * cfg.kv_heads) * d, cfg.hidden),
        "o": linear(cfg.hidden, cfg.heads * d),
        "post_norm": norm_weight(),
        "gate_up": linear(2 * cfg.intermediate, cfg.hidden),
        "down": linear(cfg.hidden, cfg.intermediate),
    }


def rope_tables(cfg: LayerConfig, max_pos: int, device: torch.device | str = DEVICE):
    """Half-width fp32 cos / sin tables (max_pos, head_dim / 2), as vLLM caches them: position p,
    pair j turns by p * theta^(-2j / head_dim); NEOX halves."""
    d = cfg.head_dim
    inv_freq = cfg.rope_theta ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)
    angles = torch.arange(max_pos, dtype=torch.float64)[:, None] * inv_freq
    return torch.cos(angles).float().to(device), torch.sin(angles).float().to(device)


@dataclass
class Batch:
    """The new tokens of one step: their positions and cache slots, and per sequence
    (first token in the batch, new tokens, context length after the step, block table)."""

    positions: torch.Tensor
    slot_mapping: torch.Tensor
    seqs: list[tuple[int, int, int, torch.Tensor]]

    @property
    def num_tokens(self) -> int:
        return self.positions.shape[0]


def block_tables(seq_lens: list[int], block_size: int, seed: int, device=DEVICE) -> tuple[list[torch.Tensor], int]:
    """Each sequence's blocks (enough for ``seq_lens``), drawn from one shuffled pool, and the
    pool's size: consecutive blocks of a sequence lie anywhere in the cache."""
    counts = [-(-n // block_size) for n in seq_lens]
    total = sum(counts) + 1  # one block nobody owns: a write to a wrong block shows
    order = torch.randperm(total, generator=torch.Generator().manual_seed(seed + 1))
    tables, start = [], 0
    for c in counts:
        tables.append(order[start:start + c].to(device))
        start += c
    return tables, total


def make_batch(starts: list[int], counts: list[int], tables: list[torch.Tensor], block_size: int,
               device=DEVICE) -> Batch:
    """Sequence i's tokens at positions starts[i] .. starts[i] + counts[i] - 1."""
    positions, slots, seqs, first = [], [], [], 0
    for start, n, table in zip(starts, counts, tables, strict=True):
        pos = torch.arange(start, start + n, device=device)
        positions.append(pos)
        slots.append(table[pos // block_size] * block_size + pos % block_size)
        seqs.append((first, n, start + n, table))
        first += n
    return Batch(torch.cat(positions), torch.cat(slots).to(torch.int64), seqs)


# ---------------------------------------------------------------------------------------------
# The layer


class DecoderLayer(nn.Module):
    """Llama's decoder layer on one backend ("triton" or "native") with its own paged KV cache
    (flash layout). ``forward(x, batch)`` runs the batch's new tokens, writes their keys and
    values into the cache and returns the layer's output hidden states; ``x`` is not modified."""

    def __init__(self, cfg: LayerConfig, weights: dict[str, torch.Tensor], backend: str, cos: torch.Tensor,
                 sin: torch.Tensor, num_blocks: int, block_size: int = 16, qkv_mode: str = "rope_cache"):
        super().__init__()
        if backend not in BACKENDS:
            raise ValueError(f"DecoderLayer: backend must be one of {BACKENDS}, got {backend!r}")
        if qkv_mode not in QKV_MODES:
            raise ValueError(f"DecoderLayer: qkv_mode must be one of {QKV_MODES}, got {qkv_mode!r}")
        self.cfg, self.backend, self.qkv_mode = cfg, backend, qkv_mode
        self.w = weights
        dtype, device = weights["qkv"].dtype, weights["qkv"].device
        self.input_norm = RMSNorm(cfg.hidden, cfg.rms_eps, dtype=dtype, backend=backend).to(device)
        self.post_norm = RMSNorm(cfg.hidden, cfg.rms_eps, dtype=dtype, backend=backend).to(device)
        self.input_norm.weight.data.copy_(weights["input_norm"])
        self.post_norm.weight.data.copy_(weights["post_norm"])
        self.requires_grad_(False)
        self.act = SiluAndMul(backend=backend)
        self.fusions = FUSIONS[backend]
        self.cos, self.sin = cos, sin
        self.block_size = block_size
        shape = (num_blocks, block_size, cfg.kv_heads, cfg.head_dim)
        self.key_cache = torch.zeros(shape, dtype=dtype, device=device)
        self.value_cache = torch.zeros(shape, dtype=dtype, device=device)
        self.k_scale = torch.ones(1, dtype=torch.float32, device=device)
        self.v_scale = torch.ones(1, dtype=torch.float32, device=device)

    def reset_cache(self) -> None:
        self.key_cache.zero_()
        self.value_cache.zero_()

    def _qkv_and_cache(self, qkv: torch.Tensor, batch: Batch) -> tuple[torch.Tensor, torch.Tensor]:
        """q (T, heads, d) rotated; k rotated and v written into the caches."""
        c, t = self.cfg, batch.num_tokens
        if self.qkv_mode == "split_rope":
            q, k, v = self.fusions.fused_qkv_split_qk_rope(qkv, self.cos, self.sin, batch.positions, c.heads,
                                                           c.kv_heads, c.head_dim, is_neox=True)
            self.key_cache.view(-1, c.kv_heads, c.head_dim)[batch.slot_mapping] = k
            self.value_cache.view(-1, c.kv_heads, c.head_dim)[batch.slot_mapping] = v
            return q
        q, k, v = qkv.view(t, c.heads + 2 * c.kv_heads, c.head_dim).split([c.heads, c.kv_heads, c.kv_heads], dim=1)
        q, _, _, _ = self.fusions.fused_qk_rope_reshape_and_cache(
            q, k, v, self.key_cache, self.value_cache, batch.slot_mapping, batch.positions, self.cos, self.sin,
            self.k_scale, self.v_scale, True, flash_layout=True, apply_scale=False, output_zeros=False)
        return q

    def attention(self, q: torch.Tensor, batch: Batch) -> torch.Tensor:
        """Each sequence's new queries over its cached keys and values (plain torch, both backends):
        causal where a sequence brings several tokens, unmasked for a single decode token."""
        c, bs = self.cfg, self.block_size
        out = torch.empty_like(q)
        for first, n, ctx, table in batch.seqs:
            blocks = table[: -(-ctx // bs)]
            k = self.key_cache[blocks].reshape(-1, c.kv_heads, c.head_dim)[:ctx].transpose(0, 1)
            v = self.value_cache[blocks].reshape(-1, c.kv_heads, c.head_dim)[:ctx].transpose(0, 1)
            qs = q[first:first + n].transpose(0, 1)
            if n == 1:
                mask, causal = None, False
            elif n == ctx:
                mask, causal = None, True
            else:  # new tokens after cached ones: each sees the cache and the new tokens up to itself
                mask = torch.arange(ctx, device=q.device) <= torch.arange(ctx - n, ctx, device=q.device)[:, None]
                causal = False
            o = F.scaled_dot_product_attention(qs, k, v, attn_mask=mask, is_causal=causal, enable_gqa=True)
            out[first:first + n] = o.transpose(0, 1)
        return out

    def forward(self, x: torch.Tensor, batch: Batch) -> torch.Tensor:
        t = batch.num_tokens
        residual = x.clone()  # the fused add + norm below writes the sum into it
        h = self.input_norm(x)
        qkv = F.linear(h, self.w["qkv"])
        q = self._qkv_and_cache(qkv, batch)
        a = self.attention(q, batch).reshape(t, -1)
        h, residual = self.post_norm(F.linear(a, self.w["o"]), residual)
        mlp = F.linear(self.act(F.linear(h, self.w["gate_up"])), self.w["down"])
        return mlp + residual


# ---------------------------------------------------------------------------------------------
# Running and checking


def agreement(actual: torch.Tensor, expected: torch.Tensor) -> tuple[bool, float, float]:
    """(within TOL, max |actual - expected|, largest |expected| at a failing element or 0)."""
    atol, rtol = TOL[expected.dtype]
    a, e = actual.float(), expected.float()
    scale = float(e.pow(2).mean().sqrt()) if e.numel() else 0.0
    err = (a - e).abs()
    bad = ~(err <= atol * scale + rtol * e.abs())
    max_err = float(err.max()) if err.numel() else 0.0
    return not bool(bad.any()), max_err, float(e.abs()[bad].max()) if bad.any() else 0.0


@dataclass
class StepResult:
    step: str  # "prefill" or "decode i"
    tokens: int
    ms: dict[str, float] = field(default_factory=dict)  # backend -> this step's time
    max_diff: float | None = None  # output, triton against native
    cache_diff: float | None = None  # key and value caches, triton against native
    ok: bool | None = None  # None: nothing to compare (one backend)
    worst: str = ""  # on a failure: the token with the largest output difference, or the KV cache


def _time(fn):
    if ON_GPU:
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    out = fn()
    if ON_GPU:
        torch.cuda.synchronize()
    return out, (time.perf_counter() - t0) * 1e3


def _schedule(prompt_lens: list[int], decode_steps: int) -> list[tuple[str, list[int], list[int]]]:
    """(name, starts, counts) of every step: one prefill, then one token per sequence a step."""
    steps = [("prefill", [0] * len(prompt_lens), list(prompt_lens))]
    for i in range(decode_steps):
        steps.append((f"decode {i + 1}", [n + i for n in prompt_lens], [1] * len(prompt_lens)))
    return steps


def _worst_token(diff: torch.Tensor, batch: Batch) -> str:
    tok = int(diff.float().abs().amax(-1).argmax())
    for i, (first, n, _, _) in enumerate(batch.seqs):
        if first <= tok < first + n:
            return f"sequence {i}, position {int(batch.positions[tok])}"
    return f"token {tok}"


def run(args: argparse.Namespace) -> list[StepResult]:
    """Build the layer on every backend of ``args.backends``, run the schedule (after
    ``args.warmup`` untimed runs of it) and return one StepResult per step."""
    cfg = load_config(args.model, args.small)
    dtype = DTYPES[args.dtype]
    steps = _schedule(args.prompt_lens, args.decode_steps)
    seq_lens = [n + args.decode_steps for n in args.prompt_lens]
    tables, num_blocks = block_tables(seq_lens, args.block_size, args.seed)
    weights = build_weights(cfg, dtype, DEVICE, args.seed)
    cos, sin = rope_tables(cfg, max(seq_lens))
    layers = {b: DecoderLayer(cfg, weights, b, cos, sin, num_blocks, args.block_size, args.qkv)
              for b in args.backends}
    gen = torch.Generator().manual_seed(args.seed + 2)
    inputs = [torch.randn(sum(counts), cfg.hidden, generator=gen).to(device=DEVICE, dtype=dtype)
              for _, _, counts in steps]
    batches = [make_batch(starts, counts, tables, args.block_size) for _, starts, counts in steps]
    compare = all(b in layers for b in BACKENDS)
    results: list[StepResult] = []
    with torch.inference_mode():
        for round_ in range(args.warmup + 1):
            timed = round_ == args.warmup
            for layer in layers.values():
                layer.reset_cache()
            for (name, _, _), x, batch in zip(steps, inputs, batches, strict=True):
                res = StepResult(name, batch.num_tokens)
                outs = {}
                for b, layer in layers.items():
                    outs[b], res.ms[b] = _time(lambda layer=layer, x=x, batch=batch: layer(x, batch))
                if compare:
                    tri, nat = layers["triton"], layers["native"]
                    ok, res.max_diff, _ = agreement(outs["triton"], outs["native"])
                    ok_k, dk, _ = agreement(tri.key_cache, nat.key_cache)
                    ok_v, dv, _ = agreement(tri.value_cache, nat.value_cache)
                    res.cache_diff, res.ok = max(dk, dv), ok and ok_k and ok_v
                    if not ok:
                        res.worst = _worst_token(outs["triton"].float() - outs["native"].float(), batch)
                    elif not res.ok:
                        res.worst = "the KV cache"
                if timed:
                    results.append(res)
    return results


# ---------------------------------------------------------------------------------------------
# Command line


def _int_at_least(minimum: int, what: str):
    """An argparse type for an integer >= ``minimum``."""
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            value = None
        if value is None or value < minimum:
            raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}")
        return value
    return parse


_positive = _int_at_least(1, "a positive integer")
_non_negative = _int_at_least(0, "an integer >= 0")


def _backends(text: str) -> list[str]:
    names = [s.strip() for s in text.split(",") if s.strip()]
    unknown = [n for n in names if n not in BACKENDS]
    if not names or unknown or len(set(names)) != len(names):
        raise argparse.ArgumentTypeError(f"expected a comma list of distinct {', '.join(BACKENDS)}, got {text!r}")
    return names


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="llama3-8B", choices=list(gqa_models()),
                   help="shapes from op_benchmarks/model_configs.json")
    p.add_argument("--small", action=argparse.BooleanOptionalAction, default=None,
                   help="a tiny layer of the model's eps and theta (default: on without a GPU)")
    p.add_argument("--prompt-lens", type=_positive, nargs="+",
                   help="prompt length of each sequence (default 5 12 17 on the CPU, 128 512 1000 on a GPU)")
    p.add_argument("--decode-steps", type=_non_negative, default=4, help="decode steps after the prefill")
    p.add_argument("--dtype", choices=list(DTYPES), help="default bf16 on a GPU, fp32 on the CPU")
    p.add_argument("--backends", type=_backends, default=list(BACKENDS),
                   help="comma list of triton, native (default triton,native)")
    p.add_argument("--qkv", choices=QKV_MODES, default="rope_cache",
                   help="rope_cache: split, then fused_qk_rope_reshape_and_cache; "
                        "split_rope: fused_qkv_split_qk_rope, then a plain cache write")
    p.add_argument("--block-size", type=_positive, default=16, help="KV-cache block size")
    p.add_argument("--warmup", type=_non_negative,
                   help="untimed runs of the whole schedule first (default 1 on a GPU, 0 on the CPU)")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    if args.small is None:
        args.small = not ON_GPU
    if args.prompt_lens is None:
        args.prompt_lens = [128, 512, 1000] if ON_GPU else [5, 12, 17]
    if args.dtype is None:
        args.dtype = "bf16" if ON_GPU else "fp32"
    if args.warmup is None:
        args.warmup = 1 if ON_GPU else 0
    return args


def _fmt(x: float | None, width: int) -> str:
    return f"{'-':>{width}}" if x is None else f"{x:>{width}.3g}"


def report(args: argparse.Namespace, results: list[StepResult]) -> bool:
    """Print the per-step table and the final line; True when every compared step agreed."""
    cfg = load_config(args.model, args.small)
    where = torch.cuda.get_device_name() if ON_GPU else "CPU, Triton interpreter: timings mean nothing"
    print(f"decoder layer {cfg.describe()}")
    print(f"  {args.dtype}, qkv={args.qkv}, block size {args.block_size}, prompts {args.prompt_lens}, "
          f"{args.decode_steps} decode steps, seed {args.seed} ({where})")
    atol, rtol = TOL[DTYPES[args.dtype]]
    backends = args.backends
    head = f"{'step':<10} {'tokens':>6} " + " ".join(f"{b + ' ms':>10}" for b in backends)
    head += f" {'max|diff|':>10} {'cache diff':>10}  status"
    print(head)
    print("-" * len(head))
    for r in results:
        status = "-" if r.ok is None else ("OK" if r.ok else "FAIL")
        line = f"{r.step:<10} {r.tokens:>6} " + " ".join(f"{r.ms[b]:>10.3f}" for b in backends)
        line += f" {_fmt(r.max_diff, 10)} {_fmt(r.cache_diff, 10)}  {status}"
        print(line + (f"  (worst: {r.worst})" if r.worst else ""))
    decode = [r for r in results if r.step != "prefill"]
    if decode:
        print(f"{'median':<10} {'decode':>6} "
              + " ".join(f"{statistics.median(r.ms[b] for r in decode):>10.3f}" for b in backends))
    compared = [r for r in results if r.ok is not None]
    failed = [r.step for r in compared if not r.ok]
    if not compared:
        print(f"not checked: {','.join(backends)} ran; the check needs both triton and native")
    elif failed:
        print(f"FAIL: {len(failed)} of {len(compared)} steps disagree with native ({', '.join(failed)}); "
              f"tolerance atol {atol:g} x rms + rtol {rtol:g}")
    else:
        worst = max(r.max_diff for r in compared)
        print(f"OK: all {len(compared)} steps agree with native (max |diff| {worst:.3g}; tolerance atol {atol:g} "
              f"x rms + rtol {rtol:g})")
    return not failed


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    return 0 if report(args, run(args)) else 1


if __name__ == "__main__":
    sys.exit(main())
