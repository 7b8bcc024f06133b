"""aiter's MX / NV block-scaled activation quantization on the Triton backend: OCP MXFP4
(e2m1 values, an e8m0 scale per 32 columns), MXFP8 (fp8 values, an e8m0 scale per 32
columns) and NVFP4 (e2m1 values, an fp8 e4m3 scale per 16 columns), alone and fused with
a gated activation, an RMSNorm or a flatten; each row read once, one launch.

aiter's names, at aiter's paths (``quant.quant``, ``quant.fused_mxfp4_quant``,
``quant.fused_mxfp8_quant``, ``activation`` re-export them):

* ``dynamic_mxfp4_quant(x, scaling_mode="even") -> (x_fp4, scales)``: x (M, N); x_fp4
  (M, N // 2) uint8; scales (M, ceil(N / 32)) uint8 e8m0, column-major (strides (1, M)),
  as aiter returns them;
* ``dynamic_mxfp8_quant(x, scale=None, quant_dtype=torch.float8_e4m3fn) -> (y, s)``: x
  (..., K); y (..., K) in quant_dtype; s (..., ceil(K / 32)) uint8, row-major, or the
  caller's ``scale`` (rows, ceil(K / 32)) written and returned as that view;
* ``dynamic_nvfp4_quant(x, global_scale=None) -> (x_fp4, scales)``: x (M, N); x_fp4
  (M, N // 2) uint8; scales (M, ceil(N / 16)) in the device's e4m3
  (:func:`get_fp8_e4m3_dtype`), column-major as aiter's;
* ``act_mul_and_mxfp4_quant(x, activation, scaling_mode="even", shuffle=False,
  scale_shuffle_padding=False) -> (x_fp4, scales)``: ``act(x[:, :n]) * x[:, n:]`` quantized
  from fp32 (not rounded to x's dtype first, as aiter's); x (M, 2n); x_fp4 (M, n // 2);
  scales row-major (M, ceil(n / 32)), or the padded buffer below;
* ``fused_rms_mxfp4_quant(x1, x1_weight, x1_epsilon, x2=None, x2_weight=None,
  x2_epsilon=0.0, res1=None, shuffle=False, scale_shuffle_padding=False,
  output_unquantized_inp1=False, inargs="auto") -> ((x_fp4, scales), out1, out2, out_res1)``:
  ``rmsnorm(x1 (+ res1)) * x1_weight`` quantized (scales row-major (M, ceil(N1 / 32)) or the
  padded buffer); ``out1`` that norm unquantized (with ``output_unquantized_inp1``),
  ``out2`` x2's RMSNorm, ``out_res1`` the sum ``x1 + res1``, each in x1's dtype or None;
* ``fused_flatten_mxfp4_quant(x) -> (x_fp4, scales)``: x (M, N1, N2) (any strides of the
  leading dims) quantized as its flattened (M, N1 * N2) rows; scales column-major;
* ``fused_rms_mxfp8_quant(x, weight, eps, y=None, scale=None) -> (y, scale)``: x (M, K);
  y (M, K) in the device's e4m3 (aiter's float8_e4m3fn; e4m3fnuz on MI300-class GPUs, which
  cannot store e4m3fn) or the caller's fp8 ``y``, scale (M, ceil(K / 32)) uint8;
* ``fused_flatten_mxfp8_quant(x, quant_dtype=torch.float8_e4m3fn) -> (out, scales)``: x
  (M, N1, N2); out (M, N1 * N2); scales (M, ceil(N1 * N2 / 32)) uint8 row-major.

Formats. e2m1 codes: sign in bit 3, then 0, 0.5, 1, 1.5, 2, 3, 4, 6; two a byte, column 2k
in the low nibble and 2k + 1 in the high one (aiter's order). e8m0: the byte b is the
scale ``2^(b - 127)``; 0xFF is NaN. A value decodes as ``code * scale`` (NVFP4: ``code *
scale / global_scale``). The e8m0 exponent ``scaling_mode``: "even" (aiter's, AMD Quark's
even_round: the block's amax rounded to a power of 2, up from a mantissa of 0.75, minus
the element format's largest exponent), "floor" (OCP MX: ``floor(log2 amax) - emax``,
values past the format's max saturate), "ceil" (``ceil(log2 amax) - emax``), "rceil"
(``ceil(log2(amax / max))``, NVIDIA's / torchao's); aiter's Triton ops accept the argument
and always use "even". Values round to nearest even and saturate (e2m1 to +-6, fp8 to its
range). MXFP8's emax follows quant_dtype (8 e4m3fn, 7 e4m3fnuz, 15 e5m2), so no value
passes the dtype's max (aiter's kernels use 8 for every dtype: e4m3fnuz's 240 overflows).
NVFP4 (vLLM's ``scaled_fp4_quant`` rule): the block scale ``global_scale * amax / 6``
saturated and rounded to e4m3, the values ``x / (scale / global_scale)`` by that rounded
scale (0 where it is 0); ``global_scale`` a one-element fp32 tensor, None for 1 (aiter
ignores the argument and quantizes by the unrounded scale).

``shuffle`` / ``scale_shuffle_padding``: the scales in a (ceil(M / 256) * 256,
ceil(G / 8) * 8) uint8 buffer, every padding byte 127 (scale 1.0); ``shuffle`` lays it
out as aiter's ``e8m0_shuffle`` (``shuffle_scale``) would the row-major one, which
``aiter_lite.ops.native.quant.mx_quant.unshuffle_scale`` undoes. ``inargs``: "auto" and
"triton" run this kernel; "gluon" (aiter's gfx1250 Gluon kernel) raises.

NaN: a NaN in a block makes its scale 0xFF (NVFP4: the e4m3 NaN) and its values code 0
(MXFP8: NaN): the block decodes to NaN, other blocks of the row are unaffected (through an
RMSNorm a NaN reaches its whole row). An inf makes its block's scale the largest (e8m0
254) and saturates (a finite decode). Inputs: float32 / float16 / bfloat16, unit stride
in the last dim, rows of any stride; fused RMSNorm rows up to 16384 columns each.

Where aiter goes wrong, these do not (each has a test): packed widths must be even (aiter
drops the last column of an odd width, and refuses even widths not a multiple of 4 that
pack fine); ``fused_flatten_mxfp4_quant`` with N2 not a power of 2 of at least 32 (aiter
writes each of the N1 segments at a power-of-2 stride, past its row, and restarts the
blocks at each segment): here the blocks run over the flattened row; the shuffled
scales of ``act_mul_and_mxfp4_quant`` when ceil(n / 32) is not a multiple of 8 (aiter
strides its 32-row tiles by the unpadded width, overlapping them); padding bytes are
always written (aiter leaves most of them as allocated); NVFP4's all-zero blocks (aiter
divides by their 0 scale: NaN codes) and e4m3 scales past 448 (aiter's overflow); partial
blocks read with ``other=0`` (aiter's masked loads leave the lanes undefined, by Triton's
contract); MXFP8 partial blocks (K not a multiple of 32: aiter refuses; here the last
block is partial).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Literal

import torch

from aiter_lite.ops.triton._triton_kernels.quant.mx_quant import _mx_quant_kernel
from aiter_lite.ops.triton.normalization.norm import check_eps
from aiter_lite.ops.triton.quant.dtypes import check_quant_dtype_supported
from aiter_lite.spec.device import INTERPRETER, DeviceProfile, device_profile
from aiter_lite.spec.quant import FP8_DTYPES, get_fp8_e4m3_dtype, quant_range
from aiter_lite.utils.checks import (
    TRITON_INTERPRET,
    check_bool,
    check_choice,
    check_float_tensor,
    check_row_input,
    check_same_device,
    check_unit_last_stride,
    rows_view,
)
from aiter_lite.utils.fast_launch import launch
from aiter_lite.utils.launch import cdiv, next_power_of_2
from aiter_lite.utils.launcher import launcher
from aiter_lite.utils.registry import public_op

__all__ = [
    "dynamic_mxfp4_quant",
    "dynamic_mxfp8_quant",
    "dynamic_nvfp4_quant",
    "act_mul_and_mxfp4_quant",
    "fused_rms_mxfp4_quant",
    "fused_flatten_mxfp4_quant",
    "fused_rms_mxfp8_quant",
    "fused_flatten_mxfp8_quant",
    "MxQuantLaunchConfig",
    "mx_quant_launch_config",
]

# why the ops here refuse a call autograd would record (utils.registry.public_op)
_NO_GRAD = "its outputs are quantized values and scales"

ScalingMode = Literal["even", "floor", "ceil", "rceil"]
Activation = Literal["silu", "gelu", "gelu_tanh", "relu"]
_SCALING_MODES = ("even", "floor", "ceil", "rceil")
_ACTIVATIONS = ("silu", "gelu", "gelu_tanh", "relu")
MX_BLOCK = 32  # OCP MX: columns an e8m0 scale covers
NV_BLOCK = 16  # NVFP4: columns an e4m3 scale covers
E2M1_MAX = 6.0
_MAX_ROW = 16384  # a fused RMSNorm row in registers (each input)
_PAD_ROWS, _PAD_COLS = 256, 8  # aiter's shuffled / padded scale buffer: rows and columns rounded up to these


@dataclass(frozen=True)
class MxQuantLaunchConfig:
    BLOCK_M: int  # rows a program
    BLOCK_N: int  # columns a program, a multiple of the block (32 or 16); "rms": the whole (padded) row, or
                  # with ROW_LOOP a chunk
    num_warps: int
    ROW_MAJOR: bool = False  # a 1-D grid over row blocks' column blocks, columns fastest
    ROW_LOOP: bool = False  # "rms": a program's rows in BLOCK_N-column chunks, read twice (the sum of
                            # squares, then from the cache the quantization), not whole in registers


# Measured on the H200 (16384 x 7168, 16384 x 2048 and 4096 x 16384 bf16; sweeps of 12 tiles;
# scripts/tune_mx.py): the e2m1 forms are bound by instructions issued (about 15 an element
# for MXFP4, 21 NVFP4, 12 MXFP8; scripts/sass_count.py), so each lane takes whole blocks, 32
# values, in programs of several rows: MXFP4 4 x 1024 on 4 warps (76 / 64 / 71% of copy;
# 2 x 1024 on 2: 71 / 61 / 69%; a row a program: 44-51%), NVFP4 8 x 512 on 4 (76 / 64 / 70%),
# the gated producer 2 x 512 on 1 (82 / 72 / 79%). MXFP8 is bound by bytes: 2 x 1024 on 2,
# 93% over one axis with a row block's column blocks in turn (the e2m1 forms lose 2-5% in that
# order). Halved toward two programs an SM for small inputs.
# MXFP4 of bf16 rows in bf16 arithmetic (_lines16: 8.4 instructions an element) is closer to
# bytes-bound: 4 x 512 on 2 warps, a row block's column blocks in turn, 70 / 88 / 82% of copy
# (4 x 1024 on 4, the fp32 form's tile: 68 / 88 / 83; over two axes 67 / 86 / 79).
_TILE = {"mxfp4": 4096, "nvfp4": 4096, "mxfp8": 2048, "act": 1024, "mxfp4_16": 2048}
_MAX_BLOCK_N = {"mxfp4": 1024, "nvfp4": 512, "mxfp8": 1024, "act": 512, "mxfp4_16": 512}
_PER_LANE = 32
# A row in registers at _ROW_PER_LANE elements a lane, 2 warps at least, at most 8 (a 2048
# row: 2 warps; 7168, padded to 8192: 8; 16384: 16 on NVIDIA, below; 4 at 16384 measured
# 44%). Measured on the H200 (tune_mx.py) at 2048 / 7168 columns: RMSNorm + MXFP4 52 / 55% of copy (64 a lane: 44 / 56%), with a residual 73 / 86% (64 a lane: 76 / 76%),
# + MXFP8 69 / 71% (64 a lane: 59 / 66%). The row in 1024- or 2048-column chunks (read
# twice, the loops unrolled by 1-8; measured on the H100 with lanes sharing blocks) measured
# 45-60% with MXFP4 and 53-74% with MXFP8: per-chunk reductions and layout changes cost more
# than the padded row's masked lanes.
_ROW_PER_LANE = 32
# Rows past 8192 columns on NVIDIA: 16 warps (32 elements a lane). H200, 16384 columns:
# RMSNorm + MXFP4 79.3 us against 80.2 on 8 warps, with a residual 134.0 against 150.3,
# RMSNorm + MXFP8 80.5 against 83.2 (tune_mx.py). AMD keeps 8 (not measured there).
_ROW_16_WARPS_PAST = 8192
# The interpreter runs programs one after another, each op a numpy call: fewer, larger tiles
# (rows of a padded scale buffer included) are faster there.
_INTERPRETER_TILE = 16384
# MXFP4 of bf16 rows in bf16 arithmetic on NVIDIA (sm_80 on): two values an instruction, 8.4
# SASS instructions an element where the fp32 lines take 15.4 (sm_90); the same bytes.
_LINES16 = True


def _lines16(x: torch.Tensor, q: torch.Tensor, fmt: str, producer: str, n_cols: int, profile: DeviceProfile) -> bool:
    """Whether a launch takes the kernel's bf16 MXFP4 form: bf16 rows quantized as they are
    ("plain" / "flatten"), on NVIDIA, read as 32-bit words of two values and the codes stored
    as 32-bit words of eight (whole blocks a row; rows, segments and pointers 4-byte aligned)."""
    if not (_LINES16 and fmt == "mxfp4" and producer in ("plain", "flatten") and x.dtype == torch.bfloat16):
        return False
    seg_stride = x.stride(1) if producer == "flatten" else 0
    return (profile.backend == "cuda" and int(profile.arch.removeprefix("sm_")) >= 80 and n_cols % MX_BLOCK == 0
            and x.stride(0) % 2 == 0 and seg_stride % 2 == 0 and x.shape[-1] % 2 == 0 and x.data_ptr() % 4 == 0
            and q.stride(0) % 4 == 0 and q.data_ptr() % 4 == 0)


@functools.lru_cache(maxsize=1024)
def mx_quant_launch_config(producer: str, fmt: str, n_rows: int, n_cols: int,
                           profile: DeviceProfile = INTERPRETER, lines16: bool = False) -> MxQuantLaunchConfig:
    """Tile and warps of one launch of format ``fmt`` over (n_rows, n_cols) outputs
    (``n_cols``: the scale columns covered, padding included); ``producer`` "rms" holds a row
    a program; ``lines16``: the kernel's bf16 MXFP4 form (_lines16)."""
    group = NV_BLOCK if fmt == "nvfp4" else MX_BLOCK
    kind = "act" if producer == "act" else "mxfp4_16" if lines16 else fmt
    tile = _INTERPRETER_TILE if profile.interpreter else _TILE[kind]
    if producer == "rms":
        block_n = next_power_of_2(max(n_cols, group))
        block_m = min(max(tile // block_n, 1), next_power_of_2(max(n_rows, 1))) if profile.interpreter else 1
        hi = 16 if block_n > _ROW_16_WARPS_PAST and profile.backend == "cuda" else 8
        return MxQuantLaunchConfig(block_m, block_n, profile.warps_for(block_m * block_n, _ROW_PER_LANE, lo=2, hi=hi))
    block_n = min(max(next_power_of_2(n_cols), group), _MAX_BLOCK_N[kind])
    block_m = min(max(tile // block_n, 1), next_power_of_2(max(n_rows, 1)))
    if not profile.interpreter:
        while block_m > 1 and cdiv(n_rows, block_m) * cdiv(n_cols, block_n) < 2 * profile.sms:
            block_m //= 2
    return MxQuantLaunchConfig(block_m, block_n, profile.warps_for(block_m * block_n, _PER_LANE, lo=1, hi=8),
                               ROW_MAJOR=(fmt == "mxfp8" or lines16) and profile.backend == "cuda")


# ---------------------------------------------------------------------------
# the launch (torch.ops.aiter_lite.launch_mx_quant under torch.compile)


def _span(t: torch.Tensor | None, rows: int) -> int:
    """The largest element offset a launch can form in ``t`` (2-D or 3-D), its rows up to ``rows``."""
    if t is None:
        return 0
    return rows * max(t.stride(0), 1) + sum(size * stride for size, stride in zip(t.shape[1:], t.stride()[1:]))


@launcher(mutates=("q", "scale", "r_out", "y1", "y2"))
def _launch_mx_quant(x: torch.Tensor, q: torch.Tensor, scale: torch.Tensor, producer: str, fmt: str, n_cols: int,
                     scaling: str, activation: str, shuffle: bool, scale_rows: int, scale_cols: int,
                     weight: torch.Tensor | None, r: torch.Tensor | None, r_out: torch.Tensor | None,
                     y1: torch.Tensor | None, x2: torch.Tensor | None, w2: torch.Tensor | None,
                     y2: torch.Tensor | None, global_scale: torch.Tensor | None, eps1: float, eps2: float,
                     config: MxQuantLaunchConfig | None = None) -> None:
    """The kernel over x (``producer`` "plain" / "rms": rows; "act": gate then up, ``n_cols``
    output columns; "flatten": (M, S, L)), into q ((M, n_cols // 2) packed e2m1 or (M,
    n_cols) fp8) and ``scale`` ((M, blocks) through its strides, or with ``shuffle`` the
    contiguous (scale_rows, scale_cols) buffer); ``scale_rows`` / ``scale_cols`` past (M,
    blocks): padding, 127. ``config`` pins a launch (tests, tuning)."""
    n_rows = q.shape[0]
    if scale_rows == 0 or scale_cols == 0:
        return
    group = NV_BLOCK if fmt == "nvfp4" else MX_BLOCK
    profile = device_profile(x.device)
    lines16 = _lines16(x, q, fmt, producer, n_cols, profile)
    cfg = config or mx_quant_launch_config(producer, fmt, scale_rows, scale_cols * group, profile, lines16)
    row_loop = cfg.ROW_LOOP and producer == "rms"
    if cfg.BLOCK_N % group or (producer == "rms" and not row_loop and cfg.BLOCK_N < scale_cols * group):
        raise ValueError(f"mx_quant: a launch's BLOCK_N must be a multiple of the {group}-column block"
                         f"{f' holding the whole {scale_cols * group}-column row' if producer == 'rms' else ''}, "
                         f"got {cfg}")
    row_blocks = cdiv(scale_rows, cfg.BLOCK_M)
    col_blocks = 1 if row_loop else cdiv(scale_cols * group, cfg.BLOCK_N)
    row_major = cfg.ROW_MAJOR and x2 is None
    if col_blocks > 65535 and not row_major:  # the grid's second axis
        raise ValueError(f"mx_quant: {scale_cols * group} columns in {cfg.BLOCK_N}-column blocks make {col_blocks} "
                         f"column programs, more than a grid's 65535; pin a wider BLOCK_N")
    rows = row_blocks * cfg.BLOCK_M
    cols = cdiv(scale_cols * group, cfg.BLOCK_N) * cfg.BLOCK_N  # a row loop's chunks too
    if fmt == "mxfp4" or fmt == "nvfp4":
        q_max, s_max = E2M1_MAX, quant_range(scale.dtype)[1] if fmt == "nvfp4" else 0.0
    else:
        q_max, s_max = quant_range(q.dtype)[1], 0.0
    seg_len = x.shape[2] if producer == "flatten" else 1
    if producer == "flatten" and (x.stride(1) == seg_len or x.shape[1] == 1):  # contiguous segments: plain rows
        producer, seg_len = "plain", 1
    segmented = producer == "flatten"
    s_span = (rows + 256) * scale_cols if shuffle else _span(scale, rows) + (cols // group) * scale.stride(-1)
    int64 = max(_span(x, rows) + 2 * cols, _span(q, rows) + cols, s_span,
                *(_span(t, rows) + cols for t in (r, r_out, y1, x2, y2))) >= 2**31
    n_cols2 = 0 if x2 is None else x2.shape[1]
    grid = ((row_blocks * col_blocks,) if row_major
            else (row_blocks + (0 if x2 is None else cdiv(n_rows, cfg.BLOCK_M)), col_blocks))
    launch(
        _mx_quant_kernel, grid,
        x, q, scale, weight, r, r_out, y1, x2, w2, y2, global_scale,
        x.stride(0), x.stride(1) if segmented else 0, q.stride(0),
        0 if shuffle else scale.stride(0), 0 if shuffle else scale.stride(1),
        *(0 if t is None else t.stride(0) for t in (r, x2)),
        n_rows, n_cols, seg_len, n_cols2, scale_rows, scale_cols,
        eps1, eps2, q_max, s_max,
        MODE=producer, ACTIVATION=activation, FORMAT=fmt, SCALING=scaling,
        STORE_Y1=y1 is not None, HAS_X2=x2 is not None, HAS_GLOBAL=global_scale is not None, SHUFFLE=shuffle,
        SEG_SHIFT=seg_len.bit_length() - 1 if seg_len & (seg_len - 1) == 0 else -1, INT64=int64,
        SOFT_ROUND=TRITON_INTERPRET, GROUP=group, VEC=min(16 // x.element_size(), group), BLOCK_M=cfg.BLOCK_M,
        BLOCK_N=cfg.BLOCK_N, BLOCK_N2=next_power_of_2(max(n_cols2, 1)), ROW_MAJOR=row_major, ROW_LOOP=row_loop,
        LINES16=lines16,
        num_warps=cfg.num_warps,
    )


# ---------------------------------------------------------------------------
# checks


def _matrix(op: str, name: str, x, max_cols: int | None = None) -> torch.Tensor:
    """A 2-D float input of rows (unit stride along them) on a device Triton runs on."""
    check_row_input(op, name, x)
    if x.dim() != 2:
        raise ValueError(f"{op}: {name} must be 2-D (M, N), got shape {tuple(x.shape)}")
    if max_cols is not None and x.shape[1] > max_cols:
        raise ValueError(f"{op}: {name} holds rows in registers, up to {max_cols} columns; got {x.shape[1]}")
    return x


def _packable(op: str, name: str, n: int, what: str = "last dim") -> None:
    """Two e2m1 values a byte: an even count."""
    if n % 2:
        raise ValueError(f"{op}: {name} {what} must be even (two fp4 values a byte), got {n}")


def _fp8_dtype(op: str, name: str, dtype, device: torch.device) -> torch.dtype:
    if dtype not in FP8_DTYPES:
        raise TypeError(f"{op}: {name} must be one of {', '.join(str(d) for d in FP8_DTYPES)}, got {dtype}")
    check_quant_dtype_supported(op, name, dtype, device)
    return dtype


def _weight(op: str, name: str, w, n: int, of: str, ref_name: str, ref: torch.Tensor) -> torch.Tensor:
    """A norm's weight: ``n`` elements, ``of``'s width."""
    check_float_tensor(op, name, w)
    if tuple(w.shape) != (n,):
        raise ValueError(f"{op}: {name} must have shape ({n},) for {of}'s {n} columns, got {tuple(w.shape)}")
    check_same_device(op, name, w, ref_name, ref)
    return w if w.stride(0) == 1 or n <= 1 else w.contiguous()


def _out_buffer(op: str, name: str, t, shape: tuple, dtype_ok, want: str, ref: torch.Tensor, unit_last: bool):
    """A caller's output buffer: a tensor of ``shape``, a dtype ``dtype_ok`` accepts, on ref's device."""
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{op}: {name} must be a torch.Tensor or None, got {type(t).__name__}")
    if not dtype_ok(t.dtype):
        raise TypeError(f"{op}: {name} must be {want}, got {t.dtype}")
    if tuple(t.shape) != tuple(shape):
        raise ValueError(f"{op}: {name} must have shape {tuple(shape)}, got {tuple(t.shape)}")
    check_same_device(op, name, t, "x", ref)
    if unit_last:
        check_unit_last_stride(op, name, t)
    return t


def _scale_buffer(m: int, g: int, padded: bool, device: torch.device) -> torch.Tensor:
    """aiter's row-major (M, G) uint8 scales, or its padded buffer (M and G rounded up to 256 and 8)."""
    if padded:
        m, g = cdiv(m, _PAD_ROWS) * _PAD_ROWS, cdiv(g, _PAD_COLS) * _PAD_COLS
    return torch.empty((m, g), dtype=torch.uint8, device=device)


def _launch(x, q, scale, producer, fmt, n_cols, *, scaling="even", activation="", shuffle=False, scale_rows=None,
            scale_cols=None, weight=None, r=None, r_out=None, y1=None, x2=None, w2=None, y2=None,
            global_scale=None, eps1=0.0, eps2=0.0) -> None:
    group = NV_BLOCK if fmt == "nvfp4" else MX_BLOCK
    scale_rows = q.shape[0] if scale_rows is None else scale_rows
    scale_cols = cdiv(n_cols, group) if scale_cols is None else scale_cols
    _launch_mx_quant(x, q, scale, producer, fmt, n_cols, scaling, activation, shuffle, scale_rows, scale_cols, weight,
                     r, r_out, y1, x2, w2, y2, global_scale, eps1, eps2)


# ---------------------------------------------------------------------------
# aiter's quant.quant names


@public_op(no_grad=_NO_GRAD)
def dynamic_mxfp4_quant(x: torch.Tensor, scaling_mode: ScalingMode = "even") -> tuple[torch.Tensor, torch.Tensor]:
    """x (M, N), N even, quantized to MXFP4: ``(x_fp4 (M, N // 2) uint8, scales (M,
    ceil(N / 32)) uint8 e8m0, column-major)`` (see the module doc)."""
    op = "dynamic_mxfp4_quant"
    x = _matrix(op, "x", x)
    scaling_mode = check_choice(op, "scaling_mode", scaling_mode, _SCALING_MODES)
    m, n = x.shape
    _packable(op, "x", n)
    q = torch.empty((m, n // 2), dtype=torch.uint8, device=x.device)
    scale = torch.empty((cdiv(n, MX_BLOCK), m), dtype=torch.uint8, device=x.device).t()
    _launch(x, q, scale, "plain", "mxfp4", n, scaling=scaling_mode)
    return q, scale


@public_op(buffers=("scale",), no_grad=_NO_GRAD)
def dynamic_mxfp8_quant(x: torch.Tensor, scale: torch.Tensor | None = None,
                        quant_dtype: torch.dtype = torch.float8_e4m3fn) -> tuple[torch.Tensor, torch.Tensor]:
    """x (..., K) quantized to MXFP8 in ``quant_dtype`` (e4m3fn, e4m3fnuz or e5m2, as the device
    stores): ``(y (..., K), s (..., ceil(K / 32)) uint8 e8m0)``; ``scale``: the caller's
    (rows, ceil(K / 32)) uint8 buffer, written (see the module doc)."""
    op = "dynamic_mxfp8_quant"
    check_row_input(op, "x", x)
    quant_dtype = _fp8_dtype(op, "quant_dtype", quant_dtype, x.device)
    k = x.shape[-1]
    g = cdiv(k, MX_BLOCK)
    x2 = rows_view(op, "x", x, writable=False)
    m = x2.shape[0]
    if scale is None:
        scale = torch.empty((m, g), dtype=torch.uint8, device=x.device)
    else:
        _out_buffer(op, "scale", scale, (m, g), lambda d: d == torch.uint8, "uint8 (e8m0)", x, unit_last=False)
    y = torch.empty((m, k), dtype=quant_dtype, device=x.device)
    _launch(x2, y, scale, "plain", "mxfp8", k)
    lead = tuple(x.shape[:-1])
    if scale.dim() == len(lead) + 1 and tuple(scale.shape[:-1]) == lead:
        return y.view(*lead, k), scale
    try:
        s = scale.view(*lead, g)
    except RuntimeError:
        raise ValueError(f"{op}: scale with strides {tuple(scale.stride())} cannot be viewed as "
                         f"{(*lead, g)}; pass a contiguous one") from None
    return y.view(*lead, k), s


@public_op(no_grad=_NO_GRAD)
def dynamic_nvfp4_quant(x: torch.Tensor, global_scale: torch.Tensor | None = None
                        ) -> tuple[torch.Tensor, torch.Tensor]:
    """x (M, N), N even, quantized to NVFP4: ``(x_fp4 (M, N // 2) uint8, scales (M,
    ceil(N / 16)) e4m3, column-major)``; ``global_scale`` one fp32 element (None: 1) that
    scales the block scales up (see the module doc). It stays on the device: 0 gives zeros,
    NaN NaN scales."""
    op = "dynamic_nvfp4_quant"
    x = _matrix(op, "x", x)
    m, n = x.shape
    _packable(op, "x", n)
    s_dtype = get_fp8_e4m3_dtype(x.device)
    check_quant_dtype_supported(op, "x's NVFP4 block scale", s_dtype, x.device)
    if global_scale is not None:
        if not isinstance(global_scale, torch.Tensor):
            raise TypeError(f"{op}: global_scale must be a torch.Tensor or None, got {type(global_scale).__name__}")
        if global_scale.dtype != torch.float32 or global_scale.numel() != 1:
            raise ValueError(f"{op}: global_scale must be one float32 element, got {global_scale.dtype} of shape "
                             f"{tuple(global_scale.shape)}")
        check_same_device(op, "global_scale", global_scale, "x", x)
        global_scale = global_scale.reshape(1)
    q = torch.empty((m, n // 2), dtype=torch.uint8, device=x.device)
    scale = torch.empty((cdiv(n, NV_BLOCK), m), dtype=s_dtype, device=x.device).t()
    _launch(x, q, scale, "plain", "nvfp4", n, global_scale=global_scale)
    return q, scale


# ---------------------------------------------------------------------------
# aiter's activation name


@public_op(no_grad=_NO_GRAD)
def act_mul_and_mxfp4_quant(x: torch.Tensor, activation: Activation, scaling_mode: ScalingMode = "even",
                            shuffle: bool = False, scale_shuffle_padding: bool = False
                            ) -> tuple[torch.Tensor, torch.Tensor]:
    """``act(x[:, :n]) * x[:, n:]`` (fp32; activation "silu", "gelu", "gelu_tanh" or "relu")
    quantized to MXFP4: x (M, 2n), n even; ``(x_fp4 (M, n // 2), scales)``, the scales (M,
    ceil(n / 32)) row-major, or the padded / shuffled buffer (see the module doc)."""
    op = "act_mul_and_mxfp4_quant"
    check_choice(op, "activation", activation, _ACTIVATIONS)
    x = _matrix(op, "x", x)
    scaling_mode = check_choice(op, "scaling_mode", scaling_mode, _SCALING_MODES)
    shuffle = check_bool(op, "shuffle", shuffle)
    padded = check_bool(op, "scale_shuffle_padding", scale_shuffle_padding) or shuffle
    m, width = x.shape
    if width % 4:
        raise ValueError(f"{op}: x last dim must be a multiple of 4 (gate, then up, each an even width of "
                         f"two fp4 values a byte), got {width}")
    n = width // 2
    q = torch.empty((m, n // 2), dtype=torch.uint8, device=x.device)
    scale = _scale_buffer(m, cdiv(n, MX_BLOCK), padded, x.device)
    _launch(x, q, scale, "act", "mxfp4", n, scaling=scaling_mode, activation=activation, shuffle=shuffle,
            scale_rows=scale.shape[0], scale_cols=scale.shape[1])
    return q, scale


# ---------------------------------------------------------------------------
# aiter's quant.fused_mxfp4_quant names


@public_op(no_grad=_NO_GRAD, nested=True)
def fused_rms_mxfp4_quant(x1: torch.Tensor, x1_weight: torch.Tensor, x1_epsilon: float,
                          x2: torch.Tensor | None = None, x2_weight: torch.Tensor | None = None,
                          x2_epsilon: float | None = 0.0, res1: torch.Tensor | None = None,
                          shuffle: bool | None = False, scale_shuffle_padding: bool | None = False,
                          output_unquantized_inp1: bool = False, inargs: Literal["auto", "triton", "gluon"] = "auto"):
    """aiter's ``fused_rms_mxfp4_quant`` (see the module doc): ``((x_fp4, scales), out1, out2,
    out_res1)``; ``x2_epsilon`` may be None where x2 is (aiter's callers pass it so)."""
    op = "fused_rms_mxfp4_quant"
    x1 = _matrix(op, "x1", x1, _MAX_ROW)
    m, n1 = x1.shape
    if n1 == 0:
        raise ValueError(f"{op}: x1 must have columns to normalize, got shape {tuple(x1.shape)}")
    _packable(op, "x1", n1)
    w1 = _weight(op, "x1_weight", x1_weight, n1, "x1", "x1", x1)
    eps1 = check_eps(op, "x1_epsilon", x1_epsilon)
    shuffle = check_bool(op, "shuffle", shuffle or False)
    padded = check_bool(op, "scale_shuffle_padding", scale_shuffle_padding or False) or shuffle
    if check_choice(op, "inargs", inargs, ("auto", "triton", "gluon")) == "gluon":
        raise ValueError(f"{op}: inargs='gluon' asks for aiter's Gluon kernel for gfx1250, which this backend "
                         "does not have; pass 'auto' or 'triton'")
    x2_, w2, out2, eps2 = None, None, None, 0.0
    if x2 is not None:
        x2_ = _matrix(op, "x2", x2, _MAX_ROW)
        if x2_.shape[0] != m:
            raise ValueError(f"{op}: x2 must have x1's {m} rows, got shape {tuple(x2_.shape)}")
        check_same_device(op, "x2", x2_, "x1", x1)
        if x2_weight is None:
            raise ValueError(f"{op}: x2 needs x2_weight, got None")
        w2 = _weight(op, "x2_weight", x2_weight, x2_.shape[1], "x2", "x1", x1)
        eps2 = check_eps(op, "x2_epsilon", x2_epsilon)
        out2 = torch.empty(x2_.shape, dtype=x1.dtype, device=x1.device)
    r1 = out_res1 = None
    if res1 is not None:
        r1 = _matrix(op, "res1", res1)
        if tuple(r1.shape) != (m, n1):
            raise ValueError(f"{op}: res1 must have shape {(m, n1)}, got {tuple(r1.shape)}")
        check_same_device(op, "res1", r1, "x1", x1)
        out_res1 = torch.empty((m, n1), dtype=x1.dtype, device=x1.device)
    out1 = None
    if check_bool(op, "output_unquantized_inp1", output_unquantized_inp1):
        out1 = torch.empty((m, n1), dtype=x1.dtype, device=x1.device)
    q = torch.empty((m, n1 // 2), dtype=torch.uint8, device=x1.device)
    scale = _scale_buffer(m, cdiv(n1, MX_BLOCK), padded, x1.device)
    _launch(x1, q, scale, "rms", "mxfp4", n1, shuffle=shuffle, scale_rows=scale.shape[0],
            scale_cols=scale.shape[1], weight=w1, r=r1, r_out=out_res1, y1=out1, x2=x2_, w2=w2, y2=out2,
            eps1=eps1, eps2=eps2)
    return (q, scale), out1, out2, out_res1


def _segments(op: str, x) -> torch.Tensor:
    check_row_input(op, "x", x)
    if x.dim() != 3:
        raise ValueError(f"{op}: x must be 3-D (M, N1, N2), got shape {tuple(x.shape)}")
    return x


@public_op(no_grad=_NO_GRAD)
def fused_flatten_mxfp4_quant(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """x (M, N1, N2) flattened to (M, N1 * N2) rows (no copy) and quantized to MXFP4, the
    blocks over the flattened row: ``(x_fp4 (M, N1 * N2 // 2), scales (M, ceil(N1 * N2 /
    32)) column-major)``."""
    op = "fused_flatten_mxfp4_quant"
    x = _segments(op, x)
    m, n1, n2 = x.shape
    _packable(op, "x", n1 * n2, "N1 * N2")
    q = torch.empty((m, n1 * n2 // 2), dtype=torch.uint8, device=x.device)
    scale = torch.empty((cdiv(n1 * n2, MX_BLOCK), m), dtype=torch.uint8, device=x.device).t()
    _launch(x, q, scale, "flatten", "mxfp4", n1 * n2)
    return q, scale


# ---------------------------------------------------------------------------
# aiter's quant.fused_mxfp8_quant names


@public_op(buffers=("y", "scale"), no_grad=_NO_GRAD)
def fused_rms_mxfp8_quant(x: torch.Tensor, weight: torch.Tensor, eps: float, y: torch.Tensor | None = None,
                          scale: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """``rmsnorm(x) * weight`` quantized to MXFP8: x (M, K) up to 16384 columns; ``(y (M, K)
    in the device's e4m3, or the caller's fp8 y; scale (M, ceil(K / 32)) uint8, or the
    caller's)``. The device's e4m3 (:func:`get_fp8_e4m3_dtype`) is aiter's float8_e4m3fn
    but on MI300-class GPUs, which store e4m3fnuz only."""
    op = "fused_rms_mxfp8_quant"
    x = _matrix(op, "x", x, _MAX_ROW)
    m, k = x.shape
    if k == 0:
        raise ValueError(f"{op}: x must have columns to normalize, got shape {tuple(x.shape)}")
    w = _weight(op, "weight", weight, k, "x", "x", x)
    eps = check_eps(op, "eps", eps)
    if y is None:
        y = torch.empty((m, k), dtype=_fp8_dtype(op, "y", get_fp8_e4m3_dtype(x.device), x.device), device=x.device)
    else:
        _out_buffer(op, "y", y, (m, k), lambda d: d in FP8_DTYPES, "an fp8 dtype", x, unit_last=True)
        _fp8_dtype(op, "y", y.dtype, x.device)
    g = cdiv(k, MX_BLOCK)
    if scale is None:
        scale = torch.empty((m, g), dtype=torch.uint8, device=x.device)
    else:
        _out_buffer(op, "scale", scale, (m, g), lambda d: d == torch.uint8, "uint8 (e8m0)", x, unit_last=False)
    _launch(x, y, scale, "rms", "mxfp8", k, weight=w, eps1=eps)
    return y, scale


@public_op(no_grad=_NO_GRAD)
def fused_flatten_mxfp8_quant(x: torch.Tensor, quant_dtype: torch.dtype = torch.float8_e4m3fn
                              ) -> tuple[torch.Tensor, torch.Tensor]:
    """x (M, N1, N2) flattened to (M, N1 * N2) rows (no copy) and quantized to MXFP8 in
    ``quant_dtype``: ``(out (M, N1 * N2), scales (M, ceil(N1 * N2 / 32)) uint8)``."""
    op = "fused_flatten_mxfp8_quant"
    x = _segments(op, x)
    quant_dtype = _fp8_dtype(op, "quant_dtype", quant_dtype, x.device)
    m, n1, n2 = x.shape
    out = torch.empty((m, n1 * n2), dtype=quant_dtype, device=x.device)
    scale = torch.empty((m, cdiv(n1 * n2, MX_BLOCK)), dtype=torch.uint8, device=x.device)
    _launch(x, out, scale, "flatten", "mxfp8", n1 * n2)
    return out, scale
