"""aiter's ``fused_clamp_act_mul`` (``aiter.ops.triton.fusions.fused_clamp_act_mul``): the
gated MLP activation of DeepSeek-V4 / gpt-oss-style models in one launch: SwiGLU's clamp,
``act(gate) * up``, optional per-row or per-element weights, and optionally fp8 (or int8)
group quantization with fp32 scales or UE8M0 (power-of-2, e8m0-byte) scales in aiter's
layouts (row-major, transposed, or preshuffled for MX GEMMs). SGLang calls it in the
DeepSeek MLP on ROCm.

Where aiter asks more of the caller, this does not: any half-width ``N`` (aiter: a multiple
of 128, at least 128), any power-of-2 group for either scale format (aiter: 32 for UE8M0),
rows of any stride, weights of any strides; an all-zero group's UE8M0 scale is byte 0 (its
values 0) and a group holding a NaN gets byte 0xFF with NaN values (aiter: byte 0). A
shuffled scale buffer this op allocates has its padding at 127 (2^0), as aiter's
``e8m0_shuffle`` pads; a caller's buffer keeps its padding. The activation is computed in
fp32 and not rounded to the input's dtype before quantization (as aiter).
"""

from __future__ import annotations

from typing import Literal

import torch

from aiter_lite.ops.triton.fusions._common import check_out
from aiter_lite.ops.triton.quant.act_quant import _launch_act_quant
from aiter_lite.ops.triton.quant.dtypes import check_quant_dtype_supported
from aiter_lite.spec.quant import QUANT_DTYPES
from aiter_lite.utils.checks import (
    FLOAT_DTYPES,
    check_bool,
    check_choice,
    check_float_tensor,
    check_int,
    check_real,
    check_row_input,
    check_same_device,
    check_unit_last_stride,
)
from aiter_lite.utils.launch import cdiv
from aiter_lite.utils.logger import debug_on, log_call
from aiter_lite.utils.registry import public_op

__all__ = ["fused_clamp_act_mul"]

_ACTIVATIONS = ("silu", "gelu", "gelu_tanh", "relu")
_UE8M0_DTYPES = (torch.float8_e4m3fn, torch.float8_e4m3fnuz)
_PAD_ROWS, _PAD_COLS = 256, 8  # aiter's shuffled scale buffer: rows and columns rounded up to these


@public_op(mutates=("out", "scale"), no_grad="aiter's fused_clamp_act_mul is an inference op: it has no backward "
                                              "(use aiter_lite.ops.triton.activation's ops to train)")
def fused_clamp_act_mul(inp: torch.Tensor, out: torch.Tensor | None = None, scale: torch.Tensor | None = None,
                        swiglu_limit: float = 0, activation: Literal["silu", "gelu", "gelu_tanh", "relu"] = "silu",
                        weights: torch.Tensor | None = None, dtype_quant: torch.dtype | None = None,
                        transpose_scale: bool = False, quant_block_size: int = 128,
                        scale_dtype_fmt: Literal["fp32", "ue8m0"] = "fp32", shuffle_scale: bool = False,
                        backend: str | None = None):
    """``y = weights * act(min(gate, limit)) * clamp(up, -limit, limit)`` over ``inp`` (M, 2N)
    = [gate | up] (no clamp where ``swiglu_limit`` <= 0; ``weights`` (M, 1) or (M, N), or
    None). Without ``dtype_quant`` (and with no quantized ``out``): y (M, N) in ``out``'s
    dtype (inp's when allocated). Else ``(q, scale)``: q (M, N) of ``dtype_quant`` (``out``'s
    dtype where given), a scale per ``quant_block_size`` columns of a row: fp32 ``max(amax,
    1e-10) / q_max`` (``scale_dtype_fmt`` "fp32"), or ``amax / q_max`` rounded up to a power
    of 2 stored as e8m0 uint8 ("ue8m0", fp8 e4m3 only). Scales (M, G) row-major; with
    ``transpose_scale`` written column-major into a (G, M) buffer returned viewed as (M, G)
    (aiter's presentation); with ``shuffle_scale`` (UE8M0) in aiter's e8m0_shuffle layout of
    a (M rounded up to 256, G rounded up to 8) buffer. ``backend``: None or "triton"."""
    op = "fused_clamp_act_mul"
    check_row_input(op, "inp", inp)
    if inp.dim() != 2:
        raise ValueError(f"{op}: inp must be 2-D (M, 2 * N), got shape {tuple(inp.shape)}")
    m, two_n = inp.shape
    if two_n % 2:
        raise ValueError(f"{op}: inp's last dim holds the gate then the up halves and must be even, got {two_n}")
    n = two_n // 2
    limit = check_real(op, "swiglu_limit", swiglu_limit)
    check_choice(op, "activation", activation, _ACTIVATIONS)
    if backend is not None and backend != "triton":
        raise ValueError(f"{op}: backend must be None or 'triton' (aiter's 'gluon' port is for gfx1250), "
                         f"got {backend!r}")
    if weights is not None:
        check_float_tensor(op, "weights", weights)
        if weights.dim() != 2 or weights.shape[0] != m or weights.shape[1] not in (1, n):
            raise ValueError(f"{op}: weights must have shape ({m}, 1) or ({m}, {n}), got {tuple(weights.shape)}")
        check_same_device(op, "weights", weights, "inp", inp)
    transpose_scale = check_bool(op, "transpose_scale", transpose_scale)
    shuffle_scale = check_bool(op, "shuffle_scale", shuffle_scale)
    check_choice(op, "scale_dtype_fmt", scale_dtype_fmt, ("fp32", "ue8m0"))
    quantized = dtype_quant is not None or (isinstance(out, torch.Tensor) and out.dtype in QUANT_DTYPES)
    if not quantized:
        if scale is not None or scale_dtype_fmt != "fp32" or shuffle_scale:
            raise ValueError(f"{op}: scale, scale_dtype_fmt='ue8m0' and shuffle_scale need dtype_quant")
        out = (torch.empty((m, n), dtype=inp.dtype, device=inp.device) if out is None
               else check_out(op, "out", out, (m, n), inp, FLOAT_DTYPES, "inp"))
        check_unit_last_stride(op, "out", out)
        if debug_on():
            log_call(op, inp=inp, out=out, swiglu_limit=limit, activation=activation, weights=weights)
        if out.numel():
            _launch_act_quant(inp, out, torch.empty(0, device=inp.device), None, activation, "none", 1, False,
                              None, weights, limit)
        return out
    if dtype_quant is not None and dtype_quant not in QUANT_DTYPES:
        raise TypeError(f"{op}: dtype_quant must be None or one of {', '.join(str(d) for d in QUANT_DTYPES)}, "
                        f"got {dtype_quant}")
    qdtype = out.dtype if isinstance(out, torch.Tensor) else dtype_quant  # aiter: a given out's dtype wins
    check_quant_dtype_supported(op, "dtype_quant", qdtype, inp.device)
    group = check_int(op, "quant_block_size", quant_block_size, 1, 8192)
    if group & (group - 1):
        raise ValueError(f"{op}: quant_block_size must be a power of 2 from 1 to 8192, got {group}")
    groups = cdiv(n, group)
    ue8m0 = scale_dtype_fmt == "ue8m0"
    if ue8m0 and qdtype not in _UE8M0_DTYPES:
        raise ValueError(f"{op}: scale_dtype_fmt='ue8m0' needs an fp8 e4m3 dtype_quant, got {qdtype}")
    if shuffle_scale and (not ue8m0 or transpose_scale):
        raise ValueError(f"{op}: shuffle_scale needs scale_dtype_fmt='ue8m0' and no transpose_scale")
    out = (torch.empty((m, n), dtype=qdtype, device=inp.device) if out is None
           else check_out(op, "out", out, (m, n), inp, QUANT_DTYPES, "inp"))
    check_unit_last_stride(op, "out", out)
    s_dtype = torch.uint8 if ue8m0 else torch.float32
    if shuffle_scale:
        shape = (cdiv(m, _PAD_ROWS) * _PAD_ROWS, cdiv(groups, _PAD_COLS) * _PAD_COLS)
        scale = (torch.full(shape, 127, dtype=s_dtype, device=inp.device) if scale is None
                 else check_out(op, "scale", scale, shape, inp, (s_dtype,), "inp"))
        if not scale.is_contiguous():
            raise ValueError(f"{op}: a shuffled scale buffer must be contiguous, got strides {tuple(scale.stride())}")
        written = scale
    else:
        shape = (groups, m) if transpose_scale else (m, groups)
        scale = (torch.empty(shape, dtype=s_dtype, device=inp.device) if scale is None
                 else check_out(op, "scale", scale, shape, inp, (s_dtype,), "inp"))
        written = scale.t() if transpose_scale else scale
    if debug_on():
        log_call(op, inp=inp, out=out, scale=scale, swiglu_limit=limit, activation=activation, weights=weights,
                 dtype_quant=qdtype, transpose_scale=transpose_scale, quant_block_size=group,
                 scale_dtype_fmt=scale_dtype_fmt, shuffle_scale=shuffle_scale)
    if out.numel():
        _launch_act_quant(inp, out, written, None, activation, "group", group, False, None, weights, limit, ue8m0,
                          shuffle_scale)
    if transpose_scale:
        return out, scale.view(m, groups)
    return out, scale
