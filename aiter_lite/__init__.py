"""aiter_lite: Triton kernels for LLM serving and training, with native PyTorch references."""

from aiter_lite import envs
from aiter_lite._version import __version__
from aiter_lite.ops.triton.activation import (
    fused_silu_mul,
    gelu,
    gelu_and_mul,
    gelu_tanh_and_mul,
    relu,
    silu,
    silu_and_mul,
)
from aiter_lite.ops.triton.normalization.layernorm import layer_norm, layernorm2d_fwd_with_add
from aiter_lite.ops.triton.moe_routing import biased_grouped_topk, grouped_topk, topk_sigmoid, topk_softmax
from aiter_lite.ops.triton.normalization.rmsnorm import fused_add_rms_norm, rms_norm, rmsnorm2d_fwd_with_add

from aiter_lite import library  # noqa: E402,F401  (registers every public op as torch.ops.aiter_lite.<name>)

envs.validate()  # a bad AITER_* value raises here, whichever paths this process takes

__all__ = [
    "__version__",
    "biased_grouped_topk",
    "fused_add_rms_norm",
    "fused_silu_mul",
    "gelu",
    "gelu_and_mul",
    "gelu_tanh_and_mul",
    "grouped_topk",
    "layer_norm",
    "layernorm2d_fwd_with_add",
    "relu",
    "rms_norm",
    "rmsnorm2d_fwd_with_add",
    "silu",
    "silu_and_mul",
    "topk_sigmoid",
    "topk_softmax",
]
