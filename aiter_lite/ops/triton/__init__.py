"""Public Triton-backed ops: validate, allocate, choose a launch config, launch."""

from aiter_lite.ops.triton import activation, normalization, moe_routing, rope, softmax  # noqa: F401
