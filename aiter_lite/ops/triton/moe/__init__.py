"""MoE ops at aiter's ``aiter.ops.triton.moe`` paths (the routing of ``moe_routing.py`` beside
this package takes gating logits; these take the hidden states)."""

from aiter_lite.ops.triton.moe import moe_routing_sigmoid_top1_fused  # noqa: F401
