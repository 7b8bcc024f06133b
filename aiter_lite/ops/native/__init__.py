"""Plain-PyTorch references of every op (fp32 math), also the "native" backend. Laid out
as ``aiter_lite.ops.triton``, file for file; the rules both share are ``aiter_lite.spec``'s."""

from aiter_lite.ops.native import (  # noqa: F401
    activation,
    cross_entropy,
    fusions,
    moe,
    moe_routing,
    normalization,
    quant,
    rope,
    softmax,
    topk,
)
