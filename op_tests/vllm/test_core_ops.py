"""aiter_lite.vllm.ops' norm, rotary and routing ops against references written from vLLM's
semantics (its RMSNorm / RotaryEmbedding forward_native and fused_moe's routing in torch)."""

from __future__ import annotations

import pytest
import torch

from aiter_lite.vllm import ops
from op_tests.utils import DEVICE, DTYPES, assert_close, poisoned

EPS = 1e-6


def _rms_ref(x, w, eps):
    """vLLM's RMSNorm.forward_native: fp32 statistics, x * rstd back in the dtype, then weight."""
    xf = x.float()
    y = (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype)
    return y if w is None else y * w


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("m,n", [(0, 64), (1, 64), (7, 127), (33, 1000)])
@pytest.mark.parametrize("weighted", [True, False])
def test_rms_norm_into_out(dtype, m, n, weighted):
    x = torch.randn(m, 2 * n, device=DEVICE, dtype=dtype)[:, :n]  # strided rows
    w = torch.randn(n, device=DEVICE, dtype=dtype) if weighted else None
    out = poisoned((m, n), dtype)
    assert ops.rms_norm(out, x, w, EPS) is None
    assert_close(out, _rms_ref(x, w, EPS), name="out", atol=2e-2, rtol=2e-2)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(1, 64), (5, 3, 96), (17, 255)])
def test_fused_add_rms_norm_in_place(dtype, shape):
    x = torch.randn(shape, device=DEVICE, dtype=dtype)
    r = torch.randn(shape, device=DEVICE, dtype=dtype)
    w = torch.randn(shape[-1], device=DEVICE, dtype=dtype)
    s = (x.float() + r.float()).to(dtype)
    want = _rms_ref(s, w, EPS)
    x2, r2 = x.clone(), r.clone()
    assert ops.fused_add_rms_norm(x2, r2, w, EPS) is None
    assert_close(r2, s, name="residual")
    assert_close(x2, want, name="input", atol=2e-2, rtol=2e-2)


def test_norms_refuse_bad_arguments_and_gradients():
    x = torch.randn(4, 8, device=DEVICE)
    with pytest.raises(ValueError, match="rms_norm: out must have input's shape"):
        ops.rms_norm(torch.empty(4, 9, device=DEVICE), x, None, EPS)
    with pytest.raises(ValueError, match="rms_norm: weight must have shape"):
        ops.rms_norm(torch.empty_like(x), x, torch.ones(7, device=DEVICE), EPS)
    with pytest.raises(RuntimeError, match="fused_add_rms_norm: input requires grad"):
        ops.fused_add_rms_norm(x.clone().requires_grad_(), torch.randn_like(x), None, EPS)


def _cos_sin_cache(rows, rot, dtype):
    inv = 1.0 / (10000 ** (torch.arange(0, rot, 2, dtype=torch.float64) / rot))
    f = torch.arange(rows, dtype=torch.float64)[:, None] * inv[None, :]
    return torch.cat((f.cos(), f.sin()), -1).to(dtype).to(DEVICE)


def _rope_ref(pos, x, head_size, cache, is_neox, offset, inverse):
    """vLLM's rotary forward_native on (tokens, heads, head_size), in fp32."""
    rot = cache.shape[1]
    cos, sin = cache[pos.reshape(-1).long()].float().chunk(2, -1)
    cos, sin = cos[:, None, :], (-1 if inverse else 1) * sin[:, None, :]
    y = x.float().clone()
    part = y[..., offset:offset + rot]
    if is_neox:
        a, b = part[..., :rot // 2].clone(), part[..., rot // 2:].clone()
        part[..., :rot // 2], part[..., rot // 2:] = a * cos - b * sin, b * cos + a * sin
    else:
        a, b = part[..., 0::2].clone(), part[..., 1::2].clone()
        part[..., 0::2], part[..., 1::2] = a * cos - b * sin, b * cos + a * sin
    return y.to(x.dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("is_neox", [True, False])
@pytest.mark.parametrize("head_size,rot,offset", [(64, 64, 0), (80, 32, 0), (96, 64, 16)])
@pytest.mark.parametrize("with_key", [True, False])
def test_rotary_embedding_in_place(dtype, is_neox, head_size, rot, offset, with_key):
    t, qh, kh = 7, 4, 2
    pos = torch.randint(0, 64, (t,), device=DEVICE)
    cache = _cos_sin_cache(64, rot, dtype if dtype != torch.float32 else torch.float32)
    q = torch.randn(t, qh * head_size, device=DEVICE, dtype=dtype)
    k = torch.randn(t, kh, head_size, device=DEVICE, dtype=dtype)
    want_q = _rope_ref(pos, q.view(t, qh, head_size), head_size, cache, is_neox, offset, False).view(t, -1)
    want_k = _rope_ref(pos, k, head_size, cache, is_neox, offset, False)
    q2, k2 = q.clone(), k.clone()
    ops.rotary_embedding(pos, q2, k2 if with_key else None, head_size, cache, is_neox, offset)
    assert_close(q2, want_q, name="query", atol=2e-2, rtol=2e-2)
    assert_close(k2, want_k if with_key else k, name="key", atol=2e-2, rtol=2e-2)
    ops.rotary_embedding(pos, q2, k2 if with_key else None, head_size, cache, is_neox, offset, inverse=True)
    assert_close(q2, q, name="query turned back", atol=4e-2, rtol=4e-2)


def test_rotary_embedding_batch_seq_layout_and_errors():
    b, s, h, d = 2, 3, 2, 32
    pos = torch.randint(0, 16, (b, s), device=DEVICE)
    cache = _cos_sin_cache(16, d, torch.float32)
    q = torch.randn(b, s, h * d, device=DEVICE)
    want = _rope_ref(pos, q.view(b * s, h, d), d, cache, True, 0, False).view(b, s, -1)
    ops.rotary_embedding(pos, q, None, d, cache, True)
    assert_close(q, want, name="query")
    with pytest.raises(ValueError, match="rotary_embedding: rope_dim_offset \\+ rot_dim"):
        ops.rotary_embedding(pos, q, None, d, cache, True, 8)
    with pytest.raises(ValueError, match="rotary_embedding: query must be"):
        ops.rotary_embedding(pos, q[..., :40], None, d, cache, True)


def _route_ref(logits, k, renorm, bias, sigmoid, scale=1.0):
    p = logits.float().sigmoid() if sigmoid else logits.float().softmax(-1)
    key = p if bias is None else p + bias.float()
    ids = key.topk(k, -1).indices
    w = p.gather(1, ids)
    if renorm:
        w = w / w.sum(-1, keepdim=True)
    return w * scale, ids


def _same_choice(w, ids, want_w, want_ids):
    order, want_order = ids.long().sort(-1), want_ids.sort(-1)
    assert torch.equal(order.values.cpu(), want_order.values.cpu()), "topk_ids"
    assert_close(w.gather(1, order.indices), want_w.gather(1, want_order.indices), name="topk_weights",
                 atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("sigmoid", [False, True])
@pytest.mark.parametrize("renorm", [False, True])
@pytest.mark.parametrize("biased", [False, True])
@pytest.mark.parametrize("dtype", DTYPES)
def test_topk_softmax_and_sigmoid_into_outputs(sigmoid, renorm, biased, dtype):
    t, e, k = 9, 16, 3
    logits = torch.randn(t, e, device=DEVICE, dtype=dtype)
    bias = torch.randn(e, device=DEVICE) * 0.1 if biased else None
    w, ids, tei = poisoned((t, k), torch.float32), torch.full((t, k), -1, device=DEVICE, dtype=torch.int32), \
        torch.full((t, k), -1, device=DEVICE, dtype=torch.int32)
    if sigmoid:
        ops.topk_sigmoid(w, ids, tei, logits, renorm, bias, 2.5)
    else:
        ops.topk_softmax(w, ids, tei, logits, renorm, bias)
    _same_choice(w, ids, *_route_ref(logits, k, renorm, bias, sigmoid, 2.5 if sigmoid else 1.0))
    want_tei = torch.arange(k, device=DEVICE)[None, :] * t + torch.arange(t, device=DEVICE)[:, None]
    assert torch.equal(tei.long().cpu(), want_tei.cpu()), "token_expert_indices"


def _grouped_ref(scores, groups, topk_group, k, renorm, scale, bias, sigmoid):
    s = scores.float().sigmoid() if sigmoid else scores.float()
    key = s + bias.float()
    t, e = s.shape
    group_scores = key.view(t, groups, -1).topk(2, -1).values.sum(-1)
    keep = torch.zeros(t, groups, device=s.device, dtype=torch.bool)
    keep.scatter_(1, group_scores.topk(topk_group, -1).indices, True)
    key = key.masked_fill(~keep.repeat_interleave(e // groups, 1), float("-inf"))
    ids = key.topk(k, -1).indices
    w = s.gather(1, ids)
    if renorm:
        w = w / w.sum(-1, keepdim=True)
    return w * scale, ids


@pytest.mark.parametrize("scoring_func", [0, 1])
@pytest.mark.parametrize("renorm", [False, True])
def test_grouped_topk_returns_weights_and_ids(scoring_func, renorm):
    t, e, groups, topk_group, k = 6, 32, 8, 3, 4
    scores = torch.randn(t, e, device=DEVICE)
    if scoring_func == 0:
        scores = scores.sigmoid()
    bias = torch.randn(e, device=DEVICE) * 0.1
    w, ids = ops.grouped_topk(scores, groups, topk_group, k, renorm, 1.5, bias, scoring_func)
    assert w.dtype == torch.float32 and ids.dtype == torch.int32 and w.shape == (t, k)
    _same_choice(w, ids, *_grouped_ref(scores, groups, topk_group, k, renorm, 1.5, bias, scoring_func == 1))


def test_routing_refuses_bad_arguments():
    logits = torch.randn(3, 8, device=DEVICE)
    w, ids, tei = (torch.empty(3, 2, device=DEVICE), torch.empty(3, 2, device=DEVICE, dtype=torch.int32),
                   torch.empty(3, 2, device=DEVICE, dtype=torch.int32))
    with pytest.raises(TypeError, match="topk_softmax: renormalize"):
        ops.topk_softmax(w, ids, tei, logits, "yes")
    with pytest.raises(ValueError, match="topk_sigmoid: e_score_correction_bias must have shape"):
        ops.topk_sigmoid(w, ids, tei, logits, False, torch.zeros(7, device=DEVICE))
    with pytest.raises(ValueError, match="topk_softmax: is_padding"):
        ops.topk_softmax(w, ids, tei, logits, False, None, torch.zeros(3, device=DEVICE, dtype=torch.bool))
    with pytest.raises(ValueError, match="grouped_topk: scoring_func"):
        ops.grouped_topk(logits, 2, 1, 2, False, 1.0, torch.zeros(8, device=DEVICE), 2)


BACKEND = "inductor" if DEVICE != "cpu" else "aot_eager"


def test_ops_compile_whole():
    """The vLLM forms trace through this project's registered launchers: no graph break."""
    x = torch.randn(5, 64, device=DEVICE)
    w = torch.randn(64, device=DEVICE)
    pos = torch.randint(0, 16, (5,), device=DEVICE)
    cache = _cos_sin_cache(16, 32, torch.float32)
    logits = torch.randn(5, 16, device=DEVICE)

    def step(x, w, pos, q, k, logits):
        out = torch.empty_like(x)
        ops.rms_norm(out, x, w, EPS)
        ops.rotary_embedding(pos, q, k, 32, cache, True)
        tw = torch.empty(5, 2, device=x.device)
        ids = torch.empty(5, 2, device=x.device, dtype=torch.int32)
        ops.topk_softmax(tw, ids, torch.empty_like(ids), logits, True)
        return out, q, k, tw, ids

    q, k = torch.randn(5, 2 * 32, device=DEVICE), torch.randn(5, 32, device=DEVICE)
    torch._dynamo.reset()
    got = torch.compile(step, backend=BACKEND, fullgraph=True)(x, w, pos, q.clone(), k.clone(), logits)
    want = step(x, w, pos, q.clone(), k.clone(), logits)
    for g, e in zip(got, want):
        assert torch.equal(g, e)
