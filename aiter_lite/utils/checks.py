"""Argument checks shared by the public wrappers.

Each raises ``TypeError`` (wrong kind or dtype) or ``ValueError`` (wrong shape,
layout or device) with the op's name, the argument, what was expected and what
was given. They are plain attribute checks: cheap enough for every call.
"""

from __future__ import annotations

import os

import torch

FLOAT_DTYPES = (torch.float32, torch.float16, torch.bfloat16)
_FLOAT_DTYPE_NAMES = "float32, float16 or bfloat16"

# Triton reads TRITON_INTERPRET when a kernel module is imported; so do we.
TRITON_INTERPRET = os.environ.get("TRITON_INTERPRET", "0") == "1"


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


def check_triton_device(op: str, name: str, t: torch.Tensor) -> None:
    if t.device.type == "cpu" and not TRITON_INTERPRET:
        raise ValueError(
            f"{op}: {name} is on the CPU; the Triton backend needs a GPU tensor "
            "(or TRITON_INTERPRET=1 set before import); use aiter_lite.ops.native for CPU tensors"
        )


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
