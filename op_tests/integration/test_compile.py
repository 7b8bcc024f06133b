"""The public ops under torch.compile(fullgraph=True): each op alone, a function calling
ops of every family, and the AITER_TEST_COMPILE switch that re-runs the op tests with
every public op compiled (op_tests/utils/compiled.py).

On a GPU inductor compiles every op; on the CPU (the interpreter) aot_eager traces one
op of each family, and the whole registry under compile is the GPU suite's."""

from __future__ import annotations

import pytest
import torch

from aiter_lite.ops.native import activation as n_act
from aiter_lite.ops.triton import activation as t_act
from aiter_lite.ops.triton import fusions, moe_routing, softmax, topk
from aiter_lite.ops.triton.normalization import rmsnorm
from aiter_lite.ops.triton.quant import act_quant
from op_benchmarks.utils.op_args import TINY, decode_dims, op_args
from op_tests.utils import DEVICE, ON_GPU, assert_close
from op_tests.utils.compiled import swap_in_compiled
from op_tests.utils.registry import OPS, assert_same_bits, clone_args, sample

BACKEND = "inductor" if ON_GPU else "aot_eager"
# One op of each family (and each kind: allocating, out-parameter, in place, host-checked indices).
FAMILIES = ["silu_and_mul", "rms_norm", "fused_add_rms_norm", "layernorm2d_fwd_with_add", "log_softmax", "topk",
            "moe_biased_grouped_topk", "dynamic_per_token_quant_fp8_i8", "rmsnorm2d_fwd_with_add_dynamicquant",
            "act_mul_and_fp8_group_quant", "rope_cached_positions_fwd_inplace", "rope_thd_fwd",
            "fused_qkv_split_qk_rope", "fused_qk_rope_reshape_and_cache", "cat_and_cache_mla"]


def _compiled(fn):
    torch._dynamo.reset()
    return torch.compile(fn, backend=BACKEND, fullgraph=True, dynamic=False)


@pytest.mark.parametrize("name", sorted(OPS) if ON_GPU else FAMILIES)
def test_op_compiles_whole(name):
    fn = OPS[name].triton
    args = sample(name)
    mine, ref = clone_args(args), clone_args(args)
    got = _compiled(fn)(*mine)
    want = fn(*ref)
    assert_same_bits(got, want, f"{name} compiled")
    assert_same_bits(mine, ref, f"{name} compiled, arguments")


def test_a_function_across_families_compiles_whole():
    """A decoder step's worth of ops in one graph: norm, fused QKV split + RoPE, KV-cache
    write, residual add + norm, gated activation with fp8 group quant, routing, sampling."""
    dims = decode_dims(3) if ON_GPU else TINY
    dtype = torch.bfloat16 if ON_GPU else torch.float32
    d, heads, kv = dims.head_dim, dims.heads, dims.kv_heads
    qkv_args = op_args("fused_qkv_split_qk_rope", dims, DEVICE, dtype)
    cache_args = op_args("fused_qk_rope_reshape_and_cache", dims, DEVICE, dtype)
    x = torch.randn(dims.tokens, (heads + 2 * kv) * d, device=DEVICE, dtype=dtype)
    w = torch.randn((heads + 2 * kv) * d, device=DEVICE, dtype=dtype)
    gate = torch.randn(dims.tokens, dims.experts, device=DEVICE, dtype=dtype)
    bias = torch.randn(dims.experts, device=DEVICE, dtype=dtype)
    logits = torch.randn(dims.tokens, dims.vocab, device=DEVICE, dtype=dtype)
    cos, sin, pos = qkv_args[1:4]
    key_cache, value_cache, slots = cache_args[3:6]

    def step(x, residual, key_cache, value_cache):
        h = rmsnorm.rms_norm(x, w, 1e-6)
        q, k, v = fusions.fused_qkv_split_qk_rope(h, cos, sin, pos, heads, kv, d)
        q, k = fusions.fused_qk_rope_reshape_and_cache(q, k, v, key_cache, value_cache, slots, pos, cos, sin, None,
                                                       None, True, True, output_zeros=False)[:2]
        attn = torch.cat([q.flatten(1), k.flatten(1), v.flatten(1)], 1)
        rmsnorm.fused_add_rms_norm(attn, residual, w, 1e-6)
        mlp_q, mlp_s = act_quant.act_mul_and_fp8_group_quant(attn, "silu", dims.group_size)
        weights, ids = moe_routing.moe_biased_grouped_topk(gate, bias, dims.topk, dims.groups, dims.topk_group, True)
        probs = softmax.softmax(logits.float())
        return attn, residual, mlp_q.float(), mlp_s, weights, ids, topk.topk(probs, dims.k)[1]

    args = (x, torch.randn_like(x), key_cache, value_cache)
    mine, ref = clone_args(args), clone_args(args)
    got = _compiled(step)(*mine)
    want = step(*ref)
    for i, (a, b) in enumerate(zip(got + mine, want + ref)):
        if a.dtype.is_floating_point:
            assert_close(a, b, name=f"output {i}")
        else:
            assert torch.equal(a, b), f"output {i}"


def test_the_switch_swaps_in_compiled_ops():
    # AITER_TEST_COMPILE=1 in op_tests/conftest.py: looked-up ops are compiled ones with the
    # eager results, a refused argument still raises the check's error, and restoring works.
    eager = t_act.silu_and_mul
    restore = swap_in_compiled(BACKEND)
    try:
        from aiter_lite.ops.triton import activation as again
        from aiter_lite.ops.triton.quant import static_per_tensor_quant_fp8_i8

        assert again.silu_and_mul is not eager and again.silu_and_mul.eager is eager
        assert static_per_tensor_quant_fp8_i8.eager is not None
        x = torch.randn(4, 32, device=DEVICE)
        out = t_act.silu_and_mul(torch.empty(4, 16, device=DEVICE), x)
        assert_close(out, n_act.silu_and_mul(torch.empty(4, 16, device=DEVICE), x), name="silu_and_mul")
        with pytest.raises(ValueError, match="out must have shape"):
            t_act.silu_and_mul(torch.empty(4, 15, device=DEVICE), x)
    finally:
        restore()
    assert t_act.silu_and_mul is eager


def test_rows_of_two_strides_compile_as_in_eager():
    # Leading dims that do not flatten into one row stride are gathered by a copy; whether
    # they flatten is read from the strides (dynamo traces no try / except around a view).
    from aiter_lite.utils.checks import _one_row_stride

    base = torch.randn(4, 6, 10, device=DEVICE)
    for t in (base, base[:, 1:], base[:, :, :4], base[::2], base.transpose(0, 1), base[:1, 2:], base[:, :1],
              base[:0], base[..., ::2].unsqueeze(0), base.expand(3, 4, 6, 10)):
        try:
            t.view(-1, t.shape[-1])
            viewable = True
        except RuntimeError:
            viewable = False
        assert _one_row_stride(t) == viewable, (tuple(t.shape), t.stride())
    x = torch.randn(2, 4, 2 * 100, device=DEVICE, dtype=torch.float16)[:, 1:]  # rows of two strides
    op = getattr(act_quant.act_mul_and_fp8_quant, "eager", act_quant.act_mul_and_fp8_quant)
    got = _compiled(op)(x, "silu", dtype_quant=torch.int8)
    want = op(x, "silu", dtype_quant=torch.int8)
    for g, w in zip(got, want):
        assert torch.equal(g, w)
