"""Which quantized dtypes a device can store, on the Triton backend. The dtypes themselves,
their ranges and which e4m3 a device wants are ``aiter_lite.spec.quant``'s (re-exported
here)."""

from __future__ import annotations

import torch

from aiter_lite.spec.device import device_profile
from aiter_lite.spec.quant import (  # noqa: F401  (re-exported)
    QUANT_DTYPES,
    get_fp8_e4m3_dtype,
    min_scale,
    quant_range,
)


def supported_quant_dtypes(device: torch.device) -> tuple[torch.dtype, ...]:
    """The quantized dtypes Triton can store on ``device`` (its :class:`DeviceProfile`'s):
    int8 and e5m2 everywhere; e4m3fn on NVIDIA sm_89+ and AMD gfx950 / RDNA4; e4m3fnuz on
    MI300-class AMD only. Every dtype on the CPU (the interpreter converts in software)."""
    return device_profile(device).quant_dtypes


@torch.compiler.assume_constant_result
def _unsupported(device_type: str, index: int | None, dtype: torch.dtype) -> str:
    """"" where ``dtype`` is storable on the device, else the names of those that are. A
    constant to torch.compile (evaluated while tracing, not traced: a device's formats do
    not change), so a compiled call checks as an eager one does."""
    profile = device_profile(torch.device(device_type, index))
    if dtype in profile.quant_dtypes:
        return ""
    names = ", ".join(str(d) for d in profile.quant_dtypes)
    if profile.fp8_e4m3 is None:
        return f"{names}; it has no e4m3 fp8 ({profile.arch})"
    return f"{names}; get_fp8_e4m3_dtype() picks its e4m3"


def check_quant_dtype_supported(op: str, name: str, dtype: torch.dtype, device: torch.device) -> None:
    """A ValueError naming the dtypes ``device`` supports where ``dtype`` is not one."""
    names = _unsupported(device.type, device.index, dtype)
    if names:
        raise ValueError(f"{op}: {name} of dtype {dtype} cannot be written on {device} (this device supports "
                         f"{names})")
