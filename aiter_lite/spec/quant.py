"""Quantized dtypes: which exist, each one's range, the e4m3 flavour a device computes in,
the floor of a dynamic scale and the group-quant amax floor."""

from __future__ import annotations

import functools

import torch

QUANT_DTYPES = (torch.float8_e4m3fn, torch.float8_e4m3fnuz, torch.float8_e5m2, torch.int8)
FP8_DTYPES = (torch.float8_e4m3fn, torch.float8_e4m3fnuz, torch.float8_e5m2)

GROUP_EPS = 1e-10  # per_token_group_quant's amax floor (vLLM's default)

# MI300-class (CDNA3) GPUs compute in the "fnuz" e4m3 (no negative zero, bias 8, max 240);
# everything else (NVIDIA sm_89+, CDNA4 gfx950) in OCP e4m3fn (max 448).
_FNUZ_ARCHS = ("gfx940", "gfx941", "gfx942")


@functools.lru_cache(maxsize=16)
def _arch(device_index: int) -> str:
    return getattr(torch.cuda.get_device_properties(device_index), "gcnArchName", "")


def is_fnuz_arch(device_index: int) -> bool:
    """Whether the AMD GPU ``device_index`` is MI300-class (its e4m3 is e4m3fnuz)."""
    return _arch(device_index).split(":")[0] in _FNUZ_ARCHS


def get_fp8_e4m3_dtype(device: torch.device | int | None = None) -> torch.dtype:
    """``torch.float8_e4m3fnuz`` on MI300-class AMD GPUs (gfx942), ``torch.float8_e4m3fn``
    elsewhere (NVIDIA, other AMD, no GPU). :func:`quant_range` gives its max (240 / 448)."""
    if not (torch.version.hip and torch.cuda.is_available()):
        return torch.float8_e4m3fn
    index = torch.device(device).index if isinstance(device, (str, torch.device)) else device
    fnuz = is_fnuz_arch(torch.cuda.current_device() if index is None else index)
    return torch.float8_e4m3fnuz if fnuz else torch.float8_e4m3fn


@functools.lru_cache(maxsize=16)
def quant_range(dtype: torch.dtype) -> tuple[float, float]:
    """(min, max) a quantized dtype holds: (-448, 448) for e4m3fn, (-240, 240) for
    e4m3fnuz, (-57344, 57344) for e5m2, (-128, 127) for int8."""
    info = torch.finfo(dtype) if dtype.is_floating_point else torch.iinfo(dtype)
    return float(info.min), float(info.max)


def min_scale(dtype: torch.dtype) -> float:
    """The floor of a dynamic per-tensor / per-token scale, ``1 / (q_max * 512)`` (vLLM's
    fp8 kernels'): an all-zero input quantizes to zeros with a finite scale."""
    return 1.0 / (quant_range(dtype)[1] * 512.0)
