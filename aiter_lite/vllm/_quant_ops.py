"""vLLM's activation-quantization ops (``vllm._custom_ops`` and fp8_utils'
``per_token_group_quant_fp8``) on this project's quant kernels: vLLM's names, argument
orders, keywords, defaults and return values.

* ``scaled_fp8_quant``: static scales per tensor, per token ((M,) or (M, 1) with
  ``group_shape=(1, -1)``), per channel ((N,) with ``(-1, 1)``) or per 2-D block ((M / gm,
  N / gn)); dynamic per tensor or per token (capped at ``scale_ub``; vLLM ignores
  ``scale_ub`` per tensor, and so does this). ``num_token_padding`` pads the output's rows
  (left unwritten, as vLLM's). ``output`` may be any fp8 dtype the device stores (vLLM's
  takes its platform's e4m3 only).
* ``scaled_int8_quant``: static per tensor, dynamic per token; symmetric or with a zero
  point (``azp``), vLLM's rounding (to nearest even) and saturation. An all-zero row's
  dynamic symmetric scale is this project's floor ``1 / (127 * 512)`` where vLLM writes 0
  (the values are 0 either way).
* ``per_token_group_quant_fp8`` (vLLM: ``vllm.model_executor.layers.quantization.utils.
  fp8_utils``): groups of ``group_size`` columns, row- or column-major (TMA-aligned) scales,
  power-of-2 scales with ``use_ue8m0``.
* ``rms_norm_dynamic_per_token_quant`` / ``rms_norm_per_block_quant``: vLLM's RMSNorm (``x *
  rstd`` rounded to the input dtype before the weight; with ``residual``, ``residual +=
  input`` in place first) then per-token or per-group quantization; ``quant_dtype`` fp8 or
  int8. ``silu_and_mul_per_block_quant``: ``silu(gate) * up`` quantized per group.
  ``scale_ub`` is taken by the per-token form only: the block forms raise on it.
"""

from __future__ import annotations

import math

import torch

from aiter_lite.ops.triton.normalization.norm import (
    _launch_norm_fwd,
    check_input,
    check_like,
    norm_with_add,
    rows_view,
)
from aiter_lite.ops.triton.quant.act_quant import act_mul_and_fp8_group_quant
from aiter_lite.ops.triton.quant.dtypes import check_quant_dtype_supported, get_fp8_e4m3_dtype
from aiter_lite.ops.triton.quant.fused_fp8_quant import _MAX_COLS as _FUSED_MAX_COLS
from aiter_lite.ops.triton.quant.fused_fp8_quant import _launch_fused_rms_quant
from aiter_lite.ops.triton.quant.norm_quant import norm_quant
from aiter_lite.ops.triton.quant.quant import (
    _check_input,
    _check_q,
    _dynamic_per_tensor,
    _group,
    _int8_azp,
    _launch_static_quant,
    _per_token,
    _rows,
    _static,
)
from aiter_lite.spec.quant import GROUP_EPS, QUANT_DTYPES
from aiter_lite.utils.checks import check_bool, check_int, check_real, check_same_device
from aiter_lite.utils.fast_launch import planned
from aiter_lite.utils.overlap import check_written
from aiter_lite.utils.launch import cdiv

__all__ = [
    "scaled_fp8_quant",
    "scaled_int8_quant",
    "per_token_group_quant_fp8",
    "rms_norm_dynamic_per_token_quant",
    "rms_norm_per_block_quant",
    "silu_and_mul_per_block_quant",
]

_FP8 = tuple(d for d in QUANT_DTYPES if d.is_floating_point)


def _tensor(op: str, name: str, t, dtype: torch.dtype | None = None) -> torch.Tensor:
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{op}: {name} must be a torch.Tensor, got {type(t).__name__}")
    if dtype is not None and t.dtype != dtype:
        raise TypeError(f"{op}: {name} must be {dtype}, got {t.dtype}")
    return t


def _quant_dtype(op: str, name: str, dtype, device: torch.device, allowed=QUANT_DTYPES) -> torch.dtype:
    if not isinstance(dtype, torch.dtype) or dtype not in allowed:
        names = ", ".join(str(d) for d in allowed)
        raise TypeError(f"{op}: {name} must be one of {names}, got {dtype}")
    check_quant_dtype_supported(op, name, dtype, device)
    return dtype


# ---------------------------------------------------------------------------
# fp8 / int8


def _static_groups(op: str, scale: torch.Tensor, m: int, n: int, group_shape) -> tuple[torch.Tensor, int, int]:
    """A static scale of more than one element as a 2-D grid and its (group_m, group_n)."""
    if group_shape is not None:
        if (not isinstance(group_shape, (tuple, list)) or len(group_shape) != 2
                or not all(isinstance(g, int) and not isinstance(g, bool) and (g == -1 or g >= 1)
                           for g in group_shape)):
            raise ValueError(f"{op}: group_shape must be (group_m, group_n), each -1 (full extent) or >= 1, got "
                             f"{group_shape!r}")
        gm, gn = (m if group_shape[0] == -1 else group_shape[0]), (n if group_shape[1] == -1 else group_shape[1])
        gm = max(gm, 1)
    elif scale.dim() == 2:
        if not scale.shape[0] or not scale.shape[1] or m % scale.shape[0] or n % scale.shape[1]:
            raise ValueError(f"{op}: a 2-D scale must tile input {(m, n)} evenly, got shape {tuple(scale.shape)}")
        gm, gn = m // scale.shape[0], n // scale.shape[1]
    else:
        raise ValueError(f"{op}: a scale of shape {tuple(scale.shape)} needs group_shape ((1, -1) per token, "
                         "(-1, 1) per channel)")
    grid = (cdiv(m, gm), cdiv(n, gn))
    if scale.numel() != math.prod(grid) or (scale.dim() == 2 and tuple(scale.shape) != grid):
        raise ValueError(f"{op}: scale must have {grid} elements for input {(m, n)} and group_shape {(gm, gn)}, "
                         f"got shape {tuple(scale.shape)}")
    return scale.reshape(grid), gm, gn


@planned
def scaled_fp8_quant(input: torch.Tensor, scale: torch.Tensor | None = None, num_token_padding: int | None = None,
                     scale_ub: torch.Tensor | None = None, use_per_token_if_dynamic: bool = False,
                     output: torch.Tensor | None = None,
                     group_shape: tuple[int, int] | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """vLLM's ``scaled_fp8_quant`` of a 2-D input: ``(output, scale)``; the scale the
    caller's (static) or fp32 (1,) per tensor, (rows, 1) per token (dynamic)."""
    op = "scaled_fp8_quant"
    _check_input(op, input, "input")
    if input.dim() != 2:
        raise ValueError(f"{op}: input must be 2-D [num_tokens, hidden], got shape {tuple(input.shape)}")
    per_token = check_bool(op, "use_per_token_if_dynamic", use_per_token_if_dynamic)
    m, n = input.shape
    rows = m
    if num_token_padding:
        rows = max(check_int(op, "num_token_padding", num_token_padding, 0), m)
    if output is None:
        output = torch.empty((rows, n), dtype=get_fp8_e4m3_dtype(input.device), device=input.device)
    else:
        if num_token_padding:
            raise ValueError(f"{op}: num_token_padding cannot go with output (pad the output you pass)")
        _quant_dtype(op, "output's dtype", _tensor(op, "output", output).dtype, input.device, _FP8)
    q = output if rows == m else output[:m]
    names = ("output", "input", "scale")
    if scale is not None:
        _tensor(op, "scale", scale, torch.float32)
        if scale.numel() == 1 and group_shape in (None, (-1, -1), [-1, -1]):
            _static(op, q, input, scale, names)
            return output, scale
        check_same_device(op, "scale", scale, "input", input)
        _check_q(op, q, input, names[:2])
        if not input.numel():  # no rows (or columns) to take the scale's grid from
            return output, scale
        s2, gm, gn = _static_groups(op, scale, m, n, group_shape)
        _launch_static_quant(*_rows(op, q, input, names), s2, None, gm, gn)
        return output, scale
    if per_token:
        s = torch.empty((rows, 1), dtype=torch.float32, device=input.device)
        _per_token(op, q, input, s if rows == m else s[:m], scale_ub, names=names)
        return output, s
    s = torch.empty(1, dtype=torch.float32, device=input.device)
    _dynamic_per_tensor(op, q, input, s, names=names)
    return output, s


@planned
def scaled_int8_quant(input: torch.Tensor, scale: torch.Tensor | None = None, azp: torch.Tensor | None = None,
                      symmetric: bool = True) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """vLLM's ``scaled_int8_quant``: ``(output, scale, azp)``. Static (``scale`` one fp32
    element; ``azp`` one int32 element exactly when not ``symmetric``): the caller's scale
    and azp returned. Dynamic per token: scales fp32 (rows, 1), and azps int32 (rows, 1)
    where not ``symmetric`` (else None)."""
    op = "scaled_int8_quant"
    _check_input(op, input, "input")
    symmetric = check_bool(op, "symmetric", symmetric)
    output = torch.empty(input.shape, dtype=torch.int8, device=input.device)
    if scale is not None:
        if symmetric != (azp is None):
            raise ValueError(f"{op}: azp must be given exactly for asymmetric static quantization (symmetric=False); "
                             f"got symmetric={symmetric} and azp {'given' if azp is not None else 'None'}")
        if azp is None:
            _static(op, output, input, scale, ("output", "input", "scale"))
        else:
            _int8_azp(op, output, input, scale, azp, False, names=("output", "input", "scale", "azp"))
        return output, scale, azp
    rows = input.numel() // input.shape[-1] if input.shape[-1] else math.prod(input.shape[:-1])
    scales = torch.empty((rows, 1), dtype=torch.float32, device=input.device)
    if symmetric:
        _per_token(op, output, input, scales, None, names=("output", "input", "scales"))
        return output, scales, None
    azps = torch.empty((rows, 1), dtype=torch.int32, device=input.device)
    _int8_azp(op, output, input, scales, azps, True, names=("output", "input", "scales", "azps"))
    return output, scales, azps


def _group_scales(op: str, x: torch.Tensor, n_groups: int, column_major: bool, tma_alignment: int) -> torch.Tensor:
    """vLLM's scale layouts: row-major (*lead, G); column-major (stride 1 along the rows);
    column-major with the rows padded to ``tma_alignment`` (per 2-D slice)."""
    dev = x.device
    if not column_major:
        return torch.empty((*x.shape[:-1], n_groups), dtype=torch.float32, device=dev)
    if x.dim() < 2:
        raise ValueError(f"{op}: column-major scales need an input of at least 2 dims, got shape {tuple(x.shape)}")
    m = x.shape[-2]
    if not tma_alignment:
        return torch.empty((*x.shape[:-2], n_groups, m), dtype=torch.float32, device=dev).transpose(-1, -2)
    aligned = cdiv(m, tma_alignment) * tma_alignment
    stride = (1, aligned) if x.dim() == 2 else (aligned * n_groups, 1, aligned)
    if x.dim() > 3:
        raise ValueError(f"{op}: TMA-aligned scales need a 2-D or 3-D input, got shape {tuple(x.shape)}")
    return torch.empty_strided((*x.shape[:-2], m, n_groups), stride, dtype=torch.float32, device=dev)


def _group_into(op: str, q: torch.Tensor, y: torch.Tensor, s: torch.Tensor, group_size: int, eps: float,
                names, ue8m0: bool = False) -> None:
    """Group quantization of ``y`` into ``q`` and ``s`` (any vLLM layout: slices of a 3-D
    column-major scale one at a time)."""
    if s.dim() > 2 and s.stride(-2) == 1 and y.shape[-2] > 1:
        for i in range(y.shape[0]):
            _group(op, q[i], y[i], s[i], group_size, eps, names, ue8m0)
        return
    _group(op, q, y, s, group_size, eps, names, ue8m0)


@planned
def per_token_group_quant_fp8(x: torch.Tensor, group_size: int, eps: float = 1e-10, dtype: torch.dtype | None = None,
                              column_major_scales: bool = False, tma_aligned_scales: bool = False,
                              out_q: torch.Tensor | None = None,
                              use_ue8m0: bool | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """vLLM's ``per_token_group_quant_fp8``: ``(x_q, x_s)``, a scale ``max(amax, eps) / q_max``
    (rounded up to a power of 2 with ``use_ue8m0``; None: False, no DeepGEMM e8m0 here) per
    ``group_size`` columns; ``group_size`` divides the last dim."""
    op = "per_token_group_quant_fp8"
    _check_input(op, x, "x")
    group_size = check_int(op, "group_size", group_size, 1)
    if x.shape[-1] % group_size:
        raise ValueError(f"{op}: group_size {group_size} must divide x's last dim, got shape {tuple(x.shape)}")
    eps = check_real(op, "eps", eps, positive=True)
    column_major = check_bool(op, "column_major_scales", column_major_scales)
    tma = check_bool(op, "tma_aligned_scales", tma_aligned_scales)
    ue8m0 = False if use_ue8m0 is None else check_bool(op, "use_ue8m0", use_ue8m0)
    dtype = get_fp8_e4m3_dtype(x.device) if dtype is None else _quant_dtype(op, "dtype", dtype, x.device)
    if out_q is None:
        out_q = torch.empty(x.shape, dtype=dtype, device=x.device)
    elif tuple(_tensor(op, "out_q", out_q).shape) != tuple(x.shape):
        raise ValueError(f"{op}: out_q must have x's shape {tuple(x.shape)}, got {tuple(out_q.shape)}")
    x_s = _group_scales(op, x, x.shape[-1] // group_size, column_major, 4 if tma else 0)
    _group_into(op, out_q, x, x_s, group_size, eps, ("out_q", "x", "x_s"), ue8m0)
    return out_q, x_s


# ---------------------------------------------------------------------------
# RMSNorm + quantization


def _check_norm_args(op: str, input, weight, residual) -> None:
    check_input(op, input)
    if weight is not None:
        _tensor(op, "weight", weight)
        if tuple(weight.shape) != (input.shape[-1],):
            raise ValueError(f"{op}: weight must have shape ({input.shape[-1]},) (input's last dim), got "
                             f"{tuple(weight.shape)}")
        check_same_device(op, "weight", weight, "input", input)
    if residual is not None:
        _tensor(op, "residual", residual)


def _normed(op: str, input, weight, epsilon, residual) -> torch.Tensor:
    """vLLM's RMSNorm of ``input`` (plus ``residual``, updated in place) in input's dtype:
    ``x * rstd`` rounded to the dtype, then the weight."""
    _check_norm_args(op, input, weight, residual)
    eps = check_real(op, "epsilon", epsilon, positive=True)
    y = torch.empty(input.shape, dtype=input.dtype, device=input.device)
    if residual is not None:
        norm_with_add(op, y, input, residual, residual, weight, None, eps, is_rms=True,
                      names=("output", "residual", "residual"), casting_mode="llama")
    elif input.numel():
        _launch_norm_fwd(rows_view(op, "input", input, writable=False), y.view(-1, input.shape[-1]), weight, None,
                         eps, True, None, None, None, 0.0, None, None, casting_mode="llama")
    return y


@planned
def rms_norm_dynamic_per_token_quant(input: torch.Tensor, weight: torch.Tensor, epsilon: float,
                                     quant_dtype: torch.dtype, scale_ub: torch.Tensor | None = None,
                                     residual: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """vLLM's: ``(output, scales)``, output of ``quant_dtype`` (fp8 or int8), scales fp32
    (rows, 1), a row's ``max(min(amax, scale_ub) / q_max, 1 / (q_max * 512))``."""
    op = "rms_norm_dynamic_per_token_quant"
    check_input(op, input)
    dtype = _quant_dtype(op, "quant_dtype", quant_dtype, input.device)
    _check_norm_args(op, input, weight, residual)
    out = torch.empty(input.shape, dtype=dtype, device=input.device)
    scales = torch.empty((math.prod(input.shape[:-1]), 1), dtype=torch.float32, device=input.device)
    norm_quant(op, out, input, weight, None, check_real(op, "epsilon", epsilon, positive=True), is_rms=True,
               yscale=scales, scale_ub=scale_ub, residual_in=residual, residual_out=residual,
               names=("output", "residual", "residual"), yscale_name="scales", casting_llama=True)
    return out, scales


def _no_ub(op: str, scale_ub) -> None:
    if scale_ub is not None:
        raise ValueError(f"{op}: scale_ub is not supported by the per-group form (its group scales are uncapped); "
                         "pass None")


def _fused_rms_per_block(op: str, input, weight, epsilon, dtype, gn: int, residual, transposed: bool,
                         tma_alignment: int) -> tuple[torch.Tensor, torch.Tensor]:
    """rms_norm_per_block_quant in one launch: rows of 2-D ``input`` whole in registers
    (the fused RMSNorm + group quant kernel, with Llama's roundings)."""
    _check_norm_args(op, input, weight, residual)
    eps = check_real(op, "epsilon", epsilon, positive=True)
    x2 = rows_view(op, "input", input, writable=False)
    r2 = None
    if residual is not None:
        check_like(op, "residual", residual, input)
        if residual.dtype != input.dtype:
            raise TypeError(f"{op}: residual must have input's dtype {input.dtype}, got {residual.dtype}")
        r2 = rows_view(op, "residual", residual, writable=True)
        check_written(op, [("residual", r2), ("input", x2), ("weight", weight)], frozenset(("residual",)), {})
    out = torch.empty(input.shape, dtype=dtype, device=input.device)
    scales = _group_scales(op, input, input.shape[-1] // gn, transposed, tma_alignment)
    w = weight if weight.stride(0) == 1 else weight.contiguous()
    _launch_fused_rms_quant(x2, w, r2, r2, None, out, scales, None, None, None, eps, 0.0, gn, True,
                            casting_llama=True)
    return out, scales


@planned
def rms_norm_per_block_quant(input: torch.Tensor, weight: torch.Tensor, epsilon: float, quant_dtype: torch.dtype,
                             group_size: list[int], scale_ub: torch.Tensor | None = None,
                             residual: torch.Tensor | None = None, is_scale_transposed: bool = False,
                             tma_alignment: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """vLLM's: RMSNorm then a scale per ``group_size[1]`` columns of a row, ``max(amax,
    1e-10) / q_max``; scales (rows, G), column-major where ``is_scale_transposed`` (rows
    padded to ``tma_alignment``, 0 or 4)."""
    op = "rms_norm_per_block_quant"
    check_input(op, input)
    if not isinstance(group_size, (list, tuple)) or len(group_size) != 2:
        raise ValueError(f"{op}: group_size must be a list of 2 ints, got {group_size!r}")
    gn = check_int(op, "group_size[1]", group_size[1], 1)
    if input.shape[-1] % gn:
        raise ValueError(f"{op}: group_size[1] {gn} must divide input's last dim, got shape {tuple(input.shape)}")
    transposed = check_bool(op, "is_scale_transposed", is_scale_transposed)
    if tma_alignment not in (0, 4) or isinstance(tma_alignment, bool):
        raise ValueError(f"{op}: tma_alignment must be 0 or 4, got {tma_alignment!r}")
    _no_ub(op, scale_ub)
    dtype = _quant_dtype(op, "quant_dtype", quant_dtype, input.device)
    n_groups = input.shape[-1] // gn
    rows = math.prod(input.shape[:-1])
    if input.dim() == 2 and rows and weight is not None and input.shape[-1] <= _FUSED_MAX_COLS:
        return _fused_rms_per_block(op, input, weight, epsilon, dtype, gn, residual, transposed, tma_alignment)
    y = _normed(op, input, weight, epsilon, residual)
    out = torch.empty(input.shape, dtype=dtype, device=input.device)
    names = ("output", "input", "scales")
    if transposed and tma_alignment:
        scales = _group_scales(op, input, n_groups, True, tma_alignment)
        _group_into(op, out, y, scales, gn, GROUP_EPS, names)
        return out, scales
    if transposed:
        scales = torch.empty((n_groups, rows), dtype=torch.float32, device=input.device).transpose(0, 1)
    else:
        scales = torch.empty((rows, n_groups), dtype=torch.float32, device=input.device)
    _group(op, out.view(rows, -1), y.view(rows, -1), scales, gn, GROUP_EPS, names)
    return out, scales


@planned
def silu_and_mul_per_block_quant(input: torch.Tensor, group_size: int, quant_dtype: torch.dtype,
                                 scale_ub: torch.Tensor | None = None,
                                 is_scale_transposed: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """vLLM's: ``silu(input[:, :d]) * input[:, d:]`` (2-D input [tokens, 2 * d]) quantized
    per ``group_size`` columns, scales ``max(amax, 1e-10) / q_max`` (tokens, d / group_size),
    column-major where ``is_scale_transposed``."""
    op = "silu_and_mul_per_block_quant"
    check_input(op, input)
    if input.dim() != 2 or input.shape[-1] % 2:
        raise ValueError(f"{op}: input must be 2-D [num_tokens, 2 * hidden] (gate || up), got shape "
                         f"{tuple(input.shape)}")
    d = input.shape[-1] // 2
    group_size = check_int(op, "group_size", group_size, 1)
    if d % group_size or group_size & (group_size - 1):
        raise ValueError(f"{op}: group_size must be a power of 2 dividing the hidden size {d}, got {group_size}")
    transposed = check_bool(op, "is_scale_transposed", is_scale_transposed)
    _no_ub(op, scale_ub)
    dtype = _quant_dtype(op, "quant_dtype", quant_dtype, input.device)
    return act_mul_and_fp8_group_quant(input, "silu", group_size, dtype, transposed)
