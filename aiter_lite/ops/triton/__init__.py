"""Public Triton-backed ops: validate, allocate, choose a launch config, launch."""

from aiter_lite.ops.triton import (  # noqa: F401
    activation,
    cross_entropy,
    fusions,
    moe,
    moe_routing,
    normalization,
    quant,
    rope,
    sampling,
    softmax,
    topk,
)
