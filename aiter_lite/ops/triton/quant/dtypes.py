"""Which quantized dtypes a device can store, on the Triton backend. The dtypes themselves,
their ranges and which e4m3 a device wants are ``aiter_lite.spec.quant``'s (re-exported
here)."""

from __future__ import annotations

import functools

import torch

from aiter_lite.spec.quant import (  # noqa: F401  (re-exported)
    QUANT_DTYPES,
    get_fp8_e4m3_dtype,
    is_fnuz_arch,
    min_scale,
    quant_range,
)


@functools.lru_cache(maxsize=64)
def supported_quant_dtypes(device: torch.device) -> tuple[torch.dtype, ...]:
    """The quantized dtypes Triton can store on ``device``: int8 and e5m2 everywhere;
    e4m3fn on NVIDIA sm_89+ and AMD gfx950 / RDNA4; e4m3fnuz on MI300-class AMD only.
    Every dtype on the CPU (the interpreter converts in software)."""
    if device.type != "cuda":
        return QUANT_DTYPES
    index = torch.cuda.current_device() if device.index is None else device.index
    if torch.version.hip:
        e4m3 = torch.float8_e4m3fnuz if is_fnuz_arch(index) else torch.float8_e4m3fn
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
