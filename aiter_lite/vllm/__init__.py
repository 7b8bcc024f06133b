"""vLLM's kernel API on aiter_lite's kernels, under vLLM's names and signatures.

``from vllm import _custom_ops as ops`` becomes ``from aiter_lite.vllm import ops`` (or
``aiter_lite.vllm._custom_ops``), and ``vllm.model_executor.layers.X`` becomes
``aiter_lite.vllm.model_executor.layers.X``: the same names, argument orders, keywords,
defaults, out-parameters and return values, on any GPU Triton targets (and the CPU under
Triton's interpreter). Each op is a thin call into this project's kernels; where vLLM has
an op none of them computed, a kernel of its own family was added.
"""

from aiter_lite.vllm import _custom_ops
from aiter_lite.vllm import _custom_ops as ops

__all__ = ["ops", "_custom_ops"]
