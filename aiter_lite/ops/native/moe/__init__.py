"""MoE ops at aiter's ``moe`` paths in plain PyTorch (fp32 math), also the "native" backend."""

from aiter_lite.ops.native.moe import moe_routing_sigmoid_top1_fused  # noqa: F401
