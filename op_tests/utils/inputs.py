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


_NAN_BYTE = {torch.float8_e4m3fnuz: 0x80, torch.float8_e5m2fnuz: 0x80}  # fnuz: NaN is the negative zero code


def poison(t: torch.Tensor) -> torch.Tensor:
    """``t`` filled in place with NaN (fp8: its NaN byte; int8: 0x5A), returned. Left alone:
    a tensor that requires grad (no op output starts as one; torch.compile's own leaves
    do, where a test patches torch.empty), and any while torch.compile traces (the fill
    would join the compiled graph; inductor cannot build an fp8 fill)."""
    if t.requires_grad or torch.compiler.is_compiling():
        return t
    if t.dtype.is_floating_point and t.element_size() == 1:
        t.view(torch.uint8).fill_(_NAN_BYTE.get(t.dtype, 0x7F))
    elif t.is_floating_point():
        t.fill_(float("nan"))
    elif t.dtype == torch.int8:
        t.fill_(0x5A)
    return t


def poison_allocations(monkeypatch) -> None:
    """Every tensor ``torch.empty`` / ``torch.empty_like`` allocates from here on (an op's own
    outputs included) starts poisoned, so an element an allocating op leaves unwritten fails."""
    real_empty, real_like = torch.empty, torch.empty_like
    monkeypatch.setattr(torch, "empty", lambda *a, **k: poison(real_empty(*a, **k)))
    monkeypatch.setattr(torch, "empty_like", lambda *a, **k: poison(real_like(*a, **k)))
