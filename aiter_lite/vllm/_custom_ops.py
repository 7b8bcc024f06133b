"""``vllm._custom_ops`` on aiter_lite: every op of vLLM's kernel API this project covers, with
vLLM's signature (out-parameters where vLLM writes into them, its keywords and defaults)."""

from aiter_lite.vllm._activation_ops import *  # noqa: F401,F403
from aiter_lite.vllm._activation_ops import __all__ as _activation_all
from aiter_lite.vllm._cache_ops import *  # noqa: F401,F403
from aiter_lite.vllm._cache_ops import __all__ as _cache_all
from aiter_lite.vllm._core_ops import *  # noqa: F401,F403
from aiter_lite.vllm._core_ops import __all__ as _core_all
from aiter_lite.vllm._quant_ops import *  # noqa: F401,F403
from aiter_lite.vllm._quant_ops import __all__ as _quant_all

__all__ = [*_activation_all, *_cache_all, *_core_all, *_quant_all]
