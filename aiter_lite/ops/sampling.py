"""aiter's ``aiter.ops.sampling`` calling convention (its HIP sampling ops, which vLLM's ROCm
sampler calls): a per-row tensor or None, then a scalar, for each filter. The work is
``aiter_lite.ops.triton.sampling``'s; draws come from torch's default generator of the
device (aiter's own Philox stream is not reproduced: the same seed samples differently)."""

from __future__ import annotations

import torch

from aiter_lite.ops.triton import sampling as _smp

__all__ = ["top_k_top_p_sampling_from_probs", "top_p_sampling_from_probs", "top_k_renorm_probs"]


def _either(arr: torch.Tensor | None, val):
    return val if arr is None else arr


def top_k_top_p_sampling_from_probs(probs: torch.Tensor, indices: torch.Tensor | None,
                                    maybe_top_k_arr: torch.Tensor | None, top_k_val: int,
                                    maybe_top_p_arr: torch.Tensor | None, top_p_val: float,
                                    deterministic: bool = False) -> torch.Tensor:
    return _smp.top_k_top_p_sampling_from_probs(probs, _either(maybe_top_k_arr, top_k_val),
                                                _either(maybe_top_p_arr, top_p_val), indices=indices,
                                                deterministic=deterministic)


def top_p_sampling_from_probs(probs: torch.Tensor, indices: torch.Tensor | None,
                              maybe_top_p_arr: torch.Tensor | None, top_p_val: float,
                              deterministic: bool = False) -> torch.Tensor:
    return _smp.top_p_sampling_from_probs(probs, _either(maybe_top_p_arr, top_p_val), indices=indices,
                                          deterministic=deterministic)


def top_k_renorm_probs(probs: torch.Tensor, maybe_top_k_arr: torch.Tensor | None, top_k_val: int) -> torch.Tensor:
    return _smp.top_k_renorm_probs(probs, _either(maybe_top_k_arr, top_k_val))
