"""Default epsilons of the norms, shared by the op signatures, the registered schemas and
the layers."""

LAYER_NORM_EPS = 1e-5  # torch.nn.LayerNorm's and aiter's layernorm default
RMS_NORM_EPS = 1e-6  # vLLM's RMSNorm layer default (the rms_norm ops take epsilon without one)
