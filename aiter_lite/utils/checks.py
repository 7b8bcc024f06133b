"""Argument checks shared by the public wrappers.

Each raises ``TypeError`` (wrong kind or dtype) or ``ValueError`` (wrong value, shape,
layout or device) with the op's name, the argument, what was expected and what was
given. They are plain attribute checks: cheap enough for every call.

Scalars follow one rule, whatever the op: a flag (:func:`check_bool`) is a bool or the
int 0 or 1 (the dispatcher passes either to a ``bool`` schema argument, and aiter's
callers write both); a count or index (:func:`check_int`) is an int and never a bool
(``True`` as a count is a mistake); a real (:func:`check_real`) is an int or a float,
never a bool, and finite.
"""

from __future__ import annotations

import math
import numbers
import os

import torch

FLOAT_DTYPES = (torch.float32, torch.float16, torch.bfloat16)
_FLOAT_DTYPE_NAMES = "float32, float16 or bfloat16"

# Triton reads TRITON_INTERPRET when a kernel module is imported; so do we.
TRITON_INTERPRET = os.environ.get("TRITON_INTERPRET", "0") == "1"


def check_bool(op: str, name: str, value) -> bool:
    """A flag: ``True`` / ``False`` or the int 0 / 1; returned as a bool."""
    if isinstance(value, bool):
        return value
    if isinstance(value, numbers.Integral) and value in (0, 1):
        return bool(value)
    raise TypeError(f"{op}: {name} must be a bool, got {value!r}")


def check_int(op: str, name: str, value, lo: int | None = None, hi: int | None = None, what: str = "") -> int:
    """An int (not a bool) in [lo, hi] where those are given; ``what``, after the range in
    the message, says why the range."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{op}: {name} must be an int, got {type(value).__name__} {value!r}")
    value = int(value)
    if (lo is not None and value < lo) or (hi is not None and value > hi):
        bounds = f"[{lo}, {hi}]" if lo is not None and hi is not None else f">= {lo}" if lo is not None else f"<= {hi}"
        raise ValueError(f"{op}: {name} must be {'in ' if hi is not None and lo is not None else ''}{bounds}"
                         f"{f' {what}' if what else ''}, got {value}")
    return value


def check_real(op: str, name: str, value, *, positive: bool = False) -> float:
    """A finite real number (an int or a float, not a bool), > 0 where ``positive``; as a float."""
    if type(value) is not float:  # the common case first: an ABC isinstance is slow
        if isinstance(value, bool) or not isinstance(value, numbers.Real):
            raise TypeError(f"{op}: {name} must be a real number, got {type(value).__name__} {value!r}")
        value = float(value)
    if not math.isfinite(value) or (positive and not value > 0):
        raise ValueError(f"{op}: {name} must be {'positive and ' if positive else ''}finite, got {value}")
    return value


def check_choice(op: str, name: str, value, choices: tuple) -> str:
    """One of ``choices`` (strings)."""
    if not isinstance(value, str) or value not in choices:
        raise ValueError(f"{op}: {name} must be one of {', '.join(map(repr, choices))}, got {value!r}")
    return value


def check_float_tensor(op: str, name: str, t) -> None:
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{op}: {name} must be a torch.Tensor, got {type(t).__name__}")
    if t.dtype not in FLOAT_DTYPES:
        raise TypeError(f"{op}: {name} must be {_FLOAT_DTYPE_NAMES}, got {t.dtype}")


def check_row_input(op: str, name: str, t, dims_note: str = "") -> None:
    """A float tensor of at least 1 dim, unit stride in the last, on a device Triton runs on."""
    check_float_tensor(op, name, t)
    if t.dim() == 0:
        raise ValueError(f"{op}: {name} must have at least 1 dim{dims_note}, got a 0-dim tensor")
    check_unit_last_stride(op, name, t)
    check_triton_device(op, name, t)


# Devices whose tensors a launch may take: GPUs (CUDA and ROCm both report "cuda"), the
# CPU under Triton's interpreter, and "meta" while launches are recorded, not run
# (op_tests/utils/kernel_builds.offline, scripts/check_targets.py).
LAUNCH_DEVICES: set[str] = {"cuda", "cpu"} if TRITON_INTERPRET else {"cuda"}


def check_triton_device(op: str, name: str, t: torch.Tensor) -> None:
    """``t`` on a device the Triton backend launches on (a GPU; the CPU under the interpreter)."""
    kind = t.device.type
    if kind in LAUNCH_DEVICES:
        return
    if kind == "cpu":
        raise ValueError(
            f"{op}: {name} is on the CPU; the Triton backend needs a GPU tensor "
            "(or TRITON_INTERPRET=1 set before import); use aiter_lite.ops.native for CPU tensors"
        )
    raise ValueError(f"{op}: {name} is on the {kind} device; the Triton backend needs a GPU tensor "
                     f"(or a CPU one with TRITON_INTERPRET=1)")


def host_check_wanted(*tensors, switch) -> bool:
    """Index tensors (positions, slots, targets) are checked on the host when they are there
    already or ``switch`` (an envs function) asks; not while torch.compile traces (a host
    read breaks the graph)."""
    if torch.compiler.is_compiling():
        return False
    return any(t is not None and t.device.type == "cpu" for t in tensors) or switch()


def check_same_device(op: str, name: str, t: torch.Tensor, ref_name: str, ref: torch.Tensor) -> None:
    if t.device != ref.device:
        raise ValueError(f"{op}: {name} must be on {ref_name}'s device {ref.device}, got {t.device}")


def check_unit_last_stride(op: str, name: str, t: torch.Tensor) -> None:
    if t.dim() and t.shape[-1] > 1 and t.stride(-1) != 1:
        raise ValueError(
            f"{op}: {name} must have unit stride in its last dim, got strides {tuple(t.stride())} "
            f"for shape {tuple(t.shape)}"
        )


def rows_view(op: str, name: str, t: torch.Tensor, *, writable: bool) -> torch.Tensor:
    """``t`` as a 2-D (rows, last dim) tensor with one row stride.

    Inputs whose leading dims cannot share one row stride are gathered by
    ``reshape`` (a copy); an output must be a view, or it would not be written.
    """
    if t.dim() == 2:  # already rows (a view op costs a few us a call on a slow host)
        return t
    n = t.shape[-1]
    if _one_row_stride(t):
        return t.view(-1, n)
    if writable:
        raise ValueError(
            f"{op}: {name} with shape {tuple(t.shape)} and strides {tuple(t.stride())} cannot be "
            "viewed as rows of one stride; pass a tensor whose leading dims are contiguous"
        )
    return t.reshape(-1, n)


def _one_row_stride(t: torch.Tensor) -> bool:
    """Whether ``t``'s leading dims flatten into rows of one stride (``view(-1, n)`` works),
    decided from the strides: torch.compile traces no try / except around a failing view."""
    if t.shape[-1] == 0:
        return False
    if t.numel() == 0:
        return True
    outer = None  # the stride the next dim out must have
    for size, stride in zip(reversed(t.shape[:-1]), reversed(t.stride()[:-1])):
        if size == 1:
            continue
        if outer is not None and stride != outer:
            return False
        outer = stride * size
    return True
