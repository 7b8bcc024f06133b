"""Quantized dtypes: which fp8 e4m3 a device wants, and each dtype's range."""

from __future__ import annotations

import functools

import torch

QUANT_DTYPES = (torch.float8_e4m3fn, torch.float8_e4m3fnuz, torch.float8_e5m2, torch.int8)

# MI300-class (CDNA3) GPUs compute in the "fnuz" e4m3 (no negative zero, bias 8, max 240);
# everything else (NVIDIA sm_89+, CDNA4 gfx950) in OCP e4m3fn (max 448).
_FNUZ_ARCHS = ("gfx940", "gfx941", "gfx942")


@functools.lru_cache(maxsize=16)
def _arch(device_index: int) -> str:
    return getattr(torch.cuda.get_device_properties(device_index), "gcnArchName", "")


def get_fp8_e4m3_dtype(device: torch.device | int | None = None) -> torch.dtype:
    """``torch.float8_e4m3fnuz`` on MI300-class AMD GPUs (gfx942), ``torch.float8_e4m3fn``
    elsewhere (NVIDIA, other AMD, no GPU). :func:`quant_range` gives its max (240 / 448)."""
    if not (torch.version.hip and torch.cuda.is_available()):
        return torch.float8_e4m3fn
    index = torch.device(device).index if isinstance(device, (str, torch.device)) else device
    arch = _arch(torch.cuda.current_device() if index is None else index)
    return torch.float8_e4m3fnuz if arch.split(":")[0] in _FNUZ_ARCHS else torch.float8_e4m3fn


@functools.lru_cache(maxsize=64)
def supported_quant_dtypes(device: torch.device) -> tuple[torch.dtype, ...]:
    """The quantized dtypes Triton can store on ``device``: int8 and e5m2 everywhere;
    e4m3fn on NVIDIA sm_89+ and AMD gfx950 / RDNA4; e4m3fnuz on MI300-class AMD only.
    Every dtype on the CPU (the interpreter converts in software)."""
    if device.type != "cuda":
        return QUANT_DTYPES
    index = torch.cuda.current_device() if device.index is None else device.index
    if torch.version.hip:
        fnuz = _arch(index).split(":")[0] in _FNUZ_ARCHS
        e4m3 = torch.float8_e4m3fnuz if fnuz else torch.float8_e4m3fn
        return (e4m3, torch.float8_e5m2, torch.int8)
    if torch.cuda.get_device_capability(index) >= (8, 9):
        return (torch.float8_e4m3fn, torch.float8_e5m2, torch.int8)
    return (torch.float8_e5m2, torch.int8)


@torch.compiler.assume_constant_result
def _unsupported(device_type: str, index: int | None, dtype: torch.dtype) -> str:
    """"" where ``dtype`` is storable on the device, else the names of those that are. A
    constant to torch.compile (evaluated while tracing, not traced: a device's formats do
    not change), so a compiled call checks as an eager one does."""
    supported = supported_quant_dtypes(torch.device(device_type, index))
    return "" if dtype in supported else ", ".join(str(d) for d in supported)


def check_quant_dtype_supported(op: str, name: str, dtype: torch.dtype, device: torch.device) -> None:
    """A ValueError naming the dtypes ``device`` supports where ``dtype`` is not one."""
    names = _unsupported(device.type, device.index, dtype)
    if names:
        raise ValueError(f"{op}: {name} of dtype {dtype} cannot be written on {device} (this device supports "
                         f"{names}; get_fp8_e4m3_dtype() picks its e4m3)")


@functools.lru_cache(maxsize=16)
def quant_range(dtype: torch.dtype) -> tuple[float, float]:
    """(min, max) a quantized dtype holds: (-448, 448) for e4m3fn, (-240, 240) for
    e4m3fnuz, (-57344, 57344) for e5m2, (-128, 127) for int8."""
    if dtype.is_floating_point:
        info = torch.finfo(dtype)
    else:
        info = torch.iinfo(dtype)
    return float(info.min), float(info.max)


def min_scale(dtype: torch.dtype) -> float:
    """The floor of a dynamic per-tensor / per-token scale, ``1 / (q_max * 512)`` (vLLM's
    fp8 kernels'): an all-zero input quantizes to zeros with a finite scale."""
    return 1.0 / (quant_range(dtype)[1] * 512.0)
