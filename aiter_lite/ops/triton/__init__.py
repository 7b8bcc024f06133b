"""Public Triton-backed ops: validate, allocate, choose a launch config, launch."""

from aiter_lite.ops.triton import activation, fusions, moe_routing, normalization, quant, rope, softmax, topk  # noqa: F401
