"""Ops with no gradient (quantized outputs, routing, KV-cache writes; top-k and the QKV /
concat fusions until their backward lands) refuse a call autograd would record, naming
the op and the argument, rather than return a result with no gradient path; under
``torch.no_grad()`` (and for inputs that need no gradient) they run."""

import inspect

import pytest
import torch

from aiter_lite.library import OPS
from aiter_lite.utils.registry import PUBLIC_OPS
from op_benchmarks.utils.op_args import TINY, op_args
from op_tests.utils import DEVICE

NO_GRAD = sorted(name for name, op in PUBLIC_OPS.items() if op.no_grad)


def _float_inputs(name: str, args: tuple) -> list[int]:
    op = PUBLIC_OPS[name]
    names = list(inspect.signature(op.python).parameters)
    written = set(op.mutates) | set(op.buffers)
    return [i for i, a in enumerate(args)
            if isinstance(a, torch.Tensor) and a.is_floating_point() and names[i] not in written]


def test_the_families_without_gradient_are_declared():
    families = {PUBLIC_OPS[n].module.rsplit(".", 1)[-1] for n in NO_GRAD}
    assert {"quant", "norm_quant", "act_quant", "moe_routing", "fused_kv_cache"} <= families
    # and, until their backward lands, topk and the QKV / concat fusions
    assert {"topk", "fused_qkv_split_qk_rope", "fused_qk_cat", "fused_qk_rope_cat"} <= set(NO_GRAD)
    assert {"fused_clamp_act_mul", "fused_mul_add", "fused_routing_from_topk",
            "fused_qk_rope_cat_and_cache_mla", "fused_qkv_split_qk_norm_rope_cache",
            "fused_qk_rope_cosine_cache_llama", "rope_fwd_3d",
            "fused_reduce_qk_norm_rope_swa_write", "fused_fp8_bmm_rope_cat_and_cache_mla",
            "fused_bf16_bmm_rope_cat_and_cache_mla", "fused_fp4_bmm_rope_cat_and_cache_mla"} <= set(NO_GRAD)  # aiter's inference fusions
    assert not {"softmax", "log_softmax"} & set(NO_GRAD)  # differentiable (a backward kernel)
    # vLLM's inference forms: its activations, cache writes and int8 with a zero point
    assert {"act_and_mul_rounded", "fatrelu_and_mul", "swigluoai_and_mul", "gelu_new", "gelu_fast", "gelu_quick",
            "kv_cache_write", "convert_kv_cache", "static_per_tensor_int8_azp_quant",
            "dynamic_per_token_int8_azp_quant"} <= set(NO_GRAD)
    # sampling's selections: no gradient through which tokens a threshold keeps
    assert {"top_k_renorm_probs", "top_p_renorm_probs", "top_k_mask_logits", "sampling_from_uniform"} <= set(NO_GRAD)
    assert len(NO_GRAD) == 76, NO_GRAD


@pytest.mark.parametrize("name", NO_GRAD)
def test_refuses_inputs_that_require_grad(name):
    op = PUBLIC_OPS[name]
    names = [n for n in inspect.signature(op.python).parameters if n not in op.buffers]  # the registered op's
    args = op_args(name, TINY, DEVICE, torch.float32, torch.int8)
    floats = _float_inputs(name, args)
    assert floats, f"{name}: no float input to require grad"
    for i in floats:
        call = list(args)
        call[i] = args[i].detach().clone().requires_grad_()
        with pytest.raises(ValueError, match=rf"^{name}: {names[i]} requires grad, but {name} has no gradient"):
            OPS[name].triton(*call)
        with torch.no_grad():  # the serving path (the refused call wrote nothing): runs
            OPS[name].triton(*call)
