"""nn.Module drop-ins for serving stacks.

Every layer has ``forward_native`` and ``forward_triton`` of ``forward``'s signature;
``forward`` runs the one picked when the layer is built (its ``backend`` argument, else
aiter_lite.envs for its op family), named by the layer's ``backend`` attribute.
"""

from aiter_lite.layers.activation import GeluAndMul, SiluAndMul
from aiter_lite.layers.base import BackendLayer
from aiter_lite.layers.loss import CrossEntropyLoss, FusedLinearCrossEntropyLoss
from aiter_lite.layers.normalization import GemmaRMSNorm, LayerNorm, RMSNorm
from aiter_lite.layers.quant import GroupShape, QuantFP8
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
    "BackendLayer",
    "CrossEntropyLoss",
    "DeepseekScalingRotaryEmbedding",
    "DynamicNTKScalingRotaryEmbedding",
    "FusedLinearCrossEntropyLoss",
    "GeluAndMul",
    "GemmaRMSNorm",
    "GroupShape",
    "LayerNorm",
    "LinearScalingRotaryEmbedding",
    "Llama3RotaryEmbedding",
    "QuantFP8",
    "RMSNorm",
    "RotaryEmbedding",
    "SiluAndMul",
    "YaRNScalingRotaryEmbedding",
    "get_rope",
]
