"""aiter's ``fused_clamp_act_mul`` in plain PyTorch (fp32 math): SwiGLU's clamp, a gated
activation, optional weights, optionally fp8 (or int8) group quantization with fp32 or
UE8M0 scales. The reference of ``aiter_lite.ops.triton.fusions.fused_clamp_act_mul`` and
its "native" backend."""

from __future__ import annotations

import torch

from aiter_lite.ops.native.activation import ACTIVATIONS
from aiter_lite.ops.native.quant import quant
from aiter_lite.ops.native.quant.mx_quant import shuffle_scale as _shuffle_buffer
from aiter_lite.spec.quant import GROUP_EPS, QUANT_DTYPES, quant_range

__all__ = ["fused_clamp_act_mul", "clamp_act_mul"]


def clamp_act_mul(inp: torch.Tensor, swiglu_limit: float = 0.0, activation: str = "silu",
                  weights: torch.Tensor | None = None) -> torch.Tensor:
    """``weights * act(min(gate, limit)) * clamp(up, -limit, limit)`` in fp32 (no clamp where
    ``swiglu_limit`` <= 0): gate, up = inp's two halves."""
    n = inp.shape[-1] // 2
    gate, up = inp[..., :n].float(), inp[..., n:].float()
    if swiglu_limit > 0:
        gate = gate.clamp(max=swiglu_limit)
        up = up.clamp(-swiglu_limit, swiglu_limit)
    y = ACTIVATIONS[activation](gate) * up
    return y if weights is None else weights.float() * y


def _ue8m0_group_quant(y: torch.Tensor, group: int, dtype: torch.dtype):
    """Per group of ``group`` columns: the scale ``amax / q_max`` rounded up to a power of 2
    (exactly, by its fp32 bits), values ``y / scale`` (0 where the scale is 0); scales as e8m0
    bytes (0xFF where the group holds a NaN, whose values are NaN)."""
    m, n = y.shape
    g = -(-n // group)
    blocks = torch.nn.functional.pad(y, (0, g * group - n)).view(m, g, group)
    amax = blocks.abs().amax(-1)
    nan = blocks.isnan().any(-1)
    lo, hi = quant_range(dtype)
    ratio = amax / torch.full((), hi, device=amax.device)  # an IEEE division on CUDA too (see quant._scale)
    up = (ratio.view(torch.int32) + 0x7FFFFF) & 0x7F800000
    scale = up.view(torch.float32)
    inv = torch.where(scale == 0, torch.zeros_like(scale), 1.0 / torch.where(scale == 0, 1.0, scale))
    inv = torch.where(nan, float("nan"), inv)
    q = quant.round_to((blocks * inv[..., None]).view(m, g * group)[:, :n], dtype, lo, hi)
    return q, torch.where(nan, 255, up >> 23).to(torch.uint8)


def fused_clamp_act_mul(inp, out=None, scale=None, swiglu_limit=0, activation="silu", weights=None, dtype_quant=None,
                        transpose_scale=False, quant_block_size=128, scale_dtype_fmt="fp32", shuffle_scale=False,
                        backend=None):
    y = clamp_act_mul(inp, float(swiglu_limit), activation, weights)
    if dtype_quant is None and (out is None or out.dtype not in QUANT_DTYPES):
        res = y.to(inp.dtype if out is None else out.dtype)
        return res if out is None else out.copy_(res)
    dtype = dtype_quant if out is None else out.dtype
    m, n = y.shape
    g = -(-n // quant_block_size)
    if scale_dtype_fmt == "ue8m0":
        q, s = _ue8m0_group_quant(y, quant_block_size, dtype)
        if shuffle_scale:
            s = _shuffle_buffer(s, True)
        elif transpose_scale:
            s = s.t().contiguous().view(m, g)
    else:
        q = torch.empty((m, n), dtype=dtype, device=inp.device)
        s = torch.empty((m, g), dtype=torch.float32, device=inp.device)
        quant.per_token_group_quant(q, y, s, quant_block_size, GROUP_EPS)
        if transpose_scale:
            s = s.t().contiguous().view(m, g)
    if out is not None:
        q = out.copy_(q)
    if scale is not None:
        s = scale.copy_(s.view(scale.shape))
    return q, s
