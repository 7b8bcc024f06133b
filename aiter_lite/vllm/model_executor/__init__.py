"""``vllm.model_executor`` on aiter_lite: its layers (``.layers``)."""
