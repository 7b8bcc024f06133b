"""RMSNorm / LayerNorm fused with fp8 / int8 quantization on the Triton backend.

aiter's names and argument orders (``out`` is the quantized output; its dtype picks
the format: float8_e4m3fn, float8_e4m3fnuz, float8_e5m2 or int8):

* ``rmsnorm2d_fwd_with_dynamicquant(out, input, yscale, weight, epsilon, scale_ub=None,
  clamp_out=False, dump_rms_norm=False)``: a scale per row into ``yscale``;
* ``rmsnorm2d_fwd_with_smoothquant(out, input, xscale, yscale, weight, epsilon)``: the
  normalized row times ``xscale`` (per column), then as the dynamic form;
* ``rmsnorm2d_fwd_with_add_dynamicquant`` / ``_add_smoothquant(out, input, residual_in,
  residual_out, [xscale,] yscale, weight, epsilon)``: ``residual_out = input +
  residual_in`` first, normalized;
* ``layernorm2d_fwd_with_dynamicquant`` / ``_smoothquant`` / ``_add_dynamicquant`` /
  ``_add_smoothquant``: the same with LayerNorm's ``weight, bias, epsilon, x_bias``.

And vLLM's static per-tensor forms: ``rms_norm_static_fp8_quant(out, input, weight,
scale, epsilon)``, ``fused_add_rms_norm_static_fp8_quant(out, input, residual, weight,
scale, epsilon)`` (``residual += input`` in place), and its dynamic per-token
``rms_norm_dynamic_per_token_quant(out, input, weight, scales, epsilon, scale_ub=None,
residual=None)``.

Semantics: the normalized row is what this project's unfused norm stores (rounded to
the input's dtype); it is quantized as the quant ops quantize (``aiter_lite.ops.triton.
quant``): so each op equals its unfused sequence (norm, then quantization). Dynamic
scales are ``max(min(amax, scale_ub) / q_max, 1 / (q_max * 512))``; values saturate to
the output dtype's range (``clamp_out`` is accepted and always in effect). Inputs of
any rank, rows may be strided (unit last stride); fp32 / fp16 / bf16; math in fp32.
``epsilon`` is a finite real >= 0.

NaN and inf, as the unfused sequence: a row holding either normalizes to NaN (an inf
gives inf / inf), so its dynamic scale is NaN and its values NaN in fp8 (e4m3fn,
e4m3fnuz, e5m2) or 0 in int8 (no NaN code; the NaN scale marks the row). Other rows
are unaffected. Under a static scale the row's NaN values are NaN (fp8) or 0 (int8).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import torch

from aiter_lite.ops.triton._triton_kernels.quant.norm_quant import _norm_quant_kernel
from aiter_lite.ops.triton.normalization.norm import (
    _int64,
    _MIN_STATIC_CHUNK,
    _static_chunks,
    check_eps,
    check_input,
    check_like,
    check_vector,
)
from aiter_lite.ops.triton.quant.quant import (
    _check_q,
    _check_scale,
    _scale_vector,
    _soft_round,
)
from aiter_lite.spec.device import INTERPRETER, DeviceProfile, device_profile
from aiter_lite.spec.normalization import LAYER_NORM_EPS
from aiter_lite.spec.quant import min_scale, quant_range
from aiter_lite.utils.checks import check_bool, rows_view
from aiter_lite.utils.fast_launch import launch
from aiter_lite.utils.launch import cdiv, grid_sms, next_power_of_2
from aiter_lite.utils.launcher import launcher
from aiter_lite.utils.logger import debug_on, log_call
from aiter_lite.utils.registry import public_op

# why the public ops here refuse a call autograd would record (utils.registry.public_op)
_NO_GRAD = "its outputs are quantized values and scales"

__all__ = [
    "rmsnorm2d_fwd_with_dynamicquant",
    "rmsnorm2d_fwd_with_smoothquant",
    "rmsnorm2d_fwd_with_add_dynamicquant",
    "rmsnorm2d_fwd_with_add_smoothquant",
    "layernorm2d_fwd_with_dynamicquant",
    "layernorm2d_fwd_with_smoothquant",
    "layernorm2d_fwd_with_add_dynamicquant",
    "layernorm2d_fwd_with_add_smoothquant",
    "rms_norm_static_fp8_quant",
    "fused_add_rms_norm_static_fp8_quant",
    "rms_norm_dynamic_per_token_quant",
    "norm_quant_launch_config",
    "NormQuantLaunchConfig",
]


@dataclass(frozen=True)
class NormQuantLaunchConfig:
    BLOCK_M: int  # rows per program (1 when LOOPED)
    BLOCK_N: int  # columns per step: the whole row unless LOOPED
    num_warps: int
    LOOPED: bool = False  # one row per program in BLOCK_N chunks
    STATIC: bool = False  # looped: the row width compiled in (every pass unrolled; one build per width)


# Rows up to _MAX_ROW_IN_REGS in registers, several to a program up to a _TILE-element
# tile, halved until the grid has two programs per SM, 32 elements a lane (4 to 16 warps);
# wider rows (with a residual, from _MAX_ADD_ROW_IN_REGS: the row, its residual and its
# normalized value in registers spill at 16384) looped in _LOOP_BLOCK chunks, or with the
# width compiled in (_STATIC_LOOPS). Measured on an H200 (bf16 to e4m3fn, dynamic per
# token, us): in registers 32 elements a lane against 16: RMSNorm 8192 x 8192 65.9 / 76.2,
# LayerNorm 83.6 / 104.3, fused add + RMSNorm 118.1 / 127.5; RMSNorm 16384 x 14336 237 in
# registers against 247 looped (STATIC) and 321 runtime-looped.
_TILE = 2048
_MAX_ROW_IN_REGS = 16384
_MAX_ADD_ROW_IN_REGS = 8192
_LOOP_BLOCK = 4096
_MAX_WARPS = 16

# Looped rows with the width compiled in (STATIC: every pass unrolled, its chunks' loads
# issued together), from one wave of rows up (n_rows >= SMs), by (is_rms, residual,
# power-of-2 width); the chunk narrowed to one dividing the row by norm.py's
# _static_chunks. Measured (H200, dynamic per token, us): LayerNorm 16384 x 14336 325.6
# in 2048-wide chunks with 8 warps against 434 in registers and 449 runtime-looped; 4096 x
# 16384 101.5 against 107.8 for 4096-wide chunks; 2048 x 32768 111.0 (8192 / 32 warps
# 130.2). RMSNorm 2048 x 32768 83.7. Fused add: LayerNorm 4096 x 16384 156.5 (8192 / 32
# warps: 206.1), 2048 x 32768 171.8 against 178.8 runtime-looped; RMSNorm 4096 x 16384
# 129.5, 2048 x 32768 135.8 against 176.1. LayerNorm at 8192 and RMSNorm at 16384 stay
# in registers (83.6 against 101.5; 69.4 against 97.8 at 4096 x 16384). Fused add +
# RMSNorm at 14336 keeps a partial last 8192-wide chunk (_MIN_CHUNK): 16384 / 4096 / 1024
# rows 440.3 / 120.9 / 39.0 against 462.8 / 128.6 / 40.5 in 2048-wide whole chunks; at
# 16384 wide 8 warps match 32 (130.8 against 129.1 at 4096 rows).
_STATIC_LOOPS = {
    (False, False, 16384): NormQuantLaunchConfig(1, 2048, 8, LOOPED=True, STATIC=True),
    (False, False, 32768): NormQuantLaunchConfig(1, 2048, 8, LOOPED=True, STATIC=True),
    (True, False, 32768): NormQuantLaunchConfig(1, 8192, 32, LOOPED=True, STATIC=True),
    (False, True, 16384): NormQuantLaunchConfig(1, 4096, 8, LOOPED=True, STATIC=True),
    (False, True, 32768): NormQuantLaunchConfig(1, 4096, 32, LOOPED=True, STATIC=True),
    (True, True, 16384): NormQuantLaunchConfig(1, 8192, 8, LOOPED=True, STATIC=True),
    (True, True, 32768): NormQuantLaunchConfig(1, 8192, 32, LOOPED=True, STATIC=True),
}
# The narrowest chunk _static_chunks may take for a table entry (default 2048).
_MIN_CHUNK = {(True, True, 16384): 4096}


def _warps(tile: int, profile: DeviceProfile) -> int:
    # ptxas for sm_80 spills a 4-warp fused-add program at 32 elements a lane (SmoothQuant
    # of a 4096 row: 4 B in 80 registers); 16 a lane builds in 48 (scripts/check_targets.py)
    return profile.warps_for(tile, 16 if profile.arch == "sm_80" else 32, hi=_MAX_WARPS)


@functools.lru_cache(maxsize=1024)
def norm_quant_launch_config(n_rows: int, n_cols: int, profile: DeviceProfile = INTERPRETER,
                             residual: bool = False, is_rms: bool = True) -> NormQuantLaunchConfig:
    """Tile and warps of a fused norm + quant launch over (n_rows, n_cols), ``residual``
    for the fused-add forms, ``is_rms`` for RMSNorm (else LayerNorm); warps within what a
    program of ``profile`` may have."""
    return profile.fit(_norm_quant_config(n_rows, n_cols, profile, residual, is_rms))


def _norm_quant_config(n_rows: int, n_cols: int, profile: DeviceProfile, residual: bool,
                       is_rms: bool) -> NormQuantLaunchConfig:
    row = next_power_of_2(max(n_cols, 1))
    sms = grid_sms(profile, 1)
    key = (is_rms, residual, row)
    static = _STATIC_LOOPS.get(key)
    if static is not None and n_rows >= sms:
        return _static_chunks(static, n_cols, profile.warp_size, _MIN_CHUNK.get(key, _MIN_STATIC_CHUNK))
    if row > _MAX_ROW_IN_REGS or (residual and row > _MAX_ADD_ROW_IN_REGS):
        return NormQuantLaunchConfig(1, _LOOP_BLOCK, 8, LOOPED=True)
    block_m = min(max(_TILE // row, 1), next_power_of_2(max(n_rows, 1)))
    while block_m > 1 and cdiv(n_rows, block_m) < 2 * sms:
        block_m //= 2
    return NormQuantLaunchConfig(block_m, row, _warps(block_m * row, profile))


@launcher(mutates=("q2", "scale", "r_out2", "y2"))
def _launch_norm_quant(x2: torch.Tensor, q2: torch.Tensor, scale: torch.Tensor, r2: torch.Tensor | None,
                       r_out2: torch.Tensor | None, x_bias: torch.Tensor | None, weight: torch.Tensor | None,
                       bias: torch.Tensor | None, xscale: torch.Tensor | None, scale_ub: torch.Tensor | None,
                       y2: torch.Tensor | None, eps: float, weight_offset: float, is_rms: bool, dynamic: bool,
                       config: NormQuantLaunchConfig | None = None, casting_llama: bool = False) -> None:
    """The fused norm + quant over 2-D row views: q2, and the per-row scales (``dynamic``)
    into ``scale``, or by the one-element ``scale``; residual_out and the normalized rows
    (y2) where given. ``casting_llama``: RMSNorm with Hugging Face Llama's / vLLM's roundings
    (the sum normalized as stored; ``x * rstd`` rounded to the dtype before the weight)."""
    n_rows, n_cols = x2.shape
    cfg = config or norm_quant_launch_config(n_rows, n_cols, device_profile(x2.device), r2 is not None, is_rms)
    if not cfg.LOOPED and cfg.BLOCK_N < n_cols:
        raise ValueError(f"norm_quant: a launch that does not loop holds whole rows: BLOCK_N >= the {n_cols} "
                         f"columns; got {cfg}")
    q_min, q_max = quant_range(q2.dtype)
    has_res = r2 is not None
    launch(
        _norm_quant_kernel, (n_rows if cfg.LOOPED else cdiv(n_rows, cfg.BLOCK_M),),
        x2, r2, r_out2, x_bias, weight, bias, xscale, q2, scale, scale_ub, y2,
        x2.stride(0), r2.stride(0) if has_res else 0, r_out2.stride(0) if has_res else 0, q2.stride(0),
        y2.stride(0) if y2 is not None else 0, scale.stride(0) if dynamic else 0,
        n_rows, n_cols, eps, weight_offset, q_min, q_max, min_scale(q2.dtype),
        IS_RMS=is_rms, HAS_RESIDUAL=has_res, HAS_X_BIAS=x_bias is not None, HAS_WEIGHT=weight is not None,
        HAS_BIAS=bias is not None, HAS_SMOOTH=xscale is not None, DYNAMIC=dynamic, HAS_UB=scale_ub is not None,
        STORE_Y=y2 is not None, INT64=_int64(x2, q2, r2, r_out2, y2), SOFT_ROUND=_soft_round(q2.dtype, q2.device),
        CASTING_LLAMA=casting_llama,
        N_STATIC=n_cols if cfg.LOOPED and cfg.STATIC else 0, LOOPED=cfg.LOOPED, BLOCK_M=cfg.BLOCK_M,
        BLOCK_N=cfg.BLOCK_N, num_warps=cfg.num_warps,
    )


def norm_quant(op: str, out, input, weight, bias, epsilon, *, is_rms: bool, yscale=None, scale=None, xscale=None,
               residual_in=None, residual_out=None, x_bias=None, scale_ub=None, dump: bool = False,
               weight_offset: float = 0.0, names: tuple[str, str, str] = ("out", "residual_in", "residual_out"),
               yscale_name: str = "yscale", config: NormQuantLaunchConfig | None = None,
               casting_llama: bool = False) -> torch.Tensor | None:
    """Checked fused norm + quant of ``input`` into ``out``: dynamic per row into ``yscale``,
    or static by the one-element ``scale``; returns the normalized rows (input's dtype)
    where ``dump``, else None. ``names``: the caller's names of out and the residuals.
    ``config`` pins a launch (tests, tuning); ``casting_llama``: vLLM's roundings (RMSNorm)."""
    out_name, r_name, r_out_name = names
    dynamic = scale is None
    check_input(op, input)
    _check_q(op, out, input, (out_name, "input"))
    n = input.shape[-1]
    n_rows = math.prod(input.shape[:-1])
    if residual_in is not None:
        check_like(op, r_name, residual_in, input)
        check_like(op, r_out_name, residual_out, input)
    for name, v in (("weight", weight), ("bias", bias), ("x_bias", x_bias), ("xscale", xscale)):
        check_vector(op, name, v, n, input)
    if dynamic:
        _check_scale(op, yscale_name, yscale, n_rows, input, "input")
    else:
        _check_scale(op, "scale", scale, 1, input, "input")
    if scale_ub is not None:
        _check_scale(op, "scale_ub", scale_ub, 1, input, "input")
    eps = check_eps(op, "epsilon", epsilon)
    if debug_on():
        log_call(op, out=out, input=input, residual_in=residual_in, residual_out=residual_out, weight=weight,
                 bias=bias, x_bias=x_bias, xscale=xscale, yscale=yscale, scale=scale, scale_ub=scale_ub,
                 epsilon=eps)
    y = torch.empty_like(input) if dump else None
    if input.numel() == 0:
        if dynamic and yscale.numel():  # rows of no columns: the floor
            yscale.fill_(min_scale(out.dtype))
        return y
    rows = lambda name, t, w: None if t is None else rows_view(op, name, t, writable=w)  # noqa: E731
    args = (rows("input", input, False), rows(out_name, out, True),
            _scale_vector(op, yscale_name, yscale) if dynamic else scale.reshape(1),
            rows(r_name, residual_in, False), rows(r_out_name, residual_out, True), x_bias, weight, bias, xscale,
            None if scale_ub is None else scale_ub.reshape(1), rows("dump", y, True), eps, float(weight_offset),
            is_rms, dynamic)
    _launch_norm_quant(*args, config, casting_llama)
    return y


# ---------------------------------------------------------------------------
# aiter's names: RMSNorm


def _static_scale(op: str, scale) -> torch.Tensor:
    """A static op's ``scale``: a tensor (None would ask ``norm_quant`` for a dynamic one)."""
    if not isinstance(scale, torch.Tensor):
        raise TypeError(f"{op}: scale must be a torch.Tensor, got {type(scale).__name__}")
    return scale


@public_op(mutates=("out", "yscale"), no_grad=_NO_GRAD)
def rmsnorm2d_fwd_with_dynamicquant(out: torch.Tensor, input: torch.Tensor, yscale: torch.Tensor,
                                    weight: torch.Tensor | None, epsilon: float,
                                    scale_ub: torch.Tensor | None = None, clamp_out: bool = False,
                                    dump_rms_norm: bool = False) -> torch.Tensor | None:
    """``out, yscale = dynamic_per_token_quant(rms_norm(input, weight, epsilon))``; returns the
    normalized rows (input's dtype) where ``dump_rms_norm``, else None."""
    op = "rmsnorm2d_fwd_with_dynamicquant"
    check_bool(op, "clamp_out", clamp_out)
    return norm_quant(op, out, input, weight, None, epsilon, is_rms=True, yscale=yscale, scale_ub=scale_ub,
                      dump=check_bool(op, "dump_rms_norm", dump_rms_norm))


@public_op(mutates=("out", "yscale"), no_grad=_NO_GRAD)
def rmsnorm2d_fwd_with_smoothquant(out: torch.Tensor, input: torch.Tensor, xscale: torch.Tensor,
                                   yscale: torch.Tensor, weight: torch.Tensor | None, epsilon: float) -> None:
    """``out, yscale = dynamic_per_token_quant(rms_norm(input, weight, epsilon) * xscale)``."""
    norm_quant("rmsnorm2d_fwd_with_smoothquant", out, input, weight, None, epsilon, is_rms=True, yscale=yscale,
               xscale=xscale)


@public_op(mutates=("out", "residual_out", "yscale"), aliases={"residual_out": ("residual_in",)}, no_grad=_NO_GRAD)
def rmsnorm2d_fwd_with_add_dynamicquant(out: torch.Tensor, input: torch.Tensor, residual_in: torch.Tensor,
                                        residual_out: torch.Tensor, yscale: torch.Tensor,
                                        weight: torch.Tensor | None, epsilon: float) -> None:
    """``residual_out = input + residual_in``; ``out, yscale`` its RMSNorm quantized per row."""
    norm_quant("rmsnorm2d_fwd_with_add_dynamicquant", out, input, weight, None, epsilon, is_rms=True,
               yscale=yscale, residual_in=residual_in, residual_out=residual_out)


@public_op(mutates=("out", "residual_out", "yscale"), aliases={"residual_out": ("residual_in",)}, no_grad=_NO_GRAD)
def rmsnorm2d_fwd_with_add_smoothquant(out: torch.Tensor, input: torch.Tensor, residual_in: torch.Tensor,
                                       residual_out: torch.Tensor, xscale: torch.Tensor, yscale: torch.Tensor,
                                       weight: torch.Tensor | None, epsilon: float) -> None:
    """``residual_out = input + residual_in``; ``out, yscale`` its RMSNorm times xscale, per row."""
    norm_quant("rmsnorm2d_fwd_with_add_smoothquant", out, input, weight, None, epsilon, is_rms=True,
               yscale=yscale, xscale=xscale, residual_in=residual_in, residual_out=residual_out)


# ---------------------------------------------------------------------------
# aiter's names: LayerNorm


@public_op(mutates=("out", "yscale"), no_grad=_NO_GRAD)
def layernorm2d_fwd_with_dynamicquant(out: torch.Tensor, input: torch.Tensor, yscale: torch.Tensor,
                                      weight: torch.Tensor | None, bias: torch.Tensor | None,
                                      epsilon: float = LAYER_NORM_EPS, x_bias: torch.Tensor | None = None) -> None:
    """``out, yscale = dynamic_per_token_quant(layer_norm(input + x_bias, weight, bias, epsilon))``."""
    norm_quant("layernorm2d_fwd_with_dynamicquant", out, input, weight, bias, epsilon, is_rms=False,
               yscale=yscale, x_bias=x_bias)


@public_op(mutates=("out", "yscale"), no_grad=_NO_GRAD)
def layernorm2d_fwd_with_smoothquant(out: torch.Tensor, input: torch.Tensor, xscale: torch.Tensor,
                                     yscale: torch.Tensor, weight: torch.Tensor | None, bias: torch.Tensor | None,
                                     epsilon: float = LAYER_NORM_EPS, x_bias: torch.Tensor | None = None) -> None:
    """``out, yscale = dynamic_per_token_quant(layer_norm(...) * xscale)``."""
    norm_quant("layernorm2d_fwd_with_smoothquant", out, input, weight, bias, epsilon, is_rms=False,
               yscale=yscale, xscale=xscale, x_bias=x_bias)


@public_op(mutates=("out", "residual_out", "yscale"), aliases={"residual_out": ("residual_in",)}, no_grad=_NO_GRAD)
def layernorm2d_fwd_with_add_dynamicquant(out: torch.Tensor, input: torch.Tensor, residual_in: torch.Tensor,
                                          residual_out: torch.Tensor, yscale: torch.Tensor,
                                          weight: torch.Tensor | None, bias: torch.Tensor | None,
                                          epsilon: float = LAYER_NORM_EPS, x_bias: torch.Tensor | None = None) -> None:
    """``residual_out = input + residual_in (+ x_bias)``; ``out, yscale`` its LayerNorm quantized per row."""
    norm_quant("layernorm2d_fwd_with_add_dynamicquant", out, input, weight, bias, epsilon, is_rms=False,
               yscale=yscale, residual_in=residual_in, residual_out=residual_out, x_bias=x_bias)


@public_op(mutates=("out", "residual_out", "yscale"), aliases={"residual_out": ("residual_in",)}, no_grad=_NO_GRAD)
def layernorm2d_fwd_with_add_smoothquant(out: torch.Tensor, input: torch.Tensor, residual_in: torch.Tensor,
                                         residual_out: torch.Tensor, xscale: torch.Tensor, yscale: torch.Tensor,
                                         weight: torch.Tensor | None, bias: torch.Tensor | None,
                                         epsilon: float = LAYER_NORM_EPS, x_bias: torch.Tensor | None = None) -> None:
    """``residual_out = input + residual_in (+ x_bias)``; ``out, yscale`` its LayerNorm times xscale, per row."""
    norm_quant("layernorm2d_fwd_with_add_smoothquant", out, input, weight, bias, epsilon, is_rms=False,
               yscale=yscale, xscale=xscale, residual_in=residual_in, residual_out=residual_out, x_bias=x_bias)


# ---------------------------------------------------------------------------
# vLLM's names


@public_op(mutates=("out",), no_grad=_NO_GRAD)
def rms_norm_static_fp8_quant(out: torch.Tensor, input: torch.Tensor, weight: torch.Tensor | None,
                              scale: torch.Tensor, epsilon: float) -> None:
    """``out = static_per_tensor_quant(rms_norm(input, weight, epsilon), scale)``."""
    norm_quant("rms_norm_static_fp8_quant", out, input, weight, None, epsilon, is_rms=True,
               scale=_static_scale("rms_norm_static_fp8_quant", scale))


@public_op(mutates=("out", "residual"), no_grad=_NO_GRAD)
def fused_add_rms_norm_static_fp8_quant(out: torch.Tensor, input: torch.Tensor, residual: torch.Tensor,
                                        weight: torch.Tensor | None, scale: torch.Tensor, epsilon: float) -> None:
    """``residual += input`` (in place); ``out = static_per_tensor_quant(rms_norm(residual), scale)``."""
    op = "fused_add_rms_norm_static_fp8_quant"
    norm_quant(op, out, input, weight, None, epsilon, is_rms=True, scale=_static_scale(op, scale),
               residual_in=residual, residual_out=residual, names=("out", "residual", "residual"))


@public_op(mutates=("out", "scales", "residual"), no_grad=_NO_GRAD)
def rms_norm_dynamic_per_token_quant(out: torch.Tensor, input: torch.Tensor, weight: torch.Tensor | None,
                                     scales: torch.Tensor, epsilon: float, scale_ub: torch.Tensor | None = None,
                                     residual: torch.Tensor | None = None) -> None:
    """vLLM's: with ``residual``, ``residual += input`` (in place) and the sum normalized;
    ``out, scales = dynamic_per_token_quant(rms_norm(...), scale_ub)``."""
    norm_quant("rms_norm_dynamic_per_token_quant", out, input, weight, None, epsilon, is_rms=True, yscale=scales,
               scale_ub=scale_ub, residual_in=residual, residual_out=residual,
               names=("out", "residual", "residual"), yscale_name="scales")
