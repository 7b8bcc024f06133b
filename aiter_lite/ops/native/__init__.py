"""Plain-PyTorch references of every op (fp32 math), also the "native" backend."""

from aiter_lite.ops.native import (  # noqa: F401
    act_quant,
    activation,
    moe_routing,
    norm_quant,
    normalization,
    quant,
    rope,
    softmax,
    topk,
)
