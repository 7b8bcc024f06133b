"""aiter_lite: Triton kernels for LLM serving and training, with native PyTorch references."""

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

__all__ = [
    "__version__",
    "fused_silu_mul",
    "gelu",
    "gelu_and_mul",
    "gelu_tanh_and_mul",
    "relu",
    "silu",
    "silu_and_mul",
]
