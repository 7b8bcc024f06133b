"""Input factories: every dtype, odd sizes, M=0/M=1, strided rows; NaN-poisoned outputs."""

import torch

from op_tests.utils.device import DEVICE

DTYPES = (torch.float32, torch.float16, torch.bfloat16)
# Sizes that are not multiples of any block or vector width.
ODD_SIZES = (1, 7, 127, 1000, 4097)


def make_rows(m: int, n: int, dtype=torch.float32, *, strided: bool = False, scale: float = 1.0,
              lead: tuple = (), device=DEVICE) -> torch.Tensor:
    """Fresh random (*lead, m, n) input; ``strided`` returns ``x[..., :n]`` of a wider tensor."""
    width = n + 64 + 3 if strided else n  # odd padding: the row stride is not a nice number
    x = (torch.randn(*lead, m, width, device=device, dtype=torch.float32) * scale).to(dtype)
    return x[..., :n] if strided else x


def poisoned(shape, dtype, device=DEVICE) -> torch.Tensor:
    """An output buffer full of NaN, so any element the op does not write fails the comparison."""
    return torch.full(tuple(shape), float("nan"), dtype=dtype, device=device)
