"""nn.Module drop-ins for serving stacks; each picks its backend from aiter_lite.envs."""

from aiter_lite.layers.activation import GeluAndMul, SiluAndMul
from aiter_lite.layers.normalization import GemmaRMSNorm, LayerNorm, RMSNorm
from aiter_lite.layers.rotary_embedding import (
    DeepseekScalingRotaryEmbedding,
    DynamicNTKScalingRotaryEmbedding,
    LinearScalingRotaryEmbedding,
    Llama3RotaryEmbedding,
    RotaryEmbedding,
    YaRNScalingRotaryEmbedding,
    get_rope,
)

__all__ = [
    "DeepseekScalingRotaryEmbedding",
    "DynamicNTKScalingRotaryEmbedding",
    "GeluAndMul",
    "GemmaRMSNorm",
    "LayerNorm",
    "LinearScalingRotaryEmbedding",
    "Llama3RotaryEmbedding",
    "RMSNorm",
    "RotaryEmbedding",
    "SiluAndMul",
    "YaRNScalingRotaryEmbedding",
    "get_rope",
]
