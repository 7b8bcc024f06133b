"""Valid arguments for every registered op (``aiter_lite.library.OPS``) at a chosen size.

One source of arguments for the checks that run each op the same way: the registry
tests (opcheck, tiny sizes), the CUDA-graph and launch-plan tests, and the host-time
benchmark (decode sizes of real models). Arguments are positional, in the registered
schema's order (the public function's, less an allocating op's output buffers); RoPE ops
rotate NEOX style with the table reused, nope channels last.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

__all__ = ["Dims", "TINY", "decode_dims", "op_args"]


@dataclass(frozen=True)
class Dims:
    """Sizes of one set of arguments. ``tokens`` is the row count of every token-major op;
    ``batch`` the SBHD ops' second dim (their first is ``tokens``)."""

    tokens: int
    hidden: int        # normalization, quantization, softmax rows
    inter: int         # gated activations: input rows of 2 * inter
    heads: int
    kv_heads: int
    head_dim: int
    rope_rows: int     # rows of the cos / sin tables
    batch: int = 1
    experts: int = 16
    topk: int = 2
    groups: int = 4
    topk_group: int = 2
    vocab: int = 40    # topk's row width
    k: int = 5         # topk's k
    group_size: int = 8
    blocks: int = 3
    block_size: int = 4
    kv_lora: int = 16
    rope_dim: int = 8
    softmax_dim: int = -1


# The registry tests' sizes: every op's code path at a few elements.
TINY = Dims(tokens=5, hidden=24, inter=24, heads=4, kv_heads=2, head_dim=16, rope_rows=16, batch=2, softmax_dim=0)


def decode_dims(tokens: int = 1) -> Dims:
    """A decode step of ``tokens`` sequences: llama3-8B's attention and MLP widths, DeepSeek-V3's
    routing (256 experts, top 8 of 8 groups, 4 groups kept) and MLA cache (512 + 64), sampling's
    top-50 over llama3's vocabulary, 128-wide quantization groups."""
    return Dims(tokens=tokens, hidden=4096, inter=14336, heads=32, kv_heads=8, head_dim=128, rope_rows=8192,
                experts=256, topk=8, groups=8, topk_group=4, vocab=128256, k=50, group_size=128,
                blocks=max(64, 2 * tokens), block_size=16, kv_lora=512, rope_dim=64)


class _Make:
    """Random tensors on one device: activations in ``dtype``, quantized outputs in ``qdtype``."""

    def __init__(self, dims: Dims, device, dtype, qdtype):
        self.d, self.device, self.dtype, self.qdtype = dims, torch.device(device), dtype, qdtype

    def r(self, *shape, dtype=None):
        return torch.randn(*shape, device=self.device, dtype=dtype or self.dtype)

    def w(self, n, dtype=None):
        """A weight or bias vector, in the activations' dtype."""
        return torch.randn(n, device=self.device, dtype=dtype or self.dtype)

    def e(self, *shape, dtype=None):
        return torch.empty(*shape, device=self.device, dtype=dtype or self.dtype)

    def f32(self, *shape):
        return torch.empty(*shape, device=self.device)

    def q(self, *shape):
        return torch.empty(*shape, device=self.device, dtype=self.qdtype)

    def i(self, hi, *shape):
        return torch.randint(0, hi, shape, device=self.device)

    def scale(self):
        return torch.tensor([0.05], device=self.device)

    def tab(self, f, sbhd=False):
        """cos, sin tables of ``rope_rows`` rows and ``f`` columns: (rows, f), or (rows, 1, 1, f)."""
        a = torch.rand(self.d.rope_rows, f, device=self.device) * 6
        cos, sin = torch.cos(a).to(self.dtype), torch.sin(a).to(self.dtype)
        return (cos.view(-1, 1, 1, f), sin.view(-1, 1, 1, f)) if sbhd else (cos, sin)

    def slots(self, n_slots):
        """A slot per token, distinct, one of them -1 (a padding token) when there are several."""
        s = torch.randperm(n_slots, device=self.device)[: self.d.tokens]
        if s.numel() > 1:
            s[s.numel() // 2] = -1
        return s


_ROPE_TAIL = (0, True, False, False)  # NEOX, reuse the table, nope last, no transposed output


def _rope(m: _Make, name: str) -> tuple:
    d = m.d
    f = d.head_dim // 2
    if name.startswith("rope_fwd_2d") or name == "rope_bwd_2d":
        height, width = 3, 2
        ch, sh = m.tab(d.head_dim // 4)
        cw, sw = m.tab(d.head_dim // 4)
        return (m.r(d.tokens, height * width, d.heads, d.head_dim), ch, sh, cw, sw, height, width, *_ROPE_TAIL)
    if name.startswith("rope_thd"):
        t = d.tokens
        cu = torch.tensor([0, t // 2, t] if t > 1 else [0, t], device=m.device, dtype=torch.int32)
        return (m.r(t, d.heads, d.head_dim), cu, torch.rand(d.rope_rows, 1, 1, f, device=m.device) * 6, *_ROPE_TAIL)
    if name.startswith("rope_cached_thd"):
        xs = (m.r(d.tokens, d.heads, d.head_dim), m.r(d.tokens, d.kv_heads, d.head_dim), *m.tab(f),
              m.i(d.rope_rows // 2, d.tokens))
        return (*xs, m.i(d.rope_rows // 2, d.tokens), *_ROPE_TAIL) if "offsets" in name else (*xs, *_ROPE_TAIL)
    if name.startswith("rope_cached"):
        xs = (m.r(d.tokens, d.batch, d.heads, d.head_dim), *m.tab(f, sbhd=True))
        if "positions" in name:
            xs = (*xs, m.i(d.rope_rows // 2, d.tokens, d.batch))
        if "offsets" in name:
            xs = (*xs, m.i(d.rope_rows // 2, d.tokens, d.batch))
        return (*xs, *_ROPE_TAIL)
    return (m.r(d.tokens, d.batch, d.heads, d.head_dim), torch.rand(d.rope_rows, 1, 1, f, device=m.device) * 6,
            *_ROPE_TAIL)


def _norm_quant(m: _Make, name: str) -> tuple:
    t, n = m.d.tokens, m.d.hidden
    x, w = m.r(t, n), m.w(n)
    q, ys = m.q(t, n), m.f32(t, 1)
    smooth = m.w(n, torch.float32).abs() + 0.5
    if name == "rms_norm_static_fp8_quant":
        return (q, x, w, m.scale(), 1e-6)
    if name == "fused_add_rms_norm_static_fp8_quant":
        return (q, x, m.r(t, n), w, m.scale(), 1e-6)
    if name == "rms_norm_dynamic_per_token_quant":
        return (q, x, w, ys, 1e-6, None, m.r(t, n))
    rms = name.startswith("rms")
    tail = (w, 1e-6) if rms else (w, m.w(n), 1e-5)
    add = (m.r(t, n), m.e(t, n)) if "_add_" in name else ()
    mid = (smooth, ys) if name.endswith("smoothquant") else (ys,)
    return (q, x, *add, *mid, *tail)


def _cache(m: _Make) -> tuple:
    d = m.d
    cos, sin = m.tab(d.head_dim // 2)
    q, k, v = (m.r(d.tokens, h, d.head_dim) for h in (d.heads, d.kv_heads, d.kv_heads))
    caches = (torch.zeros(d.blocks, d.block_size, d.kv_heads, d.head_dim, device=m.device, dtype=m.dtype)
              for _ in range(2))
    return (q, k, v, *caches, m.slots(d.blocks * d.block_size), m.i(d.rope_rows, d.tokens), cos, sin, None, None,
            True, True, False, None, m.e(d.tokens, d.heads, d.head_dim), m.e(d.tokens, d.kv_heads, d.head_dim), False,
            None)


def _bmm_mla(m: _Make, fp8: bool) -> tuple:
    """MLA's absorbed query: q_nope (H, T, P = head_dim) times W_UK (H, kv_lora, P), then the
    RoPE / cache side as fused_qk_rope_cat_and_cache_mla's call; fp8 weights in the quantized
    dtype (e5m2 where that is int8), groups of up to 128 channels."""
    d, t = m.d, m.d.tokens
    p = d.head_dim
    q_dtype = m.dtype if fp8 or m.dtype != torch.float32 else torch.bfloat16  # the bf16 form: 16-bit only
    w_dtype = (m.qdtype if m.qdtype.is_floating_point else torch.float8_e5m2) if fp8 else q_dtype
    w = (m.r(d.heads, d.kv_lora, p) * p ** -0.5).to(w_dtype)
    rest = (m.r(t, d.heads, d.rope_dim), m.r(t, 1, d.kv_lora), m.r(t, 1, d.rope_dim),
            torch.zeros(d.blocks * d.block_size, 1, d.kv_lora + d.rope_dim, device=m.device, dtype=m.dtype),
            m.slots(d.blocks * d.block_size), m.i(d.rope_rows, t), *m.tab(d.rope_dim // 2))
    q = m.r(d.heads, t, p).to(q_dtype)
    if fp8:
        return (q, w, m.f32(1), *rest, min(128, p), True, None, False, m.dtype, min(t, 1))
    return (q, w, *rest, None, False, m.dtype, min(t, 1))


def _bmm_mla_fp4(m: _Make) -> tuple:
    """The fp4 form: random packed e2m1 weights (H, kv_lora, P / 2) with e8m0 scales near 1
    (H, kv_lora, P / 32), q quantized to MXFP4 in the kernel (prequant)."""
    d, t = m.d, m.d.tokens
    p = d.head_dim
    w = torch.randint(0, 256, (d.heads, d.kv_lora, p // 2), device=m.device, dtype=torch.uint8)
    ws = torch.randint(120, 128, (d.heads, d.kv_lora, -(-p // 32)), device=m.device, dtype=torch.uint8)
    rest = _bmm_mla(m, False)[2:10]  # q_pe .. sin: the bf16 form's
    # (the registered op's arguments: aiter's config, a tuning string, left out)
    return (m.r(d.heads, t, p), w, ws, *rest, None, True, True, None, None, False, None, min(t, 1))


def _swa_write(m: _Make) -> tuple:
    """A DeepSeek-V4-style call: two split-K slices of Q, the window cache written (the registered
    op's arguments: q_out, an output buffer, left out)."""
    d, t = m.d, m.d.tokens
    hd = d.head_dim
    r = min(64, hd)
    cos, sin = m.tab(r // 2)
    # each token a sequence of its own (a decode step): no two tokens share a window entry, whose
    # value would then depend on which program writes last
    return (m.r(2, t, d.heads * hd), m.r(t, hd), m.w(hd), m.w(hd), 1e-6, 1e-6, r, cos, sin, m.i(d.rope_rows, t),
            False, torch.arange(t, device=m.device, dtype=torch.int32),
            torch.arange(t, device=m.device, dtype=torch.int32),
            torch.randperm(max(t, 1), device=m.device).to(torch.int32),
            torch.zeros(max(t, 1), 16, hd, device=m.device, dtype=m.dtype), 16, m.dtype)


def _rope_3d(m: _Make) -> tuple:
    """Wan's call: one video of the tokens' count as a 1 x 1 x T grid, a complex table."""
    d = m.d
    rows = max(d.tokens, 1)
    freqs = torch.polar(torch.ones(rows, d.head_dim // 2, device=m.device),
                        torch.zeros(rows, d.head_dim // 2, device=m.device).uniform_(-3, 3))
    return (m.r(1, d.tokens, d.heads, d.head_dim), torch.tensor([[1, 1, d.tokens]], device=m.device), freqs, 1, 0)


def _cosine_cache(m: _Make) -> tuple:
    """A per-sequence cache: a row a token, slot_mapping its offset in the row."""
    d = m.d
    cos, sin = m.tab(d.head_dim // 2)
    q, k, v = (m.r(d.tokens, h, d.head_dim) for h in (d.heads, d.kv_heads, d.kv_heads))
    caches = (torch.zeros(max(d.tokens, 1), d.block_size, d.kv_heads, d.head_dim, device=m.device, dtype=m.dtype)
              for _ in range(2))
    return (q, k, v, *caches, m.slots(d.block_size), m.i(d.rope_rows, d.tokens), cos, sin, None, None, True, True,
            False, None, m.e(d.tokens, d.heads, d.head_dim))


def _qk_norm_cache(m: _Make, gated: bool = True) -> tuple:
    """Qwen3-Next's call: gates interleaved with Q, an HND cache."""
    d = m.d
    qkv = m.r(d.tokens, (d.heads * (2 if gated else 1) + 2 * d.kv_heads) * d.head_dim)
    caches = (torch.zeros(d.blocks, d.kv_heads, d.block_size, d.head_dim, device=m.device, dtype=m.dtype)
              for _ in range(2))
    return (qkv, m.w(d.head_dim), m.w(d.head_dim), *m.tab(d.head_dim // 2), m.i(d.rope_rows, d.tokens), *caches,
            m.slots(d.blocks * d.block_size), d.heads, d.kv_heads, d.head_dim, True, None, True, gated, None, None,
            1e-6, "interleaved", "HND")


def _routing(m: "_Make", t: int) -> tuple:
    d = m.d
    return (torch.rand(t, d.topk, device=m.device, dtype=m.dtype),
            torch.rand(t, d.experts, device=m.device).argsort(1)[:, :d.topk].int().contiguous(), d.experts, None)


def op_args(name: str, dims: Dims = TINY, device="cpu", dtype=torch.float32, qdtype=torch.int8) -> tuple:
    """Fresh random arguments for ``torch.ops.aiter_lite.<name>`` (and the Triton function
    behind it) of ``dims``' sizes; quantized outputs are ``qdtype`` (int8: opcheck compares
    written arguments with arithmetic fp8 lacks)."""
    m = _Make(dims, device, dtype, qdtype)
    d = m.d
    t, n, g = d.tokens, d.hidden, d.group_size
    x, gated = m.r(t, n), m.r(t, 2 * d.inter)
    if name in ("silu_and_mul", "gelu_and_mul", "gelu_tanh_and_mul"):
        return (m.e(t, d.inter), gated)
    pe_half = d.rope_dim // 2
    table = {
        "act_and_mul": lambda: (m.e(t, d.inter), gated, "gelu_tanh"),
        "fused_silu_mul": lambda: (gated,),
        "act_mul": lambda: (m.r(t, d.inter), m.r(t, d.inter), "gelu_tanh"),
        "silu": lambda: (x,), "relu": lambda: (x,), "gelu": lambda: (x, "tanh"),
        "act_and_mul_rounded": lambda: (m.e(t, d.inter), gated, "silu", False),
        "fatrelu_and_mul": lambda: (m.e(t, d.inter), gated, 0.25),
        "swigluoai_and_mul": lambda: (m.e(t, d.inter), gated, 1.702, 7.0),
        "gelu_new": lambda: (x,), "gelu_fast": lambda: (x,), "gelu_quick": lambda: (x,),
        "rms_norm": lambda: (x, m.w(n), 1e-6, 0.0),
        "rmsnorm_forward_inference": lambda: (x, m.w(n), 1e-6),
        "rmsnorm2d_fwd_with_add": lambda: (m.e(t, n), x, m.r(t, n), m.e(t, n), m.w(n), 1e-6, 0.0),
        "fused_add_rms_norm": lambda: (x, m.r(t, n), m.w(n), 1e-6, 0.0),
        "rmsnorm_pad": lambda: (x, m.w(n), 1e-6, 16),
        "add_rmsnorm_pad": lambda: (x, m.w(n), 1e-6, m.r(t, n), 16),
        "layer_norm": lambda: (x, m.w(n), m.w(n), 1e-5, None, 0.0),
        "layernorm2d_fwd_with_add": lambda: (m.e(t, n), x, m.r(t, n), m.e(t, n), m.w(n), m.w(n), 1e-5),
        "softmax": lambda: (m.r(t, d.vocab), -1), "log_softmax": lambda: (m.r(t, d.vocab), d.softmax_dim),
        "cross_entropy": lambda: (m.r(t, d.vocab), m.i(d.vocab, t), -100, "mean", 0.0, None),
        "fused_linear_cross_entropy": lambda: (m.r(t, n), m.r(d.vocab, n) * n ** -0.5, m.i(d.vocab, t), None, -100,
                                               "mean", 0.0, None, None),
        "topk": lambda: (m.r(t, d.vocab), d.k, -1, True, True),
        # sampling's deterministic forms: one top_k / top_p a row
        "top_k_renorm_probs": lambda: (torch.softmax(m.r(t, d.vocab, dtype=torch.float32) * 3, -1),
                                       torch.randint(1, d.k + 1, (t,), device=m.device, dtype=torch.int32)),
        "top_p_renorm_probs": lambda: (torch.softmax(m.r(t, d.vocab, dtype=torch.float32) * 3, -1),
                                       torch.rand(t, device=m.device) * 0.9 + 0.05),
        "top_k_mask_logits": lambda: (m.r(t, d.vocab), torch.randint(1, d.k + 1, (t,), device=m.device,
                                                                     dtype=torch.int32)),
        # (top-k alone: top-k with top-p lists and sorts each row, slow through the interpreter)
        "sampling_from_uniform": lambda: (torch.softmax(m.r(t, d.vocab, dtype=torch.float32) * 3, -1),
                                          torch.rand(t, device=m.device),
                                          torch.randint(1, d.k + 1, (t,), device=m.device, dtype=torch.int32),
                                          None, None, None, None, False, False),
        "moe_topk_softmax": lambda: (m.r(t, d.experts), d.topk, True),
        "topk_softmax": lambda: (m.f32(t, d.topk), m.e(t, d.topk, dtype=torch.int32), m.e(t, d.topk, dtype=torch.int32),
                                 m.r(t, d.experts), True, 0, ""),
        "topk_sigmoid": lambda: (m.f32(t, d.topk), m.e(t, d.topk, dtype=torch.int32), m.r(t, d.experts)),
        "grouped_topk": lambda: (m.r(t, d.experts), m.f32(t, d.topk), m.e(t, d.topk, dtype=torch.int32), d.groups,
                                 d.topk_group, True, False, 2.0),
        "biased_grouped_topk": lambda: (m.r(t, d.experts), m.w(d.experts), m.f32(t, d.topk),
                                        m.e(t, d.topk, dtype=torch.int32), d.groups, d.topk_group, True, 2.5),
        "moe_grouped_topk": lambda: (m.r(t, d.experts), d.topk, d.groups, d.topk_group, True, "sigmoid", 2.0),
        "moe_biased_grouped_topk": lambda: (m.r(t, d.experts), m.w(d.experts), d.topk, d.groups, d.topk_group, True,
                                        2.5),
        "moe_routing": lambda: (m.r(t, d.experts), d.topk, "softmax", True, d.groups, d.topk_group, m.w(d.experts),
                                1.5),
        "routing_sigmoid_top1": lambda: (x, m.r(n, d.experts) * n ** -0.5, 1, True),
        "static_per_tensor_quant_fp8_i8": lambda: (m.q(t, n), x, m.scale()),
        "dynamic_per_tensor_quant_fp8_i8": lambda: (m.q(t, n), x, m.f32(1)),
        "dynamic_per_token_quant_fp8_i8": lambda: (m.q(t, n), x, m.f32(t, 1), None),
        "per_token_group_quant": lambda: (m.q(t, n), x, m.f32(t, n // g), g, 1e-10),
        "static_per_tensor_int8_azp_quant": lambda: (m.e(t, n, dtype=torch.int8), x, m.scale(),
                                                     torch.tensor([3], device=m.device, dtype=torch.int32)),
        "dynamic_per_token_int8_azp_quant": lambda: (m.e(t, n, dtype=torch.int8), x, m.f32(t, 1),
                                                     m.e(t, 1, dtype=torch.int32)),
        "scaled_fp8_quant": lambda: (x, None, None, True, None),
        "per_token_group_quant_fp8": lambda: (x, g, 1e-10, None, True),
        "per_token_group_quant_int8": lambda: (x, g, 1e-10, torch.int8),
        "act_mul_and_fp8_group_quant": lambda: (gated, "silu", g, None, False),
        "act_mul_and_fp8_quant": lambda: (gated, "gelu", m.scale(), None, None),
        "silu_and_mul_quant": lambda: (m.q(t, d.inter), gated, m.scale()),
        # MX / NV block formats (fp8 values in e5m2 where the quantized dtype is int8)
        "dynamic_mxfp4_quant": lambda: (x, "even"),
        "dynamic_mxfp8_quant": lambda: (x, m.qdtype if m.qdtype.is_floating_point else torch.float8_e5m2),
        "dynamic_nvfp4_quant": lambda: (x, torch.full((1,), 336.0, device=m.device)),
        "act_mul_and_mxfp4_quant": lambda: (gated, "silu", "even", True, False),
        "fused_rms_mxfp4_quant": lambda: (x, m.w(n), 1e-6, m.r(t, 16), m.w(16), 1e-5, m.r(t, n), True, False, True,
                                          "auto"),
        "fused_flatten_mxfp4_quant": lambda: (m.r(t, d.heads, d.kv_lora),),
        "fused_rms_mxfp8_quant": lambda: (x, m.w(n), 1e-6),
        "fused_flatten_mxfp8_quant": lambda: (m.r(t, d.heads, d.kv_lora),
                                              m.qdtype if m.qdtype.is_floating_point else torch.float8_e5m2),
        "fused_rms_fp8_group_quant": lambda: (x, m.w(n), 1e-6, m.r(t, 16), m.w(16), 1e-5, g, m.qdtype, m.r(t, n),
                                              True, True, False),
        "fused_rms_fp8_per_tensor_static_quant": lambda: (x, m.w(n), 1e-6, m.scale(), m.r(t, 16), m.w(16), 1e-5,
                                                          m.qdtype, m.r(t, n), True, False),
        "fused_reduce_rms_fp8_group_quant": lambda: (m.r(2, t, n), m.w(n), 1e-6, m.r(2, t, 16), m.w(16), 1e-5,
                                                     m.r(2, t, 8), g, m.qdtype, None, m.r(t, n), True, True, False),
        "fused_reduce_act_mul_fp8_group_quant": lambda: (m.r(2, t, 2 * d.inter), "silu", m.r(2, t, 8), g, m.qdtype,
                                                         m.dtype),
        "fused_rms_gated_fp8_group_quant": lambda: (x, m.w(n), m.w(n), m.r(t, n), 1e-6, True, False, "silu",
                                                    m.qdtype, None, None, None, g),
        "fused_flatten_fp8_group_quant": lambda: (m.r(t, 3, n // 3), g, m.qdtype, True),
        "fused_silu_mul_fp8_per_tensor_static_quant": lambda: (gated, m.scale(), m.qdtype, False),
        "fused_routing_from_topk": lambda: _routing(m, min(t, 8192 // d.topk)),  # one program's pairs at most
        "fused_mul_add": lambda: (m.r(t, n), m.r(t, n), m.f32(1), None),
        "fused_clamp_act_mul": lambda: (gated, None, None, 7.0, "silu", m.f32(t, 1), m.qdtype, True, g, "fp32",
                                        False, None),
        "fused_qkv_split_qk_rope": lambda: (m.r(t, (d.heads + 2 * d.kv_heads) * d.head_dim), *m.tab(d.head_dim // 2),
                                            m.i(d.rope_rows, t), d.heads, d.kv_heads, d.head_dim),
        "fused_qk_rope_reshape_and_cache": lambda: _cache(m),
        "fused_qkv_split_qk_norm_rope_cache": lambda: _qk_norm_cache(m),
        "fused_qk_rope_cosine_cache_llama": lambda: _cosine_cache(m),
        "rope_fwd_3d": lambda: _rope_3d(m),
        "fused_reduce_qk_norm_rope_swa_write": lambda: _swa_write(m),
        "fused_fp8_bmm_rope_cat_and_cache_mla": lambda: _bmm_mla(m, True),
        "fused_bf16_bmm_rope_cat_and_cache_mla": lambda: _bmm_mla(m, False),
        "fused_fp4_bmm_rope_cat_and_cache_mla": lambda: _bmm_mla_fp4(m),
        "fused_qk_cat": lambda: (m.r(t, d.heads, d.kv_lora), m.r(t, d.heads, d.rope_dim), m.r(t, 1, d.kv_lora),
                                 m.r(t, 1, d.rope_dim)),
        "fused_qk_rope_cat": lambda: (m.r(t, d.heads, d.kv_lora), m.r(t, d.heads, d.rope_dim), m.r(t, 1, d.kv_lora),
                                      m.r(t, 1, d.rope_dim), m.i(d.rope_rows, t), *m.tab(pe_half), False),
        "fused_qk_rope_cat_and_cache_mla": lambda: (
            m.r(t, d.heads, d.kv_lora), m.r(t, d.heads, d.rope_dim), m.r(t, 1, d.kv_lora), m.r(t, 1, d.rope_dim),
            torch.zeros(d.blocks * d.block_size, 1, d.kv_lora + d.rope_dim, device=m.device, dtype=m.dtype),
            m.slots(d.blocks * d.block_size), m.i(d.rope_rows, t), *m.tab(pe_half), None, True, min(t, 1), True,
            None, False, False),
        "cat_and_cache_mla": lambda: (m.r(t, 1, d.kv_lora), m.r(t, 1, d.rope_dim),
                                      torch.zeros(d.blocks * d.block_size, 1, d.kv_lora + d.rope_dim,
                                                  device=m.device, dtype=m.dtype),
                                      m.slots(d.blocks * d.block_size), None, True),
        "kv_cache_write": lambda: (*m.r(t, 3, d.kv_heads, d.head_dim).unbind(1)[1:],  # views of a qkv tensor
                                   *(torch.zeros(d.blocks, d.block_size, d.kv_heads, d.head_dim, device=m.device,
                                                 dtype=m.dtype) for _ in range(2)),
                                   m.slots(d.blocks * d.block_size), m.scale(), m.scale(), True),
        "convert_kv_cache": lambda: (
            torch.empty(d.blocks, d.block_size, d.kv_heads, d.head_dim, device=m.device,
                        dtype=m.qdtype if m.qdtype.is_floating_point else torch.float8_e5m2),
            m.r(d.blocks, d.block_size, d.kv_heads, d.head_dim), 0.5),
    }
    if name in table:
        return table[name]()
    if "quant" in name:
        return _norm_quant(m, name)
    if name.startswith("rope"):
        return _rope(m, name)
    raise KeyError(f"op_args: no arguments for op {name!r}")
