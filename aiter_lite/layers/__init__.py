"""nn.Module drop-ins for serving stacks; each picks its backend from aiter_lite.envs."""

from aiter_lite.layers.activation import GeluAndMul, SiluAndMul
from aiter_lite.layers.normalization import GemmaRMSNorm, LayerNorm, RMSNorm

__all__ = ["GeluAndMul", "GemmaRMSNorm", "LayerNorm", "RMSNorm", "SiluAndMul"]
