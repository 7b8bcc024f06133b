"""Default epsilons of the norms, shared by the op signatures, the registered schemas and
the layers; RMSNorm's casting modes and their check, which both backends run."""

LAYER_NORM_EPS = 1e-5  # torch.nn.LayerNorm's and aiter's layernorm default
RMS_NORM_EPS = 1e-6  # vLLM's RMSNorm layer default (the rms_norm ops take epsilon without one)

# Where RMSNorm rounds (Liger-Kernel's casting_mode): "gemma" computes in fp32 and rounds the
# output once (Hugging Face's GemmaRMSNorm); "llama" rounds x * rstd to the normalized
# tensor's dtype before the weight multiplies it (LlamaRMSNorm, and Mistral's, Qwen2's, Qwen3's).
CASTING_MODES = ("gemma", "llama")


def check_casting_mode(op: str, casting_mode) -> str:
    """``casting_mode``, one of CASTING_MODES; ``op`` names the caller in the error."""
    if not isinstance(casting_mode, str) or casting_mode not in CASTING_MODES:
        raise ValueError(f"{op}: casting_mode must be one of {', '.join(map(repr, CASTING_MODES))}, "
                         f"got {casting_mode!r}")
    return casting_mode
