"""aiter_lite.vllm's RMSNorm / GemmaRMSNorm / RotaryEmbedding / get_rope: vLLM's constructors,
the kernels' path (forward, forward_cuda) against vLLM's reference (forward_native), which
leaves its inputs as they are."""

from __future__ import annotations

import pytest
import torch

from aiter_lite.vllm.model_executor.layers.layernorm import GemmaRMSNorm, RMSNorm
from aiter_lite.vllm.model_executor.layers.rotary_embedding import RotaryEmbedding, get_rope
from op_tests.utils import DEVICE, DTYPES, assert_close

TOL = {"atol": 2e-2, "rtol": 2e-2}


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("residual", [False, True])
@pytest.mark.parametrize("shape", [(1, 64), (7, 3, 96)])
def test_rms_norm_layer(dtype, residual, shape):
    layer = RMSNorm(shape[-1], eps=1e-5, dtype=dtype).to(DEVICE)
    with torch.no_grad():
        layer.weight.copy_(torch.randn(shape[-1], dtype=dtype))
    x = torch.randn(shape, device=DEVICE, dtype=dtype)
    r = torch.randn(shape, device=DEVICE, dtype=dtype) if residual else None
    x0, r0 = x.clone(), None if r is None else r.clone()
    with torch.no_grad():
        want = layer.forward_native(x, r)
        assert torch.equal(x, x0) and (r is None or torch.equal(r, r0)), "forward_native wrote its inputs"
        got = layer(x, r)
    if residual:
        assert got[0] is x and got[1] is r  # vLLM's in-place fused add
        assert_close(got[1], want[1], name="residual")
        assert_close(got[0], want[0], name="x", **TOL)
    else:
        assert_close(got, want, name="x", **TOL)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("residual", [False, True])
def test_gemma_rms_norm_layer(dtype, residual):
    layer = GemmaRMSNorm(80, eps=1e-6).to(DEVICE)
    with torch.no_grad():
        layer.weight.copy_(torch.randn(80) * 0.1)
    x = torch.randn(5, 80, device=DEVICE, dtype=dtype)
    r = torch.randn(5, 80, device=DEVICE, dtype=dtype) if residual else None
    with torch.no_grad():
        want, got = layer.forward_native(x, r), layer(x, r)
    if residual:
        assert_close(got[1], want[1], name="residual", **TOL)
        assert_close(got[0], want[0], name="x", **TOL)
    else:
        assert_close(got, want, name="x", **TOL)


def test_custom_op_keywords():
    layer = RMSNorm(16, compile_native=False, enforce_enable=True)
    assert layer.compile_native is False and layer.enforce_enable is True
    with pytest.raises(TypeError, match="RMSNorm: compile_native must be a bool"):
        RMSNorm(16, compile_native="yes")


@pytest.mark.parametrize("params", [None, {"rope_theta": 500000.0},
                                    {"rope_type": "linear", "factor": 2.0, "rope_theta": 10000.0},
                                    {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                     "high_freq_factor": 4.0, "original_max_position_embeddings": 64},
                                    {"rope_type": "yarn", "factor": 2.0, "original_max_position_embeddings": 64},
                                    {"partial_rotary_factor": 0.5}])
@pytest.mark.parametrize("is_neox", [True, False])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_get_rope_with_rope_parameters(params, is_neox, dtype):
    rope = get_rope(64, 128, is_neox, params, dtype)
    assert isinstance(rope, RotaryEmbedding) and rope is get_rope(64, 128, is_neox, params, dtype)
    assert rope.cos_sin_cache.dtype == dtype  # vLLM's table follows dtype
    pos = torch.randint(0, 128, (2, 5), device=DEVICE)
    q = torch.randn(2, 5, 4 * 64, device=DEVICE, dtype=dtype)  # [batch, seq, heads * head_size]
    k = torch.randn(2, 5, 64, device=DEVICE, dtype=dtype)
    want_q, want_k = rope.to(DEVICE).forward_native(pos, q, k)
    got_q, got_k = rope(pos, q, k)
    assert got_q is q and got_k is k
    assert_close(got_q, want_q, name="query", **TOL)
    assert_close(got_k, want_k, name="key", **TOL)


def test_get_rope_refuses_unsupported_types():
    with pytest.raises(ValueError, match="get_rope: unknown rope_scaling type 'ntk'"):
        get_rope(64, 128, True, {"rope_type": "ntk", "factor": 2.0})
    with pytest.raises(ValueError, match="multimodal rope"):
        get_rope(64, 128, True, {"mrope_section": [16, 8, 8]})
    with pytest.raises(ValueError, match="partial_rotary_factor"):
        get_rope(64, 128, True, {"partial_rotary_factor": 0.0})


@pytest.mark.parametrize("scoring", ["softmax", "sigmoid"])
@pytest.mark.parametrize("biased", [False, True])
@pytest.mark.parametrize("renorm", [False, True])
def test_grouped_topk_layer_matches_vllms_reference(scoring, biased, renorm):
    from aiter_lite.vllm.model_executor.layers.fused_moe import GroupedTopk

    t, e = 7, 32
    layer = GroupedTopk(4, renorm, num_expert_group=8, topk_group=3, scoring_func=scoring,
                        routed_scaling_factor=2.0)
    h = torch.randn(t, 16, device=DEVICE)
    logits = torch.randn(t, e, device=DEVICE)
    bias = torch.randn(e, device=DEVICE) * 0.1 if biased else None
    want_w, want_ids = layer.forward_native(h, logits, bias)
    w, ids = layer(h, logits, bias)
    order, want_order = ids.long().sort(-1), want_ids.long().sort(-1)
    assert torch.equal(order.values.cpu(), want_order.values.cpu())
    assert_close(w.gather(1, order.indices), want_w.gather(1, want_order.indices), name="topk_weights",
                 atol=1e-5, rtol=1e-5)


def test_fused_topk_forms():
    from aiter_lite.vllm.model_executor.layers import fused_moe as fm

    t, e = 5, 12
    h, logits = torch.randn(t, 8, device=DEVICE), torch.randn(t, e, device=DEVICE)
    w, ids, tei = fm.fused_topk(h, logits, 3, True, indices_type=torch.int64)
    p = logits.softmax(-1)
    top = p.topk(3, -1)
    assert ids.dtype == torch.int64 and torch.equal(ids.sort(-1).values.cpu(), top.indices.sort(-1).values.cpu())
    assert_close(w.sum(-1), torch.ones(t, device=DEVICE), name="renormalized weights", atol=1e-5, rtol=1e-5)
    bias = torch.randn(e, device=DEVICE)
    w, ids = fm.fused_topk_bias(h, logits, bias, 2, False)
    want = (p + bias).topk(2, -1).indices
    assert torch.equal(ids.long().sort(-1).values.cpu(), want.sort(-1).values.cpu())
    assert_close(w.sort(-1).values, p.gather(1, want).sort(-1).values, name="unbiased weights", atol=1e-5, rtol=1e-5)
    with pytest.raises(ValueError, match="fused_topk_bias: scoring_func"):
        fm.fused_topk_bias(h, logits, bias, 2, False, "relu")
