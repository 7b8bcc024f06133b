"""aiter's ``fused_fp8_quant`` forms on the Triton backend: RMSNorm fused with fp8 / int8
quantization, one launch, each row read once.

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
* ``get_fp8_min_max_bounds(fp8_dtype)``: vLLM's fp8 range (+-224 for e4m3fnuz).

Semantics as aiter's kernels: the residual sum and the norm in fp32, quantized from the
fp32 normalized value (the static form rounds it to inp1's dtype first where
``rmsnorm_convert_to_inp1_type``); the outputs in inp1's dtype; a group's scale
``max(amax, 1e-10) / q_max``. ``dtype_quant`` None: the device's e4m3 (aiter's default);
any quantized dtype the device stores (int8 rounds to nearest even, where aiter's int8
truncates toward zero). Rows in registers: up to 16384 columns for each input (aiter's
kernel holds whole rows too; DeepSeek-V3's widest is 7168). Where aiter asserts, these
raise a ``TypeError`` / ``ValueError`` naming the op and argument; ``gemm_out_zero_init``
is zeroed as aiter's prologue zeroes it.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from aiter_lite.ops.triton._triton_kernels.quant.fused_fp8_quant import _fused_rms_quant_kernel
from aiter_lite.ops.triton.normalization.norm import _int64, check_eps
from aiter_lite.ops.triton.quant.dtypes import check_quant_dtype_supported
from aiter_lite.ops.triton.quant.quant import _check_group, _quant_dtype, _soft_round
from aiter_lite.spec.device import INTERPRETER, DeviceProfile, device_profile
from aiter_lite.spec.quant import GROUP_EPS, get_fp8_min_max_bounds, quant_range
from aiter_lite.utils.checks import check_bool, check_float_tensor, check_row_input, check_same_device
from aiter_lite.utils.fast_launch import launch
from aiter_lite.utils.launch import next_power_of_2
from aiter_lite.utils.launcher import launcher
from aiter_lite.utils.registry import refusing_grad

__all__ = ["fused_rms_fp8_group_quant", "fused_rms_fp8_per_tensor_static_quant", "get_fp8_min_max_bounds",
           "FusedRmsQuantLaunchConfig", "fused_rms_quant_launch_config"]

# why the aiter forms here refuse a call autograd would record (utils.registry.refusing_grad)
_NO_GRAD = "its outputs are quantized values and scales"
_MAX_COLS = 16384  # a row in registers (each input)
_STATIC_GROUP = 128  # the static form's tile rows (a row held as (BLOCK_N1 // 128, 128))


@dataclass(frozen=True)
class FusedRmsQuantLaunchConfig:
    num_warps: int  # one row a program, whole in registers


def fused_rms_quant_launch_config(n_cols: int, profile: DeviceProfile = INTERPRETER) -> FusedRmsQuantLaunchConfig:
    """The warps of a program holding a row of ``n_cols`` (the wider input's) columns."""
    return FusedRmsQuantLaunchConfig(profile.row_warps(next_power_of_2(max(n_cols, 1))))


@launcher(mutates=("q", "scale", "y1", "r_out", "y2"))
def _launch_fused_rms_quant(x1: torch.Tensor, w1: torch.Tensor, r1: torch.Tensor | None, r_out: torch.Tensor | None,
                            y1: torch.Tensor | None, q: torch.Tensor, scale: torch.Tensor, x2: torch.Tensor | None,
                            w2: torch.Tensor | None, y2: torch.Tensor | None, eps1: float, eps2: float,
                            group_size: int, round_norm: bool,
                            config: FusedRmsQuantLaunchConfig | None = None) -> None:
    """The fused RMSNorm + quant over 2-D rows: q and, per ``group_size`` columns, the
    scales into ``scale`` ((M, G), any strides), or by the one-element static ``scale``
    (``group_size`` 0); r_out, y1 and the second input's y2 where given."""
    n_rows, n1 = x1.shape
    if n_rows == 0:
        return
    n2 = 0 if x2 is None else x2.shape[1]
    block_n1 = max(next_power_of_2(max(n1, 1)), group_size)
    tile_group = group_size or min(block_n1, _STATIC_GROUP)  # the static scale: any tile rows
    block_n2 = next_power_of_2(max(n2, 1))
    cfg = config or fused_rms_quant_launch_config(max(block_n1, block_n2), device_profile(x1.device))
    q_min, q_max = quant_range(q.dtype)
    launch(
        _fused_rms_quant_kernel, (n_rows,),
        x1, w1, r1, r_out, y1, q, scale, x2, w2, y2,
        x1.stride(0), 0 if r1 is None else r1.stride(0), 0 if r_out is None else r_out.stride(0),
        0 if y1 is None else y1.stride(0), q.stride(0), scale.stride(0) if group_size else 0,
        scale.stride(1) if group_size else 0, 0 if x2 is None else x2.stride(0), 0 if y2 is None else y2.stride(0),
        n1, n2, eps1, eps2, q_min, q_max, GROUP_EPS,
        HAS_RES=r1 is not None, STORE_Y1=y1 is not None, HAS_X2=x2 is not None, ROUND=round_norm,
        SOFT_ROUND=_soft_round(q.dtype), INT64=_int64(x1, r1, r_out, y1, q, x2, y2), GROUPED=group_size > 0, GROUP=tile_group, BLOCK_N1=block_n1,
        BLOCK_N2=block_n2,
        num_warps=cfg.num_warps,
    )


def _rows(op: str, name: str, t, n_rows: int | None = None, n_cols: int | None = None) -> torch.Tensor:
    """A 2-D float input of rows (unit stride along them) on a device Triton runs on."""
    check_row_input(op, name, t)
    if t.dim() != 2:
        raise ValueError(f"{op}: {name} must be 2-D (M, N), got shape {tuple(t.shape)}")
    if (n_rows is not None and t.shape[0] != n_rows) or (n_cols is not None and t.shape[1] != n_cols):
        want = (t.shape[0] if n_rows is None else n_rows, t.shape[1] if n_cols is None else n_cols)
        raise ValueError(f"{op}: {name} must have shape {want}, got {tuple(t.shape)}")
    if t.shape[1] > _MAX_COLS:
        raise ValueError(f"{op}: {name} holds rows in registers, up to {_MAX_COLS} columns; got {t.shape[1]}")
    return t


def _weight(op: str, name: str, w, n: int, ref: torch.Tensor) -> torch.Tensor:
    check_float_tensor(op, name, w)
    if w.shape != (n,):
        raise ValueError(f"{op}: {name} must have shape ({n},), got {tuple(w.shape)}")
    check_same_device(op, name, w, "inp1", ref)
    return w if w.stride(0) == 1 or n <= 1 else w.contiguous()


def _common(op, inp1, inp1_weight, inp1_epsilon, inp2, inp2_weight, inp2_epsilon, dtype_quant, res1,
            output_unquantized_inp1):
    """Checked inputs and the allocated outputs shared by both forms: (x1, w1, eps1, x2, w2,
    eps2, r1, dtype, q, out1, out2, out_res1)."""
    x1 = _rows(op, "inp1", inp1)
    m, n1 = x1.shape
    w1 = _weight(op, "inp1_weight", inp1_weight, n1, x1)
    eps1 = check_eps(op, "inp1_epsilon", inp1_epsilon)
    x2 = w2 = out2 = None
    eps2 = 0.0
    if inp2 is not None:
        x2 = _rows(op, "inp2", inp2, n_rows=m)
        check_same_device(op, "inp2", x2, "inp1", x1)
        if inp2_weight is None or inp2_epsilon is None:
            raise ValueError(f"{op}: inp2 needs inp2_weight and inp2_epsilon, got "
                             f"{'no inp2_weight' if inp2_weight is None else 'no inp2_epsilon'}")
        w2 = _weight(op, "inp2_weight", inp2_weight, x2.shape[1], x1)
        eps2 = check_eps(op, "inp2_epsilon", inp2_epsilon)
        out2 = torch.empty(x2.shape, dtype=x1.dtype, device=x1.device)
    r1 = out_res1 = None
    if res1 is not None:
        r1 = _rows(op, "res1", res1, n_rows=m, n_cols=n1)
        check_same_device(op, "res1", r1, "inp1", x1)
        out_res1 = torch.empty(x1.shape, dtype=x1.dtype, device=x1.device)
    dtype = _quant_dtype(op, dtype_quant, "dtype_quant", x1.device)
    check_quant_dtype_supported(op, "dtype_quant", dtype, x1.device)
    out1 = None
    if check_bool(op, "output_unquantized_inp1", output_unquantized_inp1):
        out1 = torch.empty(x1.shape, dtype=x1.dtype, device=x1.device)
    q = torch.empty(x1.shape, dtype=dtype, device=x1.device)
    return x1, w1, eps1, x2, w2, eps2, r1, q, out1, out2, out_res1


@refusing_grad(_NO_GRAD)
def fused_rms_fp8_group_quant(inp1, inp1_weight, inp1_epsilon, inp2=None, inp2_weight=None, inp2_epsilon=None,
                              group_size=128, dtype_quant=None, res1=None, output_unquantized_inp1=False,
                              transpose_scale=False, is_x_scale_strided=False, gemm_out_zero_init=None):
    """aiter's ``fused_rms_fp8_group_quant`` (see the module doc): ``((q, scale), out1, out2,
    out_res1)``."""
    op = "fused_rms_fp8_group_quant"
    x1, w1, eps1, x2, w2, eps2, r1, q, out1, out2, out_res1 = _common(
        op, inp1, inp1_weight, inp1_epsilon, inp2, inp2_weight, inp2_epsilon, dtype_quant, res1,
        output_unquantized_inp1)
    group_size, _ = _check_group(op, group_size, GROUP_EPS)
    transpose_scale = check_bool(op, "transpose_scale", transpose_scale)
    is_x_scale_strided = check_bool(op, "is_x_scale_strided", is_x_scale_strided)
    m, n1 = x1.shape
    groups = -(-n1 // group_size)
    if transpose_scale:  # written column-major: the (G, M) buffer through an (M, G) view
        buf = torch.empty((groups, m), dtype=torch.float32, device=x1.device)
        scale = buf.t()
    else:
        buf = scale = torch.empty((m, groups), dtype=torch.float32, device=x1.device)
    if gemm_out_zero_init is not None:
        if not isinstance(gemm_out_zero_init, torch.Tensor):
            raise TypeError(f"{op}: gemm_out_zero_init must be a torch.Tensor or None, got "
                            f"{type(gemm_out_zero_init).__name__}")
        gemm_out_zero_init.zero_()
    _launch_fused_rms_quant(x1, w1, r1, out_res1, out1, q, scale, x2, w2, out2, eps1, eps2, group_size, False)
    if transpose_scale and not is_x_scale_strided:
        scale = buf.view(m, groups)  # aiter's contiguous presentation of the column-major bytes
    return (q, scale), out1, out2, out_res1


@refusing_grad(_NO_GRAD)
def fused_rms_fp8_per_tensor_static_quant(inp1, inp1_weight, inp1_epsilon, inp1_scale, inp2=None, inp2_weight=None,
                                          inp2_epsilon=None, dtype_quant=None, res1=None,
                                          output_unquantized_inp1=False, rmsnorm_convert_to_inp1_type=False):
    """aiter's ``fused_rms_fp8_per_tensor_static_quant`` (see the module doc): ``(q, out1,
    out2, out_res1)``; ``inp1_scale`` one fp32 element."""
    op = "fused_rms_fp8_per_tensor_static_quant"
    x1, w1, eps1, x2, w2, eps2, r1, q, out1, out2, out_res1 = _common(
        op, inp1, inp1_weight, inp1_epsilon, inp2, inp2_weight, inp2_epsilon, dtype_quant, res1,
        output_unquantized_inp1)
    if not isinstance(inp1_scale, torch.Tensor) or inp1_scale.numel() != 1 or not inp1_scale.is_floating_point():
        raise ValueError(f"{op}: inp1_scale must be a one-element float tensor, got "
                         f"{tuple(inp1_scale.shape) if isinstance(inp1_scale, torch.Tensor) else inp1_scale!r}")
    check_same_device(op, "inp1_scale", inp1_scale, "inp1", x1)
    round_norm = check_bool(op, "rmsnorm_convert_to_inp1_type", rmsnorm_convert_to_inp1_type)
    _launch_fused_rms_quant(x1, w1, r1, out_res1, out1, q, inp1_scale.reshape(1), x2, w2, out2, eps1, eps2, 0,
                            round_norm)
    return q, out1, out2, out_res1
