"""``vllm.model_executor.layers.quantization`` on aiter_lite: the activation-quantization layer
(``input_quant_fp8.QuantFP8``)."""
