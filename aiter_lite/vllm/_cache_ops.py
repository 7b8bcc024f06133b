"""vLLM-form ops (see aiter_lite.vllm)."""

__all__: list[str] = []
