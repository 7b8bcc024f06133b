"""Helpers of the fusion tests: bit views, tolerances, bitwise asserts, sentinel-filled caches."""

from __future__ import annotations

import math

import torch

FP8 = (torch.float8_e4m3fn, torch.float8_e5m2, torch.float8_e4m3fnuz)
_BITS = {1: torch.uint8, 2: torch.int16, 4: torch.int32}


def bits(t: torch.Tensor) -> torch.Tensor:
    return t.view(_BITS[t.element_size()])


def sentinel(shape, dtype, device) -> torch.Tensor:
    """Random bytes, the non-finite patterns replaced by -7.5: a distinctive finite value in every slot."""
    n = math.prod(shape) * dtype.itemsize
    t = torch.randint(0, 256, (n,), dtype=torch.uint8, device=device).view(dtype).reshape(shape)
    bad = ~torch.isfinite(t.float())
    bits(t)[bad] = bits(torch.tensor([-7.5], device=device).to(dtype))
    return t


def tol(dtype: torch.dtype) -> dict:
    """One rounding of the output dtype (fp32 math differs far less)."""
    eps = torch.finfo(dtype).eps
    return {"atol": max(4 * eps, 2e-6), "rtol": eps}


def assert_bits(name: str, got: torch.Tensor, want: torch.Tensor, alt: torch.Tensor | None = None) -> None:
    """Bit for bit; ``alt``: a second allowed value per element."""
    assert got.shape == want.shape and got.dtype == want.dtype, \
        f"{name}: {tuple(got.shape)} {got.dtype}, expected {tuple(want.shape)} {want.dtype}"
    bad = bits(got) != bits(want)
    if alt is not None:
        bad &= bits(got) != bits(alt)
    if bad.any():
        where = bad.nonzero()[:6].tolist()
        raise AssertionError(f"{name}: {int(bad.sum())} of {bad.numel()} elements differ in their bits, first at "
                             f"{where}: got {got[bad][:6].float().tolist()}, expected {want[bad][:6].float().tolist()}")
