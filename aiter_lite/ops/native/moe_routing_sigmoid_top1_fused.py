"""aiter's older flat module ``aiter.ops.triton.moe_routing_sigmoid_top1_fused``, natively: the reference of
``aiter_lite.ops.triton.moe_routing_sigmoid_top1_fused``. The ops themselves live in
``aiter_lite.ops.native.moe.moe_routing_sigmoid_top1_fused``."""

from aiter_lite.ops.native.moe.moe_routing_sigmoid_top1_fused import routing_sigmoid_top1

__all__ = ["routing_sigmoid_top1"]
