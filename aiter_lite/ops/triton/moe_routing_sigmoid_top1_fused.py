"""aiter's older flat module of Llama 4's top-1 routing:
``aiter.ops.triton.moe_routing_sigmoid_top1_fused``, where code written against aiter imports
``routing_sigmoid_top1``. The op itself lives in
``aiter_lite.ops.triton.moe.moe_routing_sigmoid_top1_fused``."""

from aiter_lite.ops.triton.moe.moe_routing_sigmoid_top1_fused import routing_sigmoid_top1

__all__ = ["routing_sigmoid_top1"]
