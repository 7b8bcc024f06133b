"""``vllm.model_executor.layers`` on aiter_lite: vLLM's CustomOp layers (constructor arguments,
``forward_native`` / ``forward_cuda`` / ``forward_hip``) on this project's kernels."""
