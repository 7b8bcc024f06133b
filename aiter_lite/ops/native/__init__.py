"""Plain-PyTorch references of every op (fp32 math), also the "native" backend."""

from aiter_lite.ops.native import activation, moe_routing, normalization, quant, rope, softmax, topk  # noqa: F401
