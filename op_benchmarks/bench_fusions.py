"""Benchmark the attention-block fusions (RoPE + KV-cache write, QKV split + RoPE, MLA concat and cache write).

    python op_benchmarks/bench_fusions.py                           # every op, T = 1..32768, 3 models (below)
    python op_benchmarks/bench_fusions.py --op rope_cache -T 1 16 128 512 2048 --cudagraph
    python op_benchmarks/bench_fusions.py --op rope_cache --layout flash paged --cache-dtype bf16 fp8 -o kv.csv
    python op_benchmarks/bench_fusions.py --op qk_rope_cat mla_cache -T 1 64 4096 --block-size 64
    python op_benchmarks/bench_fusions.py --op mla_cache --layout shuffled flash --block-size 64 --cache-dtype bf16 fp8
    python op_benchmarks/bench_fusions.py --op rope_cache --shape 2048x64x8x128 --inplace false

Ops (aiter's names, aiter_lite.ops.triton.fusions; T tokens, QH / KH query / key-value heads of D channels):
    rope_cache      fused_qk_rope_reshape_and_cache as vLLM calls it: Q and K turned in place
                    (q_out = q, k_out = k; --inplace false: into new outputs), K and V written into
                    the caches at slot_mapping, output_zeros=False, scales applied for fp8 caches only
    qkv_split_rope  fused_qkv_split_qk_rope: qkv (T, (QH + 2 KH) D) into new Q, K, V; Q and K turned
    qk_rope_cat     fused_qk_rope_cat, MLA's absorbed Q and K: cat(nope, rope(pe)) of q_nope (T, H, L),
                    q_pe (T, H, R), k_nope (T, 1, L), k_pe (T, 1, R)
    qk_cat          fused_qk_cat: the same concatenation, nothing turned
    mla_cache       cat_and_cache_mla: cat(k_nope (T, L), k_pe (T, R)) written into the latent cache
    qk_rope_cat_cache  fused_qk_rope_cat_and_cache_mla as SGLang calls it: q_out = cat(q_nope, rope(q_pe)),
                    cat(k_nope, rope(k_pe)) written into the latent cache, k_pe_out (every token decoding)
    rope_cosine_cache  fused_qk_rope_cosine_cache_llama: Q and K turned (Q into a new q_out), K and V
                    written into a per-sequence cache, token t at row t, offset slot_mapping[t] (random
                    in [0, B)); --layout flash or paged (the classic layouts) as rope_cache's
    kv_write        kv_cache_write as vLLM's reshape_and_cache_flash (--layout flash) / reshape_and_cache
                    (paged) call it: K and V (views of a qkv tensor) written into the caches, divided by
                    the scale for fp8 caches only
    cache_convert   convert_kv_cache as vLLM's convert_fp8: a cache of ceil(T / B) blocks (B, KH, D) in
                    the activations' dtype quantized into an fp8 one (divided by the scale)
    bmm_rope_cat_cache / fp8_ / fp4_bmm_rope_cat_cache  fused_bf16_ / fused_fp8_ / fused_fp4_bmm_rope_cat_and_cache_mla:
                    q_nope (H, T, 128) times W_UK (H, L, 128) (bf16; fp8 with q quantized per token and 128
                    channels; MXFP4 with q quantized to MXFP4) into q_out's latent part, then as
                    qk_rope_cat_cache (the flat cache)
    qk_norm_rope_swa  fused_reduce_qk_norm_rope_swa_write (DeepSeek-V4-style MQA): q (T, H D) and kv (T, D)
                    RMS-normalized per head, their last R channels turned, kv in place and into a
                    window cache of 128 (every token its own sequence); MLA models' H, D = L + R, R
    qk_norm_rope_cache  fused_qkv_split_qk_norm_rope_cache as vLLM calls it for Qwen3-Next: qkv (T, (2 QH
                    + 2 KH) D), gates interleaved with Q, into Q, gate, K, V; Q and K RMS-normalized per
                    head (1 + w) and turned; K, V into the caches (--layout flash: NHD, paged: HND)
The GQA ops run on the models with key-value heads (QH, KH, D from the config, NEOX; by default
llama3-8B and qwen2.5-7B), the MLA ops on those with a latent (deepseek-v3: H heads, L = kv_lora_rank,
R = qk_rope_head_dim, GPT-J pairs as DeepSeek turns them; the report's D is L + R, KH 1).
--shape gives TxQHxKHxD (MLA ops: TxHxLxR).
RoPE reads half-width fp32 cos / sin tables (MAX_POS, R / 2) at random int64 positions.
Caches, B = --block-size, ceil(T / B) blocks; int64 slot_mapping as vLLM builds it for a prefill
(--slots blocks: the blocks in a random order, each filled from offset 0 by consecutive tokens;
batch: sequences of 1-2048 tokens back to back, each so from a block of its own) or a random
permutation of the slots (--slots random: every token in a block of its own, as in decode); --layout flash: key and value (blocks, B, KH, D); paged: key
(blocks, KH, D / x, B, x) with x = 16 / c (16-byte chunks), value (blocks, KH, D, B) (shuffled:
aiter's (blocks, KH, B / x, D, x), rope_cache only); MLA: paged
(blocks, B, 1, L + R), flash the flat (slots, 1, L + R), shuffled aiter's preshuffled cache
(blocks, 1, B, L + R), B a multiple of 16 (mla_cache only: cat_and_cache_mla(...,
shuffled_kv_cache=True), the layout gfx950's MLA decode reads). --cache-dtype fp8 is the device's
e4m3, values divided by a scale of 0.05.

Bytes moved (each input read once, each output written once; e = the activations' element size,
c the cache's, 8 an index, 4 a table entry, F = R / 2 table columns):
    rope_cache      Q read and written 2 T QH D e; K read, K out written 2 T KH D e; V read T KH D e;
                    both caches written 2 T KH D c; positions, slots 16 T; cos / sin rows 8 T F
    qkv_split_rope  qkv read, Q K V written 2 T (QH + 2 KH) D e; positions 8 T; cos / sin rows 8 T F
    qk_norm_rope_swa  q read, q_out written 2 T H D e; kv read, written, into the window 3 T D e; weights 4 D e;
                    positions and three index tables 20 T; cos / sin rows 8 T F
    rope_cosine_cache  Q read and written 2 T QH D e; K, V read 2 T KH D e; the caches 2 T KH D c; positions,
                    slots 16 T; cos / sin rows 8 T F
    qk_norm_rope_cache  qkv read, Q gate K V written 4 T (QH + KH) D e; the caches 2 T KH D c; weights 4 D e;
                    positions, slots 16 T; cos / sin rows 8 T F
    qk_cat          the four parts read, Q (T, H, L + R) and K (T, 1, L + R) written 2 T (H + 1) (L + R) e
    qk_rope_cat     as qk_cat, plus positions 8 T and cos / sin rows 8 T F
    mla_cache       k_nope, k_pe read T (L + R) e; the cache written T (L + R) c; slots 8 T
    kv_write        K, V read 2 T KH D e; the caches written 2 T KH D c; slots 8 T
    cache_convert   N = ceil(T / B) B KH D elements read (e) and written (c = 1): N (e + 1)
    qk_rope_cat_cache  Q read and written 2 T H (L + R) e; K read T (L + R) e, the cache written T (L + R) c,
                    k_pe_out T R e; positions, slots 16 T; cos / sin rows 8 T F
Providers: triton (aiter_lite), native (the eager fp32 reference), compile (torch.compile of it),
unfused (this project's ops in sequence, as a serving stack without the fusion runs them):
    rope_cache      rope_cached_thd_positions_2c_fwd_inplace (or _fwd) on Q and K, then K and V
                    (fp8: divided by their scale and cast by torch) index_copy_ (flash) or index_put_
                    at (block, offset) (paged; computed once per step, outside the timing) into the caches
    qkv_split_rope  the 2c rope out of place on strided Q and K views of qkv (the cheapest unfused form:
                    it writes Q and K contiguous), then V.contiguous()
    qk_rope_cat     the 2c rope out of place on q_pe and k_pe, then torch.cat twice
    qk_cat          none: native is already two torch.cat
    kv_write        rope_cache's writes without the RoPE: (fp8: divided, cast) index_copy_ / index_put_
    cache_convert   none: native is already torch's division and cast
    mla_cache       torch.cat, (fp8: scale, cast), index_copy_ into the flat cache (shuffled: into the
                    preshuffled positions of each element, computed once per step, outside the timing)
    qk_rope_cat_cache  this project's fused_qk_rope_cat, then its cat_and_cache_mla (two launches)
    rope_cosine_cache  this project's RoPE out of place, then torch's scaling and index_put_ at (row, offset)
    bmm_rope_cat_cache  torch.bmm (fp8: q quantized per group by torch, the weights dequantized once outside
                    the timing), then this project's fused_qk_rope_cat_and_cache_mla
    qk_norm_rope_swa  this project's rms_norm on Q's heads and on kv, its 2c RoPE in place on their tails
                    (nope_first), kv copied back and index_put_ into the window (four launches and a copy)
    qk_norm_rope_cache  this project's rms_norm (weight_offset 1) on the Q and K views of qkv, then its
                    fused_qk_rope_reshape_and_cache (NHD only), the gate and V copied out (five launches)
Every provider writes its own copies of Q and K and its own zeroed caches, so whole caches are
compared with the reference's; fp8 values agree within one step. Without --providers the bench
times triton, unfused, compile and native (on the CPU: no compile). Under --cudagraph the cache
ops time triton and unfused only: the reference finds the writing tokens with torch.nonzero, a host
sync no graph captures.
"""

import argparse
import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

from op_benchmarks.utils import harness  # noqa: E402  (sets TRITON_INTERPRET on CPU before aiter_lite loads)

import torch  # noqa: E402

from aiter_lite.ops.native import fusions as native  # noqa: E402
from aiter_lite.ops.triton import fusions as tri  # noqa: E402
from aiter_lite.ops.native.quant import mx_quant as native_mx  # noqa: E402
from aiter_lite.ops.triton import quant as tri_quant  # noqa: E402
from aiter_lite.ops.triton.quant import get_fp8_e4m3_dtype  # noqa: E402
from aiter_lite.ops.triton.normalization import rmsnorm as tri_norm  # noqa: E402
from aiter_lite.ops.triton.rope import rope as tri_rope  # noqa: E402
from op_benchmarks.utils import rope as torch_rope  # noqa: E402

GQA_OPS = ("rope_cache", "qkv_split_rope", "qk_norm_rope_cache", "rope_cosine_cache", "kv_write", "cache_convert")
BMM_OPS = ("bmm_rope_cat_cache", "fp8_bmm_rope_cat_cache", "fp4_bmm_rope_cat_cache")
MLA_OPS = ("qk_rope_cat", "qk_cat", "mla_cache", "qk_rope_cat_cache", "qk_norm_rope_swa", *BMM_OPS)
CACHE_OPS = ("rope_cache", "mla_cache", "qk_rope_cat_cache", "qk_norm_rope_cache", "rope_cosine_cache", "kv_write",
             *BMM_OPS)
OPS = {"rope_cache": "fused_qk_rope_reshape_and_cache", "qkv_split_rope": "fused_qkv_split_qk_rope",
       "qk_rope_cat": "fused_qk_rope_cat", "qk_cat": "fused_qk_cat", "mla_cache": "cat_and_cache_mla",
       "qk_rope_cat_cache": "fused_qk_rope_cat_and_cache_mla", "qk_norm_rope_cache": "fused_qkv_split_qk_norm_rope_cache",
       "rope_cosine_cache": "fused_qk_rope_cosine_cache_llama",
       "qk_norm_rope_swa": "fused_reduce_qk_norm_rope_swa_write",
       "bmm_rope_cat_cache": "fused_bf16_bmm_rope_cat_and_cache_mla",
       "fp8_bmm_rope_cat_cache": "fused_fp8_bmm_rope_cat_and_cache_mla",
       "fp4_bmm_rope_cat_cache": "fused_fp4_bmm_rope_cat_and_cache_mla",
       "kv_write": "kv_cache_write", "cache_convert": "convert_kv_cache"}
NOPE_P = 128  # DeepSeek's qk_nope_head_dim: the absorbed matmul's input channels
SWA_WIN = 128
NORM_EPS = 1e-6
DEFAULT_MODELS = ["llama3-8B", "qwen2.5-7B", "deepseek-v3"]
DEFAULT_T = [1, 16, 128, 512, 2048, 8192, 32768]
MAX_POS = 32768  # rows of the cos / sin tables: a 32K context
KV_SCALE = 0.05  # fp8 caches: |x| / 0.05 stays inside e4m3fnuz's 240 for unit-normal activations
# (rtol, atol) of each output dtype, the harness's
TOL = {torch.float32: (1e-4, 1e-4), torch.float16: (4e-3, 2e-3), torch.bfloat16: (3e-2, 2e-2)}


def _kv_dtype(name: str) -> torch.dtype:
    return get_fp8_e4m3_dtype() if name == "fp8" else harness.DTYPES[name]


def heads(op: str, cfg: dict):
    """(QH, KH, D, R) of ``op`` on a model, or None where the model has the other attention."""
    if (op in MLA_OPS) != ("kv_lora_rank" in cfg):
        return None
    if op in MLA_OPS:
        r = cfg["qk_rope_head_dim"]
        return cfg["num_attention_heads"], 1, cfg["kv_lora_rank"] + r, r
    hq = cfg["num_attention_heads"]
    d = cfg.get("head_dim", cfg["hidden_size"] // hq)
    return hq, cfg["num_key_value_heads"], d, d


def shapes(args: argparse.Namespace, op: str) -> list[tuple[str, int, tuple]]:
    """(label, T, (QH, KH, D, R)) from --shape, else from the models that have the op's attention."""
    if args.shape:
        if op in MLA_OPS:
            dims = [harness.parse_shape(s, ("T", "H", "L", "R")) for s in args.shape]
            return [("custom", s["T"], (s["H"], 1, s["L"] + s["R"], s["R"])) for s in dims]
        dims = [harness.parse_shape(s, ("T", "QH", "KH", "D")) for s in args.shape]
        return [("custom", s["T"], (s["QH"], s["KH"], s["D"], s["D"])) for s in dims]
    models = harness.load_models(args.model, DEFAULT_MODELS).items()
    return [(name, t, h) for name, cfg in models if (h := heads(op, cfg)) for t in args.M or DEFAULT_T]


def fusion_case(op: str, label: str, t: int, hd: tuple, dtype: torch.dtype, layout: str, kv: str,
                args: argparse.Namespace) -> harness.Case:
    """T tokens through ``op`` on (QH, KH, D, R) heads; ``layout`` and ``kv`` name the cache."""
    qh, kh, d, r = hd
    e, bs, f = dtype.itemsize, args.block_size, r // 2
    cache = op in CACHE_OPS
    kv_dtype = _kv_dtype(kv) if cache else get_fp8_e4m3_dtype() if op == "cache_convert" else dtype
    c = kv_dtype.itemsize
    n_conv = -(-t // bs) * bs * kh * d
    nbytes = {
        "rope_cache": 2 * t * qh * d * e + 3 * t * kh * d * e + 2 * t * kh * d * c + 16 * t + 8 * t * f,
        "qkv_split_rope": 2 * t * (qh + 2 * kh) * d * e + 8 * t + 8 * t * f,
        "qk_cat": 2 * t * (qh + 1) * d * e,
        "qk_rope_cat": 2 * t * (qh + 1) * d * e + 8 * t + 8 * t * f,
        "mla_cache": t * d * (e + c) + 8 * t,
        "qk_rope_cat_cache": 2 * t * qh * d * e + t * d * (e + c) + t * r * e + 16 * t + 8 * t * f,
        "qk_norm_rope_cache": 4 * t * (qh + kh) * d * e + 2 * t * kh * d * c + 4 * d * e + 16 * t + 8 * t * f,
        "rope_cosine_cache": 2 * t * qh * d * e + 2 * t * kh * d * e + 2 * t * kh * d * c + 16 * t + 8 * t * f,
        "qk_norm_rope_swa": 2 * t * qh * d * e + 3 * t * d * e + 4 * d * e + 20 * t + 8 * t * f,
        "kv_write": 2 * t * kh * d * (e + c) + 8 * t,
        "cache_convert": n_conv * (e + c),
        # q_nope read, W read (e or 1 byte), then as qk_rope_cat_cache (the latent part of q_out written once)
        "bmm_rope_cat_cache": t * qh * NOPE_P * e + qh * (d - r) * NOPE_P * e + t * qh * (d + r) * e
                              + t * d * (e + c) + t * r * e + 16 * t + 8 * t * f,
        "fp8_bmm_rope_cat_cache": t * qh * NOPE_P * e + qh * (d - r) * NOPE_P + t * qh * (d + r) * e
                                  + t * d * (e + c) + t * r * e + 16 * t + 8 * t * f,
        "fp4_bmm_rope_cat_cache": t * qh * NOPE_P * e + qh * (d - r) * (NOPE_P // 2 + NOPE_P // 32)
                                  + t * qh * (d + r) * e + t * d * (e + c) + t * r * e + 16 * t + 8 * t * f,
    }[op]

    def make_inputs():
        dev = harness.DEVICE
        randn = lambda *shape: torch.randn(*shape, device=dev, dtype=dtype)  # noqa: E731
        half = torch_rope.angles(MAX_POS, r, dev)
        x = {"cos": torch.cos(half), "sin": torch.sin(half),
             "pos": torch.randint(0, MAX_POS, (t,), device=dev),
             "scale": torch.tensor([KV_SCALE], device=dev)}
        blocks = -(-t // bs)
        if args.slots == "random":
            x["slots"] = torch.randperm(blocks * bs, device=dev)[:t]
        elif args.slots == "batch":  # sequences of 1-2048 tokens back to back, each in blocks of its own
            gen = torch.Generator().manual_seed(t)
            lens = torch.randint(1, 2049, (t,), generator=gen)
            lens = lens[:int((lens.cumsum(0) < t).sum()) + 1]
            lens[-1] -= int(lens.sum()) - t
            blocks = int((-(-lens // bs)).sum())  # a block more a sequence at most
            order = torch.randperm(blocks, device=dev)
            starts = torch.cat([torch.zeros(1, dtype=torch.long), (-(-lens // bs)).cumsum(0)[:-1]]).tolist()
            x["slots"] = torch.cat([(order[s0:s0 + -(-n // bs)][:, None] * bs + torch.arange(bs, device=dev))
                                    .flatten()[:n] for s0, n in zip(starts, lens.tolist())])
        else:
            order = torch.randperm(blocks, device=dev)
            x["slots"] = (order[:, None] * bs + torch.arange(bs, device=dev)).flatten()[:t]
        if op == "rope_cosine_cache":  # a row a token (sequence), slot_mapping the offset in it
            x.update(q=randn(t, qh, d), k=randn(t, kh, d), v=randn(t, kh, d),
                     slots=torch.randint(0, bs, (t,), device=dev))
            rows = max(t, 1)
            if layout == "flash":
                kshape = vshape = (rows, bs, kh, d)
            else:
                xw = 16 // c
                kshape, vshape = (rows, kh, d // xw, bs, xw), (rows, kh, d, bs)
            x["key_cache"] = torch.zeros(kshape, device=dev, dtype=kv_dtype)
            x["value_cache"] = torch.zeros(vshape, device=dev, dtype=kv_dtype)
        elif op == "rope_cache":
            x.update(q=randn(t, qh, d), k=randn(t, kh, d), v=randn(t, kh, d))
            if layout == "flash":
                kshape = vshape = (blocks, bs, kh, d)
            else:
                xw = 16 // c
                kshape = (blocks, kh, d // xw, bs, xw)
                vshape = (blocks, kh, bs // xw, d, xw) if layout == "shuffled" else (blocks, kh, d, bs)
            x["key_cache"] = torch.zeros(kshape, device=dev, dtype=kv_dtype)
            x["value_cache"] = torch.zeros(vshape, device=dev, dtype=kv_dtype)
        elif op == "kv_write":  # views of a qkv tensor, as vLLM passes them
            _, k, v = randn(t, qh + 2 * kh, d).split([qh, kh, kh], dim=1)
            x.update(k=k, v=v)
            if layout == "flash":
                kshape = vshape = (blocks, bs, kh, d)
            else:
                xw = 16 // c
                kshape, vshape = (blocks, kh, d // xw, bs, xw), (blocks, kh, d, bs)
            x["key_cache"] = torch.zeros(kshape, device=dev, dtype=kv_dtype)
            x["value_cache"] = torch.zeros(vshape, device=dev, dtype=kv_dtype)
        elif op == "cache_convert":
            x.update(src=randn(blocks, bs, kh, d), dst=torch.zeros(blocks, bs, kh, d, device=dev, dtype=kv_dtype))
        elif op == "qkv_split_rope":
            x["qkv"] = randn(t, (qh + 2 * kh) * d)
        elif op == "qk_norm_rope_cache":  # Qwen3-Next's call: gates interleaved with Q
            x.update(qkv=randn(t, (2 * qh + 2 * kh) * d), q_weight=0.1 * randn(d), k_weight=0.1 * randn(d))
            shape = (blocks, bs, kh, d) if layout == "flash" else (blocks, kh, bs, d)
            x["key_cache"] = torch.zeros(shape, device=dev, dtype=kv_dtype)
            x["value_cache"] = torch.zeros(shape, device=dev, dtype=kv_dtype)
        elif op in BMM_OPS:  # the latent cache flat
            fp8w = get_fp8_e4m3_dtype() if op.startswith("fp8") else dtype
            w = torch.randn(qh, d - r, NOPE_P, device=dev) * NOPE_P ** -0.5
            x.update(q_nope=randn(qh, t, NOPE_P), q_pe=randn(t, qh, r), k_nope=randn(t, 1, d - r), k_pe=randn(t, 1, r),
                     w_k=w.to(fp8w), w_scale=torch.tensor([1.0], device=dev),
                     kv_cache=torch.zeros(blocks * bs, 1, d, device=dev, dtype=kv_dtype))
            if op.startswith("fp4"):  # MXFP4 weights: packed e2m1 (H, L, P / 2), e8m0 scales (H, L, P / 32)
                wq, ws = native_mx.dynamic_mxfp4_quant(w.reshape(-1, NOPE_P))
                x.update(w_k=wq.reshape(qh, d - r, NOPE_P // 2), w_scale=ws.contiguous().reshape(qh, d - r, -1))
        elif op == "qk_norm_rope_swa":  # every token its own sequence's window slot (decode)
            x.update(q=randn(t, qh * d), kv=randn(t, d), q_weight=randn(d), kv_weight=randn(d),
                     write_indices=torch.arange(t, device=dev, dtype=torch.int32),
                     batch_id=torch.arange(t, device=dev, dtype=torch.int32),
                     state_slots=torch.arange(t, device=dev, dtype=torch.int32),
                     swa_kv=torch.zeros(max(t, 1), SWA_WIN, d, device=dev, dtype=dtype))
        elif op in ("mla_cache", "qk_rope_cat_cache"):
            x.update(k_nope=randn(t, d - r), k_pe=randn(t, r))
            shape = {"paged": (blocks, bs, 1, d), "shuffled": (blocks, 1, bs, d)}.get(layout, (blocks * bs, 1, d))
            x["kv_cache"] = torch.zeros(shape, device=dev, dtype=kv_dtype)
            if op == "qk_rope_cat_cache":
                x.update(q_nope=randn(t, qh, d - r), q_pe=randn(t, qh, r), k_nope=randn(t, 1, d - r),
                         k_pe=randn(t, 1, r))
        else:
            x.update(q_nope=randn(t, qh, d - r), q_pe=randn(t, qh, r), k_nope=randn(t, 1, d - r),
                     k_pe=randn(t, 1, r))
        return x

    dims = {"T": t, "QH": qh, "KH": kh, "D": d, "R": r,
            "LAYOUT": layout if cache else "-",
            "KV": str(kv_dtype).replace("torch.", "") if cache or op == "cache_convert" else "-"}
    extra = {"rotate_style": "gptj" if op in MLA_OPS else "neox", "block_size": bs if cache else 0,
             "slots": args.slots if cache else "-",
             "inplace": bool(args.inplace) if op == "rope_cache" else False, "table_rows": MAX_POS}
    return harness.Case(op=op, label=label, dims=dims, dtype=dtype, nbytes=nbytes, rows=t,
                        make_inputs=make_inputs, extra=extra, agrees=_agrees)


def _tensors(result) -> list:
    return [t for t in (result if isinstance(result, (tuple, list)) else (result,)) if isinstance(t, torch.Tensor)]


def _close(a: torch.Tensor, b: torch.Tensor) -> bool:
    if a.dtype.itemsize == 1:
        # one step of the value, or 1/64 of the chunk's largest: a rotation that nearly cancels
        # turns one rounding of its inputs (activations, normalized values) into a large
        # relative error of a small result
        step = b.float().abs() / (4 if a.dtype == torch.float8_e5m2 else 8)
        floor = max(2**-6, float(b.float().abs().max()) / 64) if b.numel() else 2**-6
        return bool(((a.float() - b.float()).abs() <= step * 1.01 + floor).all())
    rtol, atol = TOL[a.dtype]
    return torch.allclose(a.float(), b.float(), rtol=rtol, atol=atol, equal_nan=True)


def _agrees(result, reference) -> bool:
    """Each output (caches whole) within its dtype's tolerance of the reference's; fp8 within one
    step, 1/8 of the value (e4m3's 3 mantissa bits; e5m2: 1/4). Compared 2**24 elements at a
    time: MLA's Q at T = 32768 is 4.8 GB, its fp32 temporaries would be several times that."""
    got, want = _tensors(result), _tensors(reference)
    if len(got) != len(want):
        return False
    for a, b in zip(got, want):
        if a.shape != b.shape or a.dtype != b.dtype:
            return False
        a, b = a.reshape(-1), b.reshape(-1)
        if not all(_close(a[i:i + 2**24], b[i:i + 2**24]) for i in range(0, a.numel(), 2**24)):
            return False
    return True


def _own(case: harness.Case, inputs: dict) -> dict:
    """A provider's view of ``inputs``: its own zeroed caches, its own Q and K where it writes
    them in place, its own outputs otherwise."""
    x = dict(inputs)
    for name in ("key_cache", "value_cache", "kv_cache", "dst"):
        if name in x:
            x[name] = torch.zeros_like(x[name])
    if case.op == "rope_cache":
        if case.extra["inplace"]:
            x["q"], x["k"] = x["q"].clone(), x["k"].clone()
            x["q_out"], x["k_out"] = x["q"], x["k"]
        else:
            x["q_out"], x["k_out"] = torch.empty_like(x["q"]), torch.empty_like(x["k"])
    return x


def _fused(mod):
    """The op of ``mod`` (the Triton module, the native one, or their compiled forms) as vLLM calls it."""
    def provider(case, inputs):
        x, fn = _own(case, inputs), getattr(mod, OPS[case.op])
        neox, qh, kh, d = case.extra["rotate_style"] == "neox", case.dims["QH"], case.dims["KH"], case.dims["D"]
        fp8 = case.dims["KV"].startswith("float8")
        if case.op == "rope_cache":
            kc, vc = x["key_cache"], x["value_cache"]
            return lambda: fn(x["q"], x["k"], x["v"], kc, vc, x["slots"], x["pos"], x["cos"], x["sin"], x["scale"],
                              x["scale"], neox, case.dims["LAYOUT"] == "flash", apply_scale=fp8, q_out=x["q_out"],
                              k_out=x["k_out"], output_zeros=False)
        if case.op == "qkv_split_rope":
            return lambda: fn(x["qkv"], x["cos"], x["sin"], x["pos"], qh, kh, d, neox)
        if case.op == "kv_write":
            kc, vc, s = x["key_cache"], x["value_cache"], x["scale"] if fp8 else None
            return lambda: (fn(x["k"], x["v"], kc, vc, x["slots"], s, s, case.dims["LAYOUT"] == "flash"), kc, vc)[1:]
        if case.op == "cache_convert":
            return lambda: (fn(x["dst"], x["src"], KV_SCALE), x["dst"])[1]
        if case.op == "rope_cosine_cache":
            kc, vc = x["key_cache"], x["value_cache"]
            return lambda: fn(x["q"], x["k"], x["v"], kc, vc, x["slots"], x["pos"], x["cos"], x["sin"], x["scale"],
                              x["scale"], neox, case.dims["LAYOUT"] == "flash", fp8)
        if case.op == "qk_norm_rope_cache":
            kc, vc, scale = x["key_cache"], x["value_cache"], x["scale"] if fp8 else None
            layout = "NHD" if case.dims["LAYOUT"] == "flash" else "HND"
            return lambda: (*fn(x["qkv"], x["q_weight"], x["k_weight"], x["cos"], x["sin"], x["pos"], kc, vc,
                                x["slots"], qh, kh, d, neox, None, True, True, scale, scale, NORM_EPS, "interleaved",
                                layout), kc, vc)
        if case.op == "mla_cache":
            kv, shuffled = x["kv_cache"], case.dims["LAYOUT"] == "shuffled"
            return lambda: (fn(x["k_nope"], x["k_pe"], kv, x["slots"], x["scale"], apply_scale=fp8,
                               shuffled_kv_cache=shuffled), kv)[1]
        if case.op == "qk_rope_cat_cache":
            kv, shuffled = x["kv_cache"], case.dims["LAYOUT"] == "shuffled"

            def qk_rope_cat_cache():
                q_out, _, k_pe_out, _ = fn(x["q_nope"], x["q_pe"], x["k_nope"], x["k_pe"], kv, x["slots"], x["pos"],
                                           x["cos"], x["sin"], x["scale"], neox, apply_scale=fp8,
                                           shuffled_kv_cache=shuffled)
                return q_out, k_pe_out, kv
            return qk_rope_cat_cache
        if case.op in BMM_OPS:
            kv = x["kv_cache"]
            ks = x["scale"] if fp8 else None
            if case.op.startswith("fp4"):  # (its fourth output the zeros: the cache compared instead)
                return lambda: (*fn(x["q_nope"], x["w_k"], x["w_scale"], x["q_pe"], x["k_nope"], x["k_pe"], kv,
                                    x["slots"], x["pos"], x["cos"], x["sin"], k_scale=ks, is_neox=neox,
                                    q_out_dtype=x["q_pe"].dtype)[:3], kv)
            if case.op.startswith("fp8"):
                return lambda: fn(x["q_nope"], x["w_k"], x["w_scale"], x["q_pe"], x["k_nope"], x["k_pe"], kv,
                                  x["slots"], x["pos"], x["cos"], x["sin"], group_size=128, k_scale=ks, is_neox=neox,
                                  q_out_dtype=x["q_pe"].dtype)
            return lambda: fn(x["q_nope"], x["w_k"], x["q_pe"], x["k_nope"], x["k_pe"], kv, x["slots"], x["pos"],
                              x["cos"], x["sin"], ks, neox, x["q_pe"].dtype)
        if case.op == "qk_norm_rope_swa":
            kv, swa = x["kv"].clone(), x["swa_kv"].clone()
            r = case.dims["R"]

            def norm_rope_swa():
                q_out = fn(x["q"], kv, x["q_weight"], x["kv_weight"], 1e-6, 1e-6, r, x["cos"], x["sin"], x["pos"],
                           None, neox, x["write_indices"], x["batch_id"], x["state_slots"], swa, SWA_WIN,
                           x["q"].dtype)
                return q_out, kv, swa
            return norm_rope_swa
        if case.op == "qk_cat":
            return lambda: fn(x["q_nope"], x["q_pe"], x["k_nope"], x["k_pe"])
        return lambda: fn(x["q_nope"], x["q_pe"], x["k_nope"], x["k_pe"], x["pos"], x["cos"], x["sin"], neox)
    return provider


def _bytes(t: torch.Tensor) -> torch.Tensor:
    """An fp8 tensor as uint8 (index_copy_ / index_put_ move bytes; vLLM keeps fp8 caches as uint8)."""
    return t.view(torch.uint8) if t.dtype.itemsize == 1 else t


def _shuffled_positions(slots: torch.Tensor, kv_cache: torch.Tensor, lora: int) -> torch.Tensor:
    """Each token's element offsets (tokens x (L + R), flattened) in a preshuffled MLA cache
    (blocks, 1, B, L + R): per block the latent parts of its tokens, then the rope parts, each in
    tiles of 16 tokens with 16-byte chunks side by side (``cat_and_cache_mla``'s doc)."""
    _, _, bs, d = kv_cache.shape
    e = 16 // kv_cache.element_size()
    c = torch.arange(d, device=slots.device)
    rope = c >= lora
    width, cc = torch.where(rope, d - lora, lora), torch.where(rope, c - lora, c)
    blk, off = (slots // bs)[:, None], (slots % bs)[:, None]
    return (blk * bs * d + rope * bs * lora + off // 16 * 16 * width + cc // e * 16 * e + off % 16 * e
            + cc % e).reshape(-1)


def _unfused(case, inputs):
    """This project's RoPE, then torch's concatenation, scaling and scatter, op after op."""
    x = _own(case, inputs)
    style = torch_rope.NEOX if case.extra["rotate_style"] == "neox" else torch_rope.GPTJ
    cos, sin, pos, slots, scale = x["cos"], x["sin"], x["pos"], x["slots"], x["scale"]
    qh, kh, d = case.dims["QH"], case.dims["KH"], case.dims["D"]

    def rope(a, b):
        return tri_rope.rope_cached_thd_positions_2c_fwd(a, b, cos, sin, pos, style, True, False)

    def to_cache(t, cache):
        return _bytes((t / scale).to(cache.dtype)) if cache.dtype.itemsize == 1 else t.to(cache.dtype)

    if case.op == "qkv_split_rope":
        qkv = x["qkv"]

        def split_rope():
            q, k, v = qkv.view(qkv.shape[0], qh + 2 * kh, d).split([qh, kh, kh], dim=1)
            return (*rope(q, k), v.contiguous())
        return split_rope
    if case.op in BMM_OPS:  # torch's bmm, then this project's MLA fusion
        kv, lora = x["kv_cache"], d - case.dims["R"]
        neox, fp8 = case.extra["rotate_style"] == "neox", kv.dtype.itemsize == 1
        fp4 = case.op.startswith("fp4")
        if fp4:  # the weights decoded once, outside the timing; q through this project's MXFP4 quantizer
            w = native_mx.mxfp4_dequant(x["w_k"].reshape(-1, NOPE_P // 2), x["w_scale"].reshape(-1, NOPE_P // 32))
            w = w.reshape(x["w_k"].shape[0], -1, NOPE_P).to(x["q_nope"].dtype)
        else:
            w = x["w_k"].to(x["q_nope"].dtype)  # fp8: dequantized once, outside the timing (scale 1)

        fp8w = not fp4 and x["w_k"].dtype.itemsize == 1
        fmax = torch.finfo(x["w_k"].dtype).max if fp8w else 1.0

        def quantized(q):  # torch's per-token group quantization to the weights' fp8, dequantized
            g = q.float().unflatten(-1, (-1, 128))
            s = g.abs().amax(-1, keepdim=True) / fmax
            return ((g * (1.0 / s)).clamp(-fmax, fmax).to(x["w_k"].dtype).float() * s).flatten(-2).to(q.dtype)

        def mx_quantized(q):  # this project's dynamic_mxfp4_quant, torch's decode
            h, t, p = q.shape
            return native_mx.mxfp4_dequant(*tri_quant.dynamic_mxfp4_quant(q.reshape(h * t, p))).reshape(q.shape) \
                .to(q.dtype)

        def bmm_then_fusion():
            qn = mx_quantized(x["q_nope"]) if fp4 else quantized(x["q_nope"]) if fp8w else x["q_nope"]
            ql = torch.bmm(qn, w.transpose(1, 2)).transpose(0, 1)  # (T, H, L)
            q_out, dq, kpo, _ = tri.fused_qk_rope_cat_and_cache_mla(ql, x["q_pe"], x["k_nope"], x["k_pe"], kv, slots,
                                                                    pos, cos, sin, scale, neox, apply_scale=fp8)
            return q_out, dq, kpo, kv
        return bmm_then_fusion
    if case.op == "qk_norm_rope_swa":  # this project's norms, its RoPE on the tails in place, torch's copies
        kv, swa = x["kv"].clone(), x["swa_kv"].clone()
        t = kv.shape[0]
        slots = x["state_slots"].long()[x["batch_id"].long()[x["write_indices"].long()]]

        def norm_rope_swa():
            qn = tri_norm.rms_norm(x["q"].view(t, qh, d), x["q_weight"], 1e-6)
            kn = tri_norm.rms_norm(kv, x["kv_weight"], 1e-6)
            tri_rope.rope_cached_thd_positions_2c_fwd_inplace(qn, kn[:, None], cos, sin, pos, style, True, True)
            kv.copy_(kn)
            swa[slots, pos % SWA_WIN] = kn
            return qn, kv, swa
        return norm_rope_swa
    if case.op == "rope_cosine_cache":  # this project's RoPE, then torch's scaling and scatter into (row, slot)
        q, k, v, kc, vc = x["q"], x["k"], x["v"], x["key_cache"], x["value_cache"]
        where = (torch.arange(q.shape[0], device=q.device), slots)
        if case.dims["LAYOUT"] == "flash":
            kdst, vdst = _bytes(kc), _bytes(vc)  # (rows, B, KH, D)
        else:
            kdst, vdst = _bytes(kc).permute(0, 3, 1, 2, 4), _bytes(vc).permute(0, 3, 1, 2)

        def rope_cosine_cache():
            q_out, k_out = rope(q, k)
            kdst.index_put_(where, to_cache(k_out, kc).view(k.shape[0], *kdst.shape[2:]))
            vdst.index_put_(where, to_cache(v, vc).view(v.shape[0], *vdst.shape[2:]))
            return q_out, kc, vc
        return rope_cosine_cache
    if case.op == "qk_norm_rope_cache":  # this project's norms, then its RoPE + cache write (NHD only)
        if case.dims["LAYOUT"] != "flash":
            return None
        qkv, kc, vc = x["qkv"], x["key_cache"], x["value_cache"]
        fp8, neox = kc.dtype.itemsize == 1, case.extra["rotate_style"] == "neox"

        def norm_rope_cache():
            t = qkv.shape[0]
            q, gate = qkv[:, :2 * qh * d].view(t, qh, 2, d).unbind(2)
            k = qkv[:, 2 * qh * d:(2 * qh + kh) * d].view(t, kh, d)
            v = qkv[:, (2 * qh + kh) * d:].view(t, kh, d)
            qn = tri_norm.rms_norm(q, x["q_weight"], NORM_EPS, 1.0)
            kn = tri_norm.rms_norm(k, x["k_weight"], NORM_EPS, 1.0)
            tri.fused_qk_rope_reshape_and_cache(qn, kn, v, kc, vc, slots, pos, cos, sin, scale, scale, neox, True,
                                                apply_scale=fp8, q_out=qn, k_out=kn, output_zeros=False)
            return qn, gate.contiguous(), kn, v.contiguous(), kc, vc
        return norm_rope_cache
    if case.op == "qk_rope_cat":
        qn, qp, kn, kp = x["q_nope"], x["q_pe"], x["k_nope"], x["k_pe"]

        def rope_cat():
            qr, kr = rope(qp, kp)
            return torch.cat([qn, qr], -1), torch.cat([kn, kr], -1)
        return rope_cat
    if case.op == "qk_rope_cat_cache":  # this project's two fusions: RoPE + concatenation, then the cache write
        kv_cache, lora = x["kv_cache"], d - case.dims["R"]
        fp8, shuffled = kv_cache.dtype.itemsize == 1, case.dims["LAYOUT"] == "shuffled"
        neox = case.extra["rotate_style"] == "neox"

        def rope_cat_then_cache():
            q_out, k_cat = tri.fused_qk_rope_cat(x["q_nope"], x["q_pe"], x["k_nope"], x["k_pe"], pos, cos, sin, neox)
            tri.cat_and_cache_mla(k_cat[..., :lora], k_cat[..., lora:], kv_cache, slots, scale, apply_scale=fp8,
                                  shuffled_kv_cache=shuffled)
            return q_out, k_cat[..., lora:], kv_cache
        return rope_cat_then_cache
    if case.op == "mla_cache":
        kv_cache = x["kv_cache"]
        if case.dims["LAYOUT"] == "shuffled":
            flat, where = _bytes(kv_cache).view(-1), _shuffled_positions(slots, kv_cache, d - case.dims["R"])

            def cat_cache_shuffled():
                values = to_cache(torch.cat([x["k_nope"], x["k_pe"]], -1), kv_cache)
                flat.index_copy_(0, where, values.reshape(-1))
                return kv_cache
            return cat_cache_shuffled
        flat = _bytes(kv_cache).view(-1, d)

        def cat_cache():
            flat.index_copy_(0, slots, to_cache(torch.cat([x["k_nope"], x["k_pe"]], -1), kv_cache))
            return kv_cache
        return cat_cache
    if case.op not in ("rope_cache", "kv_write"):
        return None
    q, k, v, kc, vc = x.get("q"), x["k"], x["v"], x["key_cache"], x["value_cache"]
    if case.dims["LAYOUT"] == "flash":
        kdst, vdst = _bytes(kc).flatten(0, 1), _bytes(vc).flatten(0, 1)  # (slots, KH, D)

        def write(dst, src):
            dst.index_copy_(0, slots, src)
    else:
        bs = kc.shape[3]
        where = (slots // bs, slots % bs)
        kdst = _bytes(kc).permute(0, 3, 1, 2, 4)  # (blocks, B, KH, D / x, x)
        vdst = _bytes(vc).permute(0, 3, 1, 2) if vc.dim() == 4 else None  # (blocks, B, KH, D)
        if vc.dim() == 5:  # aiter's shuffled (blocks, KH, B / x, D, x) as (blocks, B / x, x, KH, D)
            vdst, xw = _bytes(vc).permute(0, 2, 4, 1, 3), vc.shape[4]
            vwhere = (slots // bs, slots % bs // xw, slots % bs % xw)

        def write(dst, src):
            at = vwhere if dst is vdst and vc.dim() == 5 else where
            dst.index_put_(at, src.view(src.shape[0], *dst.shape[len(at):]))

    def kv_write():
        write(kdst, to_cache(k, kc))
        write(vdst, to_cache(v, vc))
        return kc, vc
    if case.op == "kv_write":
        return kv_write

    def rope_cache():
        if case.extra["inplace"]:
            tri_rope.rope_cached_thd_positions_2c_fwd_inplace(q, k, cos, sin, pos, style, True, False)
            q_out, k_out = q, k
        else:
            q_out, k_out = rope(q, k)
        write(kdst, to_cache(k_out, kc))
        write(vdst, to_cache(v, vc))
        return q_out, k_out, kc, vc
    return rope_cache


class _Compiled:
    """torch.compile of each native op (static shapes), compiled on first use."""

    def __getattr__(self, name):
        fn = harness.compile_static(getattr(native, name))
        setattr(self, name, fn)
        return fn


PROVIDERS = {"triton": _fused(tri), "native": _fused(native), "compile": _fused(_Compiled()), "unfused": _unfused}


def _providers(args: argparse.Namespace) -> str:
    """--providers, by default every provider; under --cudagraph the cache ops' reference
    (native, compiled or not) syncs with the host, so it is left out there."""
    syncing = [op for op in args.op if op in CACHE_OPS] if args.cudagraph else []
    if args.providers:
        bad = [p for p in ("native", "compile") if p in args.providers.split(",")]
        if syncing and bad:
            raise SystemExit(f"--cudagraph: {', '.join(bad)} cannot be captured for {', '.join(syncing)} (the "
                             "reference picks the writing tokens with torch.nonzero, a host sync)")
        return args.providers
    names = ["triton", "unfused"] + (["compile"] if harness.ON_GPU else []) + ["native"]
    return ",".join(n for n in names if not (syncing and n in ("native", "compile")))


def make_parser() -> argparse.ArgumentParser:
    p = harness.make_parser(__doc__.splitlines()[0], ("T", "QH", "KH", "D"))
    p.add_argument("-T", dest="M", type=int, nargs="+", help="token counts; -M is the same")
    p.add_argument("--op", nargs="+", default=list(OPS), choices=list(OPS))
    p.add_argument("--layout", nargs="+", default=["flash"], choices=["flash", "paged", "shuffled"],
                   help="KV-cache layout of the cache ops (shuffled: aiter's MLA cache; rope_cache: the classic "
                        "key cache with aiter's 5-D value cache)")
    p.add_argument("--cache-dtype", nargs="+", default=["bf16"], choices=["bf16", "fp8"],
                   help="cache dtype: bf16, or fp8 (the device's e4m3, scaled)")
    p.add_argument("--block-size", type=int, default=16, help="tokens per cache block")
    p.add_argument("--slots", default="blocks", choices=["blocks", "batch", "random"],
                   help="slot_mapping: whole blocks in a random order (a prefill), a batch of prefills (sequences of "
                        "1-2048 tokens, each from the start of a block of its own), or random slots (decode)")
    p.add_argument("--inplace", type=harness.parse_bool, nargs="?", const=True, default=True, metavar="true|false",
                   help="rope_cache writes Q and K in place (default true, as vLLM calls it)")
    return p


def _cases(args: argparse.Namespace, ops: list[str], shapes_of, dtypes: list[torch.dtype]) -> list[harness.Case]:
    """One case per (dtype, op, shape from ``shapes_of(op)``, and for the cache ops layout and cache dtype)."""
    cases, seen = [], set()
    caches = [(layout, kv) for layout in args.layout for kv in args.cache_dtype]
    for dtype in dtypes:
        for op in ops:
            variants = [(layout, kv) for layout, kv in caches
                        if layout != "shuffled" or op in ("mla_cache", "qk_rope_cat_cache", "rope_cache")] \
                if op in CACHE_OPS else [("-", "-")]
            for label, t, hd in shapes_of(op):
                for layout, kv in variants:
                    case = fusion_case(op, label, t, hd, dtype, layout, kv, args)
                    if (op, tuple(case.dims.items()), dtype) not in seen:
                        seen.add((op, tuple(case.dims.items()), dtype))
                        cases.append(case)
    return cases


def main(argv=None):
    args = make_parser().parse_args(argv)
    args.providers = _providers(args)
    dtypes = [harness.DTYPES[d] for d in args.dtype]
    cases = _cases(args, args.op, lambda op: shapes(args, op), dtypes)
    missing = [op for op in args.op if not any(c.op == op for c in cases)]
    if missing and harness.ON_GPU:
        print(f"fusions: no model given has the attention of {', '.join(missing)} (GQA ops: key-value heads; "
              "MLA ops: a latent, e.g. deepseek-v3); skipped")
        if not cases:
            raise SystemExit("fusions: nothing to time")
    gqa, mla = harness.load_models("llama3-8B,deepseek-v3", []).values()

    def tiny_shapes(op):  # Llama-3-8B's 4 / 1 heads a GPU at 8-way tensor parallelism; DeepSeek-V3's 4 MLA heads
        if op in GQA_OPS:   # (32-way: the interpreter runs the MLA matmuls a head at a time, fp4 ones ~2 s a head)
            h, kh, d, r = heads(op, gqa)
            return [("tiny", 5, (h // 8, max(kh // 8, 1), d, r))]
        h, kh, d, r = heads(op, mla)
        return [("tiny", 3, (h // 32, kh, d, r))]
    tiny = _cases(args, args.op, tiny_shapes, dtypes)
    return harness.run(args, "fusions", cases, PROVIDERS, tiny)


if __name__ == "__main__":
    main()
