"""nn.Module drop-ins for serving stacks; each picks its backend from aiter_lite.envs."""

from aiter_lite.layers.activation import GeluAndMul, SiluAndMul

__all__ = ["GeluAndMul", "SiluAndMul"]
