"""aiter's ``fused_fp8_quant`` forms on the Triton backend: a row's RMSNorm (plain, after a
split-K reduction, or gated) or gated activation fused with fp8 / int8 quantization, one
launch, each row read once.

* ``fused_rms_fp8_group_quant(inp1, inp1_weight, inp1_epsilon, inp2=None, inp2_weight=None,
  inp2_epsilon=None, group_size=128, dtype_quant=None, res1=None, output_unquantized_inp1=False,
  transpose_scale=False, is_x_scale_strided=False, gemm_out_zero_init=None)`` (vLLM's and
  SGLang's DeepSeek path): ``inp1`` (+ ``res1``) normalized and quantized per
  ``group_size`` columns; returns ``((q, scale), out1, out2, out_res1)``: the scales fp32
  ``(M, G)`` (with ``transpose_scale`` written column-major and presented as aiter does:
  re-viewed contiguous, or strided with ``is_x_scale_strided``), ``out1`` the normalized
  inp1 unquantized where asked, ``out2`` the second input's RMSNorm where given,
  ``out_res1`` the sum ``inp1 + res1``; None where not asked for.
* ``fused_rms_fp8_per_tensor_static_quant(inp1, inp1_weight, inp1_epsilon, inp1_scale, ...,
  rmsnorm_convert_to_inp1_type=False)``: by one static scale; returns ``(q, out1, out2,
  out_res1)``.
* ``fused_reduce_rms_fp8_group_quant(inp1, ..., inp3=None, group_size=128, dtype_quant=None,
  dtype=None, res1=None, output_unquantized_inp1=False, out3=None, transpose_scale=False,
  is_x_scale_strided=False)``: as ``fused_rms_fp8_group_quant``, with ``inp1`` / ``inp2``
  either rows or ``(SPK, M, N)`` split-K partial products summed first (fp32), and
  ``inp3`` ``(SPK, M, N3)`` summed into ``out3`` (allocated, or the caller's); the
  unquantized outputs in ``dtype`` (default inp1's); returns ``((q, scale), out1, out2,
  out_res1, out3)``.
* ``fused_reduce_act_mul_fp8_group_quant(x, activation="silu", x2=None, group_size=128,
  dtype_quant=None, dtype=torch.bfloat16)``: ``act(x[..., :n]) * x[..., n:]`` quantized per
  group, x ``(M, 2n)`` or split-K ``(SPK, M, 2n)`` summed first, with ``x2`` ``(SPK, M, N2)``
  summed into ``y2`` of ``dtype``; returns ``((y, y_scale), y2)``. Any n and N2: tiles of
  whole groups (llama3-405B's 53248-wide intermediate included).
* ``fused_rms_gated_fp8_group_quant(x, weight, bias, z, eps, *, norm_before_gate=True,
  use_ue8m0=False, activation="silu", out_dtype=None, fp8_min=None, fp8_max=None,
  fp8_min_scaling_factor=None, group_size=None)`` (Qwen3-Next's gated norm, vLLM):
  ``rmsnorm(x) * w (+ bias)`` gated by ``activation(z)`` after the norm, or x gated before
  it; a scale per ``group_size`` columns (the row where None) ``max(amax / fp8_max,
  fp8_min_scaling_factor)``, rounded up to a power of 2 with ``use_ue8m0``; returns ``(q,
  scales)``, scales ``(M, G)`` or ``(M,)``.
* ``fused_flatten_fp8_group_quant(x, group_size, dtype_quant=None, transpose_scale=False)``
  (SGLang's MLA output): ``(M, N1, N2)`` flattened to ``(M, N1 * N2)`` (any strides of the
  leading two dims, no copy) and quantized per group; ``transpose_scale``: the scales
  column-major, strides (1, M), as aiter returns them.
* ``fused_silu_mul_fp8_per_tensor_static_quant(inp, inp_scale, dtype_quant=None,
  silu_convert_to_inp_type=False)``: ``silu(inp[..., :n]) * inp[..., n:]`` by one static
  scale; returns q.
* ``get_fp8_min_max_bounds(fp8_dtype)``: vLLM's fp8 range (+-224 for e4m3fnuz).

Semantics as aiter's kernels: the residual sum, split-K sums and the norm in fp32, quantized
from the fp32 value (the static forms round it to the input's dtype first where asked);
the outputs in inp1's dtype unless a ``dtype`` says otherwise; a group's scale
``max(amax, 1e-10) / q_max`` (the gated form's as above). ``dtype_quant`` None: the
device's e4m3 (aiter's default); any quantized dtype the device stores (int8 rounds to
nearest even, where aiter's int8 truncates toward zero). The norm forms hold a row in
registers: up to 16384 columns for each input (aiter's kernels hold whole rows too;
DeepSeek-V3's widest is 7168); the gated activation, flatten and silu forms tile any
width. Where aiter asserts, these raise a ``TypeError`` / ``ValueError`` naming the op and
argument; ``gemm_out_zero_init`` is zeroed as aiter's prologue zeroes it.

Where aiter's kernels go wrong, these do not (each has a test): ``fused_flatten_fp8_group_quant``
with ``N2`` not a multiple of ``group_size`` (aiter restarts groups at each of the N1
segments and writes ``N1 * cdiv(N2, group_size)`` scales into a row of
``cdiv(N1 * N2, group_size)``, past its end): here the groups run over the flattened row;
``fused_reduce_rms_fp8_group_quant``'s second input of another width than the first (aiter
masks it by the first's width) and ``inp3`` with 2-D inputs (aiter returns ``out3``
unwritten).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch

from aiter_lite.ops.triton._triton_kernels.quant.fused_fp8_quant import (
    _fused_rms_gated_quant_kernel,
    _fused_rms_quant_kernel,
)
from aiter_lite.ops.triton.normalization.norm import check_eps
from aiter_lite.ops.triton.quant.act_quant import (
    _ACTIVATIONS,
    Activation,
    _launch_act_quant,
    act_quant_launch_config,
)
from aiter_lite.ops.triton.quant.dtypes import check_quant_dtype_supported
from aiter_lite.ops.triton.quant.quant import (
    _check_group,
    _check_scale,
    _launch_group_quant,
    _quant_dtype,
    _soft_round,
)
from aiter_lite.spec.device import INTERPRETER, DeviceProfile, device_profile
from aiter_lite.spec.quant import GROUP_EPS, get_fp8_min_max_bounds, quant_range
from aiter_lite.utils.checks import (
    check_bool,
    check_choice,
    check_float_tensor,
    check_row_input,
    check_same_device,
    rows_view,
)
from aiter_lite.utils.fast_launch import launch
from aiter_lite.utils.launch import cdiv, next_power_of_2
from aiter_lite.utils.launcher import launcher
from aiter_lite.utils.registry import public_op

__all__ = ["fused_rms_fp8_group_quant", "fused_rms_fp8_per_tensor_static_quant", "fused_reduce_rms_fp8_group_quant",
           "fused_reduce_act_mul_fp8_group_quant", "fused_rms_gated_fp8_group_quant", "fused_flatten_fp8_group_quant",
           "fused_silu_mul_fp8_per_tensor_static_quant", "get_fp8_min_max_bounds", "FusedRmsQuantLaunchConfig",
           "fused_rms_quant_launch_config", "fused_act_quant_launch_config", "GatedRmsQuantLaunchConfig",
           "gated_rms_quant_launch_config"]

# why the aiter forms here refuse a call autograd would record (utils.registry.public_op)
_NO_GRAD = "its outputs are quantized values and scales"
_MAX_COLS = 16384  # a row in registers (each input of the norm forms)
_MAX_GRID_Y = 65535  # CUDA and HIP limit of grid axis 1
_STATIC_GROUP = 128  # the static form's tile rows (a row held as (BLOCK_N1 // 128, 128))
_GATED_TILE = 4096  # the gated form's elements a program: narrow rows (Qwen3-Next's heads of 128) batched


@dataclass(frozen=True)
class FusedRmsQuantLaunchConfig:
    num_warps: int
    BLOCK_M: int = 1  # the activation forms: rows a program (the norm forms: one row, whole in registers)
    BLOCK_N: int = 0  # the activation forms: output columns a program, whole groups (0: the whole row)


def fused_rms_quant_launch_config(n_cols: int, profile: DeviceProfile = INTERPRETER) -> FusedRmsQuantLaunchConfig:
    """The norm forms: the warps of a program holding a row of ``n_cols`` (the wider
    input's) columns."""
    return FusedRmsQuantLaunchConfig(profile.row_warps(next_power_of_2(max(n_cols, 1))))


def fused_act_quant_launch_config(n_rows: int, n_cols: int, group_size: int,
                                  profile: DeviceProfile = INTERPRETER) -> FusedRmsQuantLaunchConfig:
    """The activation forms' tile over an (n_rows, n_cols) output: the op's 2-D form's
    (``act_quant_launch_config``'s group tiles, act_and_mul's measured tiles, at least a
    group wide). Nothing spans a row, so any width takes the same tiles. H100, 2 fp32
    splits, 2048-53248 outputs: level with a whole row a program (within 2%) where that
    fits, 6% ahead at 14336 x 4096, 3x at decode (7.2 -> 2.4 us at 14336 x 1, CUDA graphs);
    85-97% of copy from 8192 rows; other tiles of 1-2 rows by 1024-4096 within 4% either way."""
    cfg = act_quant_launch_config("group", n_rows, n_cols, profile, group_size)
    return FusedRmsQuantLaunchConfig(cfg.num_warps, cfg.BLOCK_M, cfg.BLOCK_N)


@dataclass(frozen=True)
class GatedRmsQuantLaunchConfig:
    BLOCK_M: int  # rows a program, each whole in registers
    num_warps: int


def gated_rms_quant_launch_config(n_rows: int, row_tile: int,
                                  profile: DeviceProfile = INTERPRETER) -> GatedRmsQuantLaunchConfig:
    """Rows of ``row_tile`` (padded) elements batched to ``_GATED_TILE`` elements a program
    (fewer where the rows are fewer); the warps as a register-held tile of that size, with
    at most 32 elements a lane where 16 warps allow it: x, the gate and y are live at once,
    and a 16384-element row at 8 warps (64 a lane) spilled 8 bytes on sm_100."""
    block_m = max(1, min(_GATED_TILE // row_tile, next_power_of_2(max(n_rows, 1))))
    tile = block_m * row_tile
    return GatedRmsQuantLaunchConfig(block_m, max(profile.row_warps(tile), profile.warps_for(tile, 32, hi=16)))


def _extent(t: torch.Tensor | None) -> int:
    """One past the largest element offset of ``t`` (0 for None)."""
    if t is None or t.numel() == 0:
        return 0
    return sum((n - 1) * st for n, st in zip(t.shape, t.stride())) + 1


def _wide(*tensors, pad: int = 0) -> bool:
    """Whether an offset into any of ``tensors`` (a masked lane ``pad`` past a row's end
    included) can pass 2^31."""
    return max(_extent(t) for t in tensors) + pad >= 2**31


def _split_strides(t: torch.Tensor | None) -> tuple[int, int]:
    """(row stride, split stride) of 2-D rows or 3-D (splits, rows, columns)."""
    if t is None:
        return 0, 0
    return (t.stride(1), t.stride(0)) if t.dim() == 3 else (t.stride(0), 0)


@launcher(mutates=("q", "scale", "y1", "r_out", "y2", "y3"))
def _launch_fused_rms_quant(x1: torch.Tensor, w1: torch.Tensor | None, r1: torch.Tensor | None,
                            r_out: torch.Tensor | None, y1: torch.Tensor | None, q: torch.Tensor, scale: torch.Tensor,
                            x2: torch.Tensor | None, w2: torch.Tensor | None, y2: torch.Tensor | None, eps1: float,
                            eps2: float, group_size: int, round_norm: bool, x3: torch.Tensor | None = None,
                            y3: torch.Tensor | None = None, activation: str = "",
                            config: FusedRmsQuantLaunchConfig | None = None, casting_llama: bool = False) -> None:
    """The fused row quant: q and, per ``group_size`` columns, the scales into ``scale``
    ((M, G), any strides), or by the one-element static ``scale`` (``group_size`` 0);
    r_out, y1 and the second input's y2 where given; x3's rows summed into y3. The row is
    x1's RMSNorm (whole rows a program), or with ``activation`` ``act(x1[:, :n]) *
    x1[:, n:]`` (grouped, no r1 / y1 / x2: tiles of ``config``'s BLOCK_M rows by BLOCK_N
    output columns). x1, x2, x3: 2-D rows, or 3-D (SPK, M, N) partial products summed over
    their first dim (x1 3-D: all). ``casting_llama``: the norm forms with Hugging Face Llama's
    / vLLM's roundings (the sum normalized as stored, ``x * rstd`` rounded before the weight)."""
    n_rows, n1 = q.shape
    if n_rows == 0:
        return
    splitk = x1.dim() == 3
    n2 = 0 if x2 is None else x2.shape[-1]
    n3 = 0 if x3 is None else x3.shape[-1]
    profile = device_profile(x1.device)
    stride_x1, split_x1 = _split_strides(x1)
    stride_x2, split_x2 = _split_strides(x2)
    stride_x3, split_x3 = _split_strides(x3)
    block_n2 = next_power_of_2(max(n2, 1))
    if activation:
        if not group_size or r1 is not None or y1 is not None or x2 is not None:
            raise ValueError("fused act quant: the activation forms quantize per group and store q, the scales "
                             "and y3 alone")
        cfg = config or fused_act_quant_launch_config(n_rows, n1, group_size, profile)
        block_m = cfg.BLOCK_M
        block_n1 = cfg.BLOCK_N or max(next_power_of_2(max(n1, 1)), group_size)
        if block_n1 % group_size:
            raise ValueError(f"fused act quant: BLOCK_N must be a multiple of group_size {group_size}, got {cfg}")
        # x3 an element a split, y two: x3's tiles twice as wide take about as many loads a program
        block_n3 = min(next_power_of_2(max(n3, 1)), 2 * block_n1)
        row_blocks = cdiv(n_rows, block_m)
        grid = (row_blocks * (1 if x3 is None else 2), max(cdiv(n1, block_n1), cdiv(n3, block_n3)))
        if grid[1] == 0:  # no columns
            return
        if grid[1] > _MAX_GRID_Y:
            raise ValueError(f"fused act quant: {grid[1]} column tiles pass the grid's {_MAX_GRID_Y} (outputs {n1}, "
                             f"x3 {n3} wide, {cfg})")
        pad = block_m * max(stride_x1, q.stride(0), scale.stride(0), stride_x3, 0 if y3 is None else y3.stride(0)) \
            + max(block_n1, block_n3) * max(scale.stride(1), 1)
        int64 = _wide(x1, q, scale, x3, y3, pad=pad)
        tile_group = group_size
    else:
        block_n1 = max(next_power_of_2(max(n1, 1)), group_size)
        block_n3 = next_power_of_2(max(n3, 1))
        cfg = config or fused_rms_quant_launch_config(max(block_n1, block_n2, block_n3), profile)
        if cfg.BLOCK_M != 1 or cfg.BLOCK_N:
            raise ValueError(f"fused rms quant: the norm forms hold one whole row a program (BLOCK_M 1, BLOCK_N 0), "
                             f"got {cfg}")
        block_m = 1
        grid = (n_rows * (1 if x3 is None else 2),)
        int64 = _wide(x1, r1, r_out, y1, q, x2, y2, x3, y3, pad=max(block_n1, block_n2, block_n3))
        tile_group = group_size or min(block_n1, _STATIC_GROUP)  # the static scale: any tile rows
    q_min, q_max = quant_range(q.dtype)
    launch(
        _fused_rms_quant_kernel, grid,
        x1, w1, r1, r_out, y1, q, scale, x2, w2, y2, x3, y3,
        stride_x1, 0 if r1 is None else r1.stride(0), 0 if r_out is None else r_out.stride(0),
        0 if y1 is None else y1.stride(0), q.stride(0), scale.stride(0) if group_size else 0,
        scale.stride(1) if group_size else 0, stride_x2, 0 if y2 is None else y2.stride(0),
        stride_x3, 0 if y3 is None else y3.stride(0), split_x1, split_x2, split_x3,
        n_rows, n1, n2, n3, x1.shape[0] if splitk else 1, eps1, eps2, q_min, q_max, GROUP_EPS,
        ACT=activation, HAS_RES=r1 is not None, STORE_Y1=y1 is not None, HAS_X2=x2 is not None,
        HAS_X3=x3 is not None, SPLITK=splitk, ROUND=round_norm, CASTING_LLAMA=casting_llama, SOFT_ROUND=_soft_round(q.dtype, q.device), INT64=int64,
        GROUPED=group_size > 0, GROUP=tile_group, BLOCK_M=block_m, BLOCK_N1=block_n1, BLOCK_N2=block_n2,
        BLOCK_N3=block_n3, num_warps=cfg.num_warps,
    )


@launcher(mutates=("q", "scale"))
def _launch_fused_rms_gated_quant(x: torch.Tensor, z: torch.Tensor | None, w: torch.Tensor, b: torch.Tensor | None,
                                  q: torch.Tensor, scale: torch.Tensor, group_size: int, eps: float, q_min: float,
                                  q_max: float, min_scale: float, gate: str, norm_before_gate: bool, ue8m0: bool,
                                  config: GatedRmsQuantLaunchConfig | None = None) -> None:
    """The gated RMSNorm + group quant over rows x, z (M, N); scale (M, N // group_size)."""
    n_rows, n_cols = x.shape
    if n_rows == 0:
        return
    block_g = next_power_of_2(n_cols // group_size)
    group = next_power_of_2(group_size)
    cfg = config or gated_rms_quant_launch_config(n_rows, block_g * group, device_profile(x.device))
    launch(
        _fused_rms_gated_quant_kernel, (cdiv(n_rows, cfg.BLOCK_M),),
        x, z, w, b, q, scale, x.stride(0), 0 if z is None else z.stride(0), q.stride(0), scale.stride(0),
        scale.stride(1), n_rows, n_cols, group_size, eps, q_min, q_max, min_scale,
        GATE=gate, HAS_Z=z is not None, HAS_BIAS=b is not None, NORM_BEFORE_GATE=norm_before_gate, UE8M0=ue8m0,
        SOFT_ROUND=_soft_round(q.dtype, q.device), INT64=_wide(x, z, q, scale, pad=cfg.BLOCK_M * max(x.stride(0), n_cols)),
        BLOCK_M=cfg.BLOCK_M, BLOCK_G=block_g, GROUP=group, num_warps=cfg.num_warps,
    )


def _rows(op: str, name: str, t, n_rows: int | None = None, n_cols: int | None = None,
          splits: int | None = None, max_cols: int | None = _MAX_COLS, like: str = "") -> torch.Tensor:
    """A float input of rows (unit stride along them) on a device Triton runs on: 2-D (M, N),
    or with ``splits`` 3-D (splits, M, N) (``splits`` 0: 2-D or 3-D), at most ``max_cols``
    wide (None: any width). ``like``: the input whose rows (and splits) it must match, named
    in the error."""
    check_row_input(op, name, t)
    want_dims = (2,) if splits is None else (3,) if splits else (2, 3)
    as_ = f" as {like} is" if like else ""
    if t.dim() not in want_dims:
        what = "2-D (M, N)" if want_dims == (2,) else "3-D (SPK, M, N)" if want_dims == (3,) else \
            "2-D (M, N) or 3-D (SPK, M, N)"
        raise ValueError(f"{op}: {name} must be {what}{as_}, got shape {tuple(t.shape)}")
    lead = () if t.dim() == 2 else (t.shape[0] if not splits else splits,)
    want = (*lead, t.shape[-2] if n_rows is None else n_rows, t.shape[-1] if n_cols is None else n_cols)
    if tuple(t.shape) != want:
        raise ValueError(f"{op}: {name} must have shape {want}{' to match ' + like if like else ''}, "
                         f"got {tuple(t.shape)}")
    if t.dim() == 3 and t.shape[0] == 0:
        raise ValueError(f"{op}: {name} must have at least one split (its first dim), got shape {tuple(t.shape)}")
    if max_cols is not None and t.shape[-1] > max_cols:
        raise ValueError(f"{op}: {name} holds rows in registers, up to {max_cols} columns; got {t.shape[-1]}")
    return t


def _weight(op: str, name: str, w, n: int, ref: torch.Tensor, ref_name: str = "inp1") -> torch.Tensor:
    check_float_tensor(op, name, w)
    if w.shape != (n,):
        raise ValueError(f"{op}: {name} must have shape ({n},) ({ref_name}'s width), got {tuple(w.shape)}")
    check_same_device(op, name, w, ref_name, ref)
    return w if w.stride(0) == 1 or n <= 1 else w.contiguous()


def _out_dtype(op: str, name: str, dtype, default: torch.dtype) -> torch.dtype:
    if dtype is None:
        return default
    if not isinstance(dtype, torch.dtype) or dtype not in (torch.float32, torch.float16, torch.bfloat16):
        raise TypeError(f"{op}: {name} must be torch.float32, torch.float16 or torch.bfloat16 (or None), got {dtype!r}")
    return dtype


def _common(op, inp1, inp1_weight, inp1_epsilon, inp2, inp2_weight, inp2_epsilon, dtype_quant, res1,
            output_unquantized_inp1, out_dtype=None, splits=False):
    """Checked inputs and the allocated outputs shared by the RMSNorm forms: (x1, w1, eps1,
    x2, w2, eps2, r1, q, out1, out2, out_res1). ``splits``: inp1 may be 3-D (SPK, M, N1),
    inp2 then of the same SPK and M."""
    x1 = _rows(op, "inp1", inp1, splits=0 if splits else None)
    m, n1 = x1.shape[-2:]
    spk = x1.shape[0] if x1.dim() == 3 else None
    dev = x1.device
    w1 = _weight(op, "inp1_weight", inp1_weight, n1, x1)
    eps1 = check_eps(op, "inp1_epsilon", inp1_epsilon)
    dtype_out = out_dtype or x1.dtype
    x2 = w2 = out2 = None
    eps2 = 0.0
    if inp2 is not None:
        x2 = _rows(op, "inp2", inp2, n_rows=m, splits=spk, like="inp1")
        check_same_device(op, "inp2", x2, "inp1", x1)
        if inp2_weight is None or inp2_epsilon is None:
            raise ValueError(f"{op}: inp2 needs inp2_weight and inp2_epsilon, got "
                             f"{'no inp2_weight' if inp2_weight is None else 'no inp2_epsilon'}")
        w2 = _weight(op, "inp2_weight", inp2_weight, x2.shape[-1], x1, "inp2")
        eps2 = check_eps(op, "inp2_epsilon", inp2_epsilon)
        out2 = torch.empty((m, x2.shape[-1]), dtype=dtype_out, device=dev)
    r1 = out_res1 = None
    if res1 is not None:
        r1 = _rows(op, "res1", res1, n_rows=m, n_cols=n1, like="inp1")
        check_same_device(op, "res1", r1, "inp1", x1)
        out_res1 = torch.empty((m, n1), dtype=dtype_out, device=dev)
    dtype = _quant_dtype(op, dtype_quant, "dtype_quant", dev)
    check_quant_dtype_supported(op, "dtype_quant", dtype, dev)
    out1 = None
    if check_bool(op, "output_unquantized_inp1", output_unquantized_inp1):
        out1 = torch.empty((m, n1), dtype=dtype_out, device=dev)
    q = torch.empty((m, n1), dtype=dtype, device=dev)
    return x1, w1, eps1, x2, w2, eps2, r1, q, out1, out2, out_res1


def _group_scales(op: str, m: int, n: int, group_size, transpose_scale, device):
    """(group_size, groups, buffer, the (M, G) view written) for aiter's scale layouts."""
    group_size, _ = _check_group(op, group_size, GROUP_EPS)
    groups = cdiv(n, group_size)
    if check_bool(op, "transpose_scale", transpose_scale):  # column-major: the (G, M) buffer through an (M, G) view
        buf = torch.empty((groups, m), dtype=torch.float32, device=device)
        return group_size, groups, buf, buf.t()
    buf = torch.empty((m, groups), dtype=torch.float32, device=device)
    return group_size, groups, buf, buf


def _presented(buf: torch.Tensor, scale: torch.Tensor, transpose_scale: bool, is_x_scale_strided: bool):
    """aiter's presentation of a transposed scale buffer: re-viewed contiguous (M, G), or
    the strided (M, G) view with ``is_x_scale_strided``."""
    if transpose_scale and not is_x_scale_strided:
        return buf.view(scale.shape)
    return scale


@public_op(no_grad=_NO_GRAD, nested=True, buffers=("gemm_out_zero_init",))
def fused_rms_fp8_group_quant(inp1: torch.Tensor, inp1_weight: torch.Tensor, inp1_epsilon: float,
                              inp2: torch.Tensor | None = None, inp2_weight: torch.Tensor | None = None,
                              inp2_epsilon: float | None = None, group_size: int = 128,
                              dtype_quant: torch.dtype | None = None, res1: torch.Tensor | None = None,
                              output_unquantized_inp1: bool = False, transpose_scale: bool = False,
                              is_x_scale_strided: bool = False, gemm_out_zero_init: torch.Tensor | None = None):
    """aiter's ``fused_rms_fp8_group_quant`` (see the module doc): ``((q, scale), out1, out2,
    out_res1)``."""
    op = "fused_rms_fp8_group_quant"
    x1, w1, eps1, x2, w2, eps2, r1, q, out1, out2, out_res1 = _common(
        op, inp1, inp1_weight, inp1_epsilon, inp2, inp2_weight, inp2_epsilon, dtype_quant, res1,
        output_unquantized_inp1)
    m, n1 = x1.shape
    group_size, _, buf, scale = _group_scales(op, m, n1, group_size, transpose_scale, x1.device)
    is_x_scale_strided = check_bool(op, "is_x_scale_strided", is_x_scale_strided)
    if gemm_out_zero_init is not None:
        if not isinstance(gemm_out_zero_init, torch.Tensor):
            raise TypeError(f"{op}: gemm_out_zero_init must be a torch.Tensor or None, got "
                            f"{type(gemm_out_zero_init).__name__}")
        gemm_out_zero_init.zero_()
    _launch_fused_rms_quant(x1, w1, r1, out_res1, out1, q, scale, x2, w2, out2, eps1, eps2, group_size, False)
    return (q, _presented(buf, scale, transpose_scale, is_x_scale_strided)), out1, out2, out_res1


@public_op(no_grad=_NO_GRAD, nested=True)
def fused_rms_fp8_per_tensor_static_quant(inp1: torch.Tensor, inp1_weight: torch.Tensor, inp1_epsilon: float,
                                          inp1_scale: torch.Tensor, inp2: torch.Tensor | None = None,
                                          inp2_weight: torch.Tensor | None = None, inp2_epsilon: float | None = None,
                                          dtype_quant: torch.dtype | None = None, res1: torch.Tensor | None = None,
                                          output_unquantized_inp1: bool = False,
                                          rmsnorm_convert_to_inp1_type: bool = False):
    """aiter's ``fused_rms_fp8_per_tensor_static_quant`` (see the module doc): ``(q, out1,
    out2, out_res1)``; ``inp1_scale`` one fp32 element."""
    op = "fused_rms_fp8_per_tensor_static_quant"
    x1, w1, eps1, x2, w2, eps2, r1, q, out1, out2, out_res1 = _common(
        op, inp1, inp1_weight, inp1_epsilon, inp2, inp2_weight, inp2_epsilon, dtype_quant, res1,
        output_unquantized_inp1)
    scale = _static_scale(op, "inp1_scale", inp1_scale, x1, "inp1")
    round_norm = check_bool(op, "rmsnorm_convert_to_inp1_type", rmsnorm_convert_to_inp1_type)
    _launch_fused_rms_quant(x1, w1, r1, out_res1, out1, q, scale, x2, w2, out2, eps1, eps2, 0, round_norm)
    return q, out1, out2, out_res1


def _static_scale(op: str, name: str, scale, x: torch.Tensor, x_name: str) -> torch.Tensor:
    """A one-element float32 scale as a 1-D view (the quant ops' contract: aiter's too)."""
    if not isinstance(scale, torch.Tensor) or scale.numel() != 1 or not scale.is_floating_point():
        raise ValueError(f"{op}: {name} must be a one-element float tensor, got "
                         f"{tuple(scale.shape) if isinstance(scale, torch.Tensor) else scale!r}")
    _check_scale(op, name, scale, 1, x, x_name)
    return scale.reshape(1)


@public_op(no_grad=_NO_GRAD, nested=True, buffers=("out3",))
def fused_reduce_rms_fp8_group_quant(inp1: torch.Tensor, inp1_weight: torch.Tensor, inp1_epsilon: float,
                                     inp2: torch.Tensor | None = None, inp2_weight: torch.Tensor | None = None,
                                     inp2_epsilon: float | None = None, inp3: torch.Tensor | None = None,
                                     group_size: int = 128, dtype_quant: torch.dtype | None = None,
                                     dtype: torch.dtype | None = None, res1: torch.Tensor | None = None,
                                     output_unquantized_inp1: bool = False, out3: torch.Tensor | None = None,
                                     transpose_scale: bool = False, is_x_scale_strided: bool = False):
    """aiter's ``fused_reduce_rms_fp8_group_quant`` (see the module doc): ``((q, scale), out1,
    out2, out_res1, out3)``."""
    op = "fused_reduce_rms_fp8_group_quant"
    out_dtype = _out_dtype(op, "dtype", dtype, inp1.dtype if isinstance(inp1, torch.Tensor) else None)
    x1, w1, eps1, x2, w2, eps2, r1, q, out1, out2, out_res1 = _common(
        op, inp1, inp1_weight, inp1_epsilon, inp2, inp2_weight, inp2_epsilon, dtype_quant, res1,
        output_unquantized_inp1, out_dtype, splits=True)
    m, n1 = q.shape
    spk = x1.shape[0] if x1.dim() == 3 else 1
    group_size, _, buf, scale = _group_scales(op, m, n1, group_size, transpose_scale, x1.device)
    is_x_scale_strided = check_bool(op, "is_x_scale_strided", is_x_scale_strided)
    x3 = None
    if inp3 is not None:
        x3 = _rows(op, "inp3", inp3, n_rows=m, splits=spk, like="inp1")
        check_same_device(op, "inp3", x3, "inp1", x1)
        if x1.dim() == 2:
            x3 = x3[0]  # one split: its rows
        if out3 is None:
            out3 = torch.empty((m, x3.shape[-1]), dtype=out_dtype, device=x1.device)
        else:
            check_float_tensor(op, "out3", out3)
            if tuple(out3.shape) != (m, x3.shape[-1]) or out3.stride(-1) != 1:
                raise ValueError(f"{op}: out3 must be rows of shape {(m, x3.shape[-1])} with unit stride along them, "
                                 f"got shape {tuple(out3.shape)} and strides {tuple(out3.stride())}")
            check_same_device(op, "out3", out3, "inp1", x1)
    elif out3 is not None:
        raise ValueError(f"{op}: out3 receives inp3's sum; got out3 without inp3")
    _launch_fused_rms_quant(x1, w1, r1, out_res1, out1, q, scale, x2, w2, out2, eps1, eps2, group_size, False, x3,
                            out3)
    return (q, _presented(buf, scale, transpose_scale, is_x_scale_strided)), out1, out2, out_res1, out3


@public_op(no_grad=_NO_GRAD, nested=True)
def fused_reduce_act_mul_fp8_group_quant(x: torch.Tensor, activation: Activation = "silu",
                                         x2: torch.Tensor | None = None, group_size: int = 128,
                                         dtype_quant: torch.dtype | None = None,
                                         dtype: torch.dtype | None = torch.bfloat16):
    """aiter's ``fused_reduce_act_mul_fp8_group_quant`` (see the module doc): ``((y, y_scale),
    y2)``; y2 None where x2 is."""
    op = "fused_reduce_act_mul_fp8_group_quant"
    check_choice(op, "activation", activation, _ACTIVATIONS)
    xr = _rows(op, "x", x, splits=0, max_cols=None) if isinstance(x, torch.Tensor) and x.dim() == 3 else None
    if xr is None:  # 2-D: act_mul_and_fp8_group_quant's tiles, any width
        check_row_input(op, "x", x)
        if x.dim() != 2:
            raise ValueError(f"{op}: x must be 2-D (M, 2 * N) or 3-D (SPK, M, 2 * N), got shape {tuple(x.shape)}")
        if x2 is not None:
            raise ValueError(f"{op}: x2 is reduced over x's splits; a 2-D x has none, so x2 must be None")
    m, two_n = x.shape[-2:]
    if two_n % 2:
        raise ValueError(f"{op}: x's last dim holds the gate then the up halves and must be even, got {two_n}")
    n = two_n // 2
    y2_dtype = _out_dtype(op, "dtype", dtype, torch.bfloat16)
    qdtype = _quant_dtype(op, dtype_quant, "dtype_quant", x.device)
    check_quant_dtype_supported(op, "dtype_quant", qdtype, x.device)
    group_size, _, _, scale = _group_scales(op, m, n, group_size, False, x.device)
    y = torch.empty((m, n), dtype=qdtype, device=x.device)
    if xr is None:
        if y.numel():
            _launch_act_quant(x, y, scale, None, activation, "group", group_size, False)
        return (y, scale), None
    x3 = y2 = None
    if x2 is not None:
        x3 = _rows(op, "x2", x2, n_rows=m, splits=xr.shape[0], max_cols=None, like="x")
        check_same_device(op, "x2", x3, "x", xr)
        y2 = torch.empty((m, x3.shape[-1]), dtype=y2_dtype, device=x.device)
    _launch_fused_rms_quant(xr, None, None, None, None, y, scale, None, None, None, 0.0, 0.0, group_size, False, x3,
                            y2, activation)
    return (y, scale), y2


_GATES = {"silu": "silu", "swish": "silu", "sigmoid": "sigmoid"}


def _opt_float(op: str, name: str, v) -> float | None:
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise TypeError(f"{op}: {name} must be a float or None, got {type(v).__name__}")
    return float(v)


@public_op(no_grad=_NO_GRAD)
def fused_rms_gated_fp8_group_quant(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None,
                                    z: torch.Tensor | None, eps: float, *, norm_before_gate: bool = True,
                                    use_ue8m0: bool = False, activation: Literal["silu", "swish", "sigmoid"] = "silu",
                                    out_dtype: torch.dtype | None = None, fp8_min: float | None = None,
                                    fp8_max: float | None = None, fp8_min_scaling_factor: float | None = None,
                                    group_size: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """aiter's ``fused_rms_gated_fp8_group_quant`` (see the module doc): ``(q, scales)``. z
    None: no gate (the plain RMSNorm, + bias)."""
    op = "fused_rms_gated_fp8_group_quant"
    xr = _rows(op, "x", x)
    m, n = xr.shape
    zr = None
    if z is not None:
        zr = _rows(op, "z", z, n_rows=m, n_cols=n, like="x")
        check_same_device(op, "z", zr, "x", xr)
    w = _weight(op, "weight", weight, n, xr, "x")
    b = None if bias is None else _weight(op, "bias", bias, n, xr, "x")
    eps = check_eps(op, "eps", eps)
    norm_before_gate = check_bool(op, "norm_before_gate", norm_before_gate)
    ue8m0 = check_bool(op, "use_ue8m0", use_ue8m0)
    check_choice(op, "activation", activation, tuple(_GATES))
    qdtype = _quant_dtype(op, out_dtype, "out_dtype", xr.device)
    check_quant_dtype_supported(op, "out_dtype", qdtype, xr.device)
    lo, hi = _opt_float(op, "fp8_min", fp8_min), _opt_float(op, "fp8_max", fp8_max)
    if (lo is None) != (hi is None):
        raise ValueError(f"{op}: fp8_min and fp8_max go together; got only {'fp8_min' if hi is None else 'fp8_max'}")
    if lo is None:
        lo, hi = get_fp8_min_max_bounds(qdtype) if qdtype.is_floating_point else quant_range(qdtype)
    elif not lo < 0 < hi:
        raise ValueError(f"{op}: fp8_min < 0 < fp8_max must hold, got fp8_min={lo}, fp8_max={hi}")
    floor = _opt_float(op, "fp8_min_scaling_factor", fp8_min_scaling_factor)
    floor = 1.0 / (hi * 512.0) if floor is None else floor
    if group_size is None:
        gs = n
    else:
        if isinstance(group_size, bool) or not isinstance(group_size, int):
            raise TypeError(f"{op}: group_size must be an int or None, got {type(group_size).__name__}")
        if not 0 < group_size <= n or n % group_size:
            raise ValueError(f"{op}: group_size must divide x's width {n} (0 < group_size <= {n}), got {group_size}")
        gs = group_size
    q = torch.empty((m, n), dtype=qdtype, device=xr.device)
    scales = torch.empty((m, n // gs) if group_size is not None else (m,), dtype=torch.float32, device=xr.device)
    if n:
        _launch_fused_rms_gated_quant(xr, zr, w, b, q, scales.view(m, n // gs), gs, eps, lo, hi, floor,
                                      _GATES[activation], norm_before_gate, ue8m0)
    return q, scales


@public_op(no_grad=_NO_GRAD)
def fused_flatten_fp8_group_quant(x: torch.Tensor, group_size: int, dtype_quant: torch.dtype | None = None,
                                  transpose_scale: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """aiter's ``fused_flatten_fp8_group_quant`` (see the module doc): ``(q, scales)``, q
    ``(M, N1 * N2)``."""
    op = "fused_flatten_fp8_group_quant"
    check_row_input(op, "x", x)
    if x.dim() != 3:
        raise ValueError(f"{op}: x must be 3-D (M, N1, N2), got shape {tuple(x.shape)}")
    m, n1, n2 = x.shape
    n = n1 * n2
    qdtype = _quant_dtype(op, dtype_quant, "dtype_quant", x.device)
    check_quant_dtype_supported(op, "dtype_quant", qdtype, x.device)
    group_size, _, _, scale = _group_scales(op, m, n, group_size, transpose_scale, x.device)
    q = torch.empty((m, n), dtype=qdtype, device=x.device)
    if q.numel():
        flat = n1 == 1 or x.stride(1) == n2  # the row's segments back to back: plain rows
        xv = x.as_strided((m, n), (x.stride(0), 1)) if flat else x
        _launch_group_quant(xv, q, scale, group_size, GROUP_EPS)
    return q, scale


@public_op(no_grad=_NO_GRAD)
def fused_silu_mul_fp8_per_tensor_static_quant(inp: torch.Tensor, inp_scale: torch.Tensor,
                                               dtype_quant: torch.dtype | None = None,
                                               silu_convert_to_inp_type: bool = False) -> torch.Tensor:
    """aiter's ``fused_silu_mul_fp8_per_tensor_static_quant``: ``silu(inp[..., :n]) *
    inp[..., n:]`` (fp32; rounded to inp's dtype first with ``silu_convert_to_inp_type``)
    quantized by the one-element ``inp_scale``; returns q (*inp.shape[:-1], n). Any width
    (tiles, not whole rows in registers)."""
    op = "fused_silu_mul_fp8_per_tensor_static_quant"
    check_row_input(op, "inp", inp)
    if inp.shape[-1] % 2:
        raise ValueError(f"{op}: inp's last dim holds the gate then the up halves and must be even, "
                         f"got {inp.shape[-1]}")
    scale = _static_scale(op, "inp_scale", inp_scale, inp, "inp")
    round_y = check_bool(op, "silu_convert_to_inp_type", silu_convert_to_inp_type)
    qdtype = _quant_dtype(op, dtype_quant, "dtype_quant", inp.device)
    check_quant_dtype_supported(op, "dtype_quant", qdtype, inp.device)
    q = torch.empty((*inp.shape[:-1], inp.shape[-1] // 2), dtype=qdtype, device=inp.device)
    if q.numel():
        _launch_act_quant(rows_view(op, "inp", inp, writable=False), q.view(-1, q.shape[-1]), scale, None, "silu",
                          "static", 1, round_y)
    return q
