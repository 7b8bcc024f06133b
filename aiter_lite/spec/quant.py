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


def storable_quant_dtypes(arch: str) -> tuple[torch.dtype | None, tuple[torch.dtype, ...]]:
    """(the e4m3 an arch computes in or None, the quantized dtypes its kernels can store)
    for ``"sm_90"`` / ``"gfx942"`` style names: every dtype in the interpreter (it converts
    in software); e4m3fn, e5m2 and int8 on NVIDIA sm_89+ and AMD gfx950 / RDNA4;
    e4m3fnuz, e5m2 and int8 on MI300-class AMD; e5m2 and int8 on older NVIDIA (A100:
    Triton has no e4m3fn conversion for sm_80)."""
    if arch.startswith("sm_"):
        if int(arch.removeprefix("sm_").rstrip("af")) >= 89:
            return torch.float8_e4m3fn, (torch.float8_e4m3fn, torch.float8_e5m2, torch.int8)
        return None, (torch.float8_e5m2, torch.int8)
    if arch.startswith("gfx"):
        e4m3 = torch.float8_e4m3fnuz if arch in _FNUZ_ARCHS else torch.float8_e4m3fn
        return e4m3, (e4m3, torch.float8_e5m2, torch.int8)
    return torch.float8_e4m3fn, QUANT_DTYPES


def get_fp8_e4m3_dtype(device: torch.device | str | int | None = None) -> torch.dtype:
    """The e4m3 ``device`` computes in (its ``DeviceProfile``'s; default the current GPU):
    ``torch.float8_e4m3fnuz`` on MI300-class AMD GPUs (gfx942), ``torch.float8_e4m3fn``
    elsewhere (NVIDIA, other AMD, no GPU, and devices with no e4m3 of their own such as
    sm_80, whose kernels then refuse it with a ValueError naming what they store).
    :func:`quant_range` gives its max (240 / 448)."""
    from aiter_lite.spec.device import device_profile

    dev = torch.device("cuda", device) if isinstance(device, int) else None if device is None else torch.device(device)
    if (dev is None or dev.type == "cuda") and not torch.cuda.is_available():
        dev = torch.device("cpu")  # no GPU here: the interpreter's (or a profile in use)
    return device_profile(dev or torch.device("cuda")).fp8_e4m3 or torch.float8_e4m3fn


@functools.lru_cache(maxsize=16)
def quant_range(dtype: torch.dtype) -> tuple[float, float]:
    """(min, max) a quantized dtype holds: (-448, 448) for e4m3fn, (-240, 240) for
    e4m3fnuz, (-57344, 57344) for e5m2, (-128, 127) for int8."""
    info = torch.finfo(dtype) if dtype.is_floating_point else torch.iinfo(dtype)
    return float(info.min), float(info.max)


def get_fp8_min_max_bounds(fp8_dtype: torch.dtype) -> tuple[float, float]:
    """vLLM's fp8 range for ``fp8_dtype`` (aiter's ``fused_fp8_quant.get_fp8_min_max_bounds``):
    +-224 for e4m3fnuz (its headroom below 240), else the dtype's finite range."""
    if not isinstance(fp8_dtype, torch.dtype) or not fp8_dtype.is_floating_point or fp8_dtype.itemsize != 1:
        raise TypeError(f"get_fp8_min_max_bounds: fp8_dtype must be a float8 torch.dtype, got {fp8_dtype!r}")
    if fp8_dtype == getattr(torch, "float8_e4m3fnuz", None):
        return -224.0, 224.0
    info = torch.finfo(fp8_dtype)
    return float(info.min), float(info.max)


def min_scale(dtype: torch.dtype) -> float:
    """The floor of a dynamic per-tensor / per-token scale, ``1 / (q_max * 512)`` (vLLM's
    fp8 kernels'): an all-zero input quantizes to zeros with a finite scale."""
    return 1.0 / (quant_range(dtype)[1] * 512.0)

