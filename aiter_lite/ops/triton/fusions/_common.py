"""Argument checks and launch geometry shared by the fusion wrappers."""

from __future__ import annotations

import operator

import torch

from aiter_lite import envs
from aiter_lite.ops.triton.quant.dtypes import check_quant_dtype_supported
from aiter_lite.ops.triton.rope.rope import _check_indices, _table, _Table
from aiter_lite.spec.quant import FP8_DTYPES, quant_range
from aiter_lite.spec.rope import cache_rotary_reuse
from aiter_lite.utils.checks import (
    TRITON_INTERPRET,
    check_float_tensor,
    check_same_device,
    check_triton_device,
    host_check_wanted,
)

CACHE_DTYPES = (torch.bfloat16, torch.float16, torch.float32, *FP8_DTYPES)
_NO_FP8 = (-1.0, 1.0)  # the fp8 range argument of an output that is not fp8 (unused)


def check_rope_and_slots() -> bool:
    """Whether either index switch asks for host checks (the ops taking positions and slots)."""
    return envs.rope_check_positions() or envs.kv_cache_check_slots()


def check_heads(op: str, name: str, t, ref_name: str | None = None, ref: torch.Tensor | None = None,
                dims: str = "(tokens, heads, head_dim)") -> None:
    """A 3-D float tensor on a device Triton runs on (and ``ref``'s)."""
    check_float_tensor(op, name, t)
    if t.dim() != 3:
        raise ValueError(f"{op}: {name} must be 3-D {dims}, got shape {tuple(t.shape)}")
    check_triton_device(op, name, t)
    if ref is not None:
        check_same_device(op, name, t, ref_name, ref)


def check_out_dtype(op: str, name: str, dtype: torch.dtype, device: torch.device, allowed=CACHE_DTYPES) -> None:
    if dtype not in allowed:
        raise TypeError(f"{op}: {name} must be one of {', '.join(str(d) for d in allowed)}, got {dtype}")
    if dtype in FP8_DTYPES:
        check_quant_dtype_supported(op, name, dtype, device)


def fp8_range(dtype: torch.dtype) -> tuple[float, float]:
    return quant_range(dtype) if dtype in FP8_DTYPES else _NO_FP8


def block_shift(block_size: int) -> dict:
    """A cache-writing kernel's BS_SHIFT where block_size is a power of 2 (each slot's block and
    offset by a shift and a mask), else nothing (the kernel divides: a 64-bit division by a
    runtime value is a subroutine of some 70 instructions a token on NVIDIA)."""
    if block_size < 1 or block_size & (block_size - 1):
        return {}
    return {"BS_SHIFT": block_size.bit_length() - 1}


def soft_round(*dtypes: torch.dtype) -> bool:
    """fp8 rounded in fp32 before the conversion: under the interpreter only."""
    return TRITON_INTERPRET and any(d in FP8_DTYPES for d in dtypes)


def check_out(op: str, name: str, out, shape: tuple, ref: torch.Tensor, allowed=CACHE_DTYPES,
              ref_name: str = "q") -> torch.Tensor:
    """A caller's output tensor of ``shape`` on ``ref``'s device (``ref_name``: the caller's
    name of ``ref``), or a new one like ``ref``."""
    if out is None:
        return torch.empty(shape, dtype=ref.dtype, device=ref.device)
    if not isinstance(out, torch.Tensor):
        raise TypeError(f"{op}: {name} must be a torch.Tensor or None, got {type(out).__name__}")
    check_same_device(op, name, out, ref_name, ref)
    check_out_dtype(op, name, out.dtype, out.device, allowed)
    if tuple(out.shape) != tuple(shape):
        raise ValueError(f"{op}: {name} must have shape {tuple(shape)}, got {tuple(out.shape)}")
    return out


def check_scale(op: str, name: str, scale, ref: torch.Tensor, ref_name: str = "q") -> None:
    """None or a one-element float tensor on ``ref``'s device (``ref_name``: the caller's name of ``ref``)."""
    if scale is None:
        return
    if not isinstance(scale, torch.Tensor):
        raise TypeError(f"{op}: {name} must be a one-element torch.Tensor or None, got {type(scale).__name__}")
    if not scale.dtype.is_floating_point or scale.dtype in FP8_DTYPES:
        raise TypeError(f"{op}: {name} must be a float tensor (fp32), got {scale.dtype}")
    if scale.numel() != 1:
        raise ValueError(f"{op}: {name} must have one element (a per-tensor scale), got shape {tuple(scale.shape)}")
    check_same_device(op, name, scale, ref_name, ref)


def check_slots(op: str, slot_mapping, n_tokens: int, n_cache_slots: int, ref: torch.Tensor,
                tokens_name: str = "q", slots_are: str = "num_blocks x block_size") -> torch.Tensor:
    """slot_mapping: 1-D int32 / int64 on ``ref``'s device, no longer than the tokens; its
    slots checked against the cache on the host where it is there already, or when asked
    to. Returns it with a unit stride."""
    if not isinstance(slot_mapping, torch.Tensor):
        raise TypeError(f"{op}: slot_mapping must be a torch.Tensor, got {type(slot_mapping).__name__}")
    if slot_mapping.dtype not in (torch.int32, torch.int64):
        raise TypeError(f"{op}: slot_mapping must be int32 or int64, got {slot_mapping.dtype}")
    if slot_mapping.dim() != 1:
        raise ValueError(f"{op}: slot_mapping must be 1-D (tokens,), got shape {tuple(slot_mapping.shape)}")
    if slot_mapping.shape[0] > n_tokens:
        raise ValueError(f"{op}: slot_mapping has {slot_mapping.shape[0]} entries, more than {tokens_name}'s "
                         f"{n_tokens} tokens")
    check_same_device(op, "slot_mapping", slot_mapping, tokens_name, ref)  # before a host read of its values
    if host_check_wanted(slot_mapping, switch=envs.kv_cache_check_slots) and slot_mapping.numel():
        hi = int(slot_mapping.max())
        if hi >= n_cache_slots:
            raise ValueError(f"{op}: slot_mapping must hold slots below the cache's {n_cache_slots} "
                             f"({slots_are}), or < 0 for padding; got {hi}")
    return slot_mapping.contiguous()  # the kernels read it with a unit stride (a no-op when it has one)


def check_positions(op: str, name: str, pos, n_tokens: int, ref: torch.Tensor, n_rows: int,
                    offsets=None, offsets_name: str = "offsets",
                    ref_name: str = "q") -> tuple[torch.Tensor, torch.Tensor | None]:
    """Positions (and offsets) of ``n_tokens`` tokens on ``ref``'s device (``ref_name``: the
    caller's name of ``ref``), returned with a unit stride (the kernels read them so; a no-op
    for contiguous ones); their table rows checked on the host where they are there already,
    or with AITER_ROPE_CHECK_POSITIONS=1."""
    _check_indices(op, name, pos, (n_tokens,), ref, ref_name)
    if offsets is not None:
        _check_indices(op, offsets_name, offsets, (n_tokens,), ref, ref_name)
    if host_check_wanted(pos, offsets, switch=envs.rope_check_positions) and n_tokens:
        rows = pos.long() + (0 if offsets is None else offsets.long())
        lo, hi = int(rows.min()), int(rows.max())
        if lo < 0 or hi >= n_rows:
            what = name + (f" + {offsets_name}" if offsets is not None else "")
            raise ValueError(f"{op}: {what} must lie in [0, {n_rows}) (cos has {n_rows} rows), "
                             f"got values from {lo} to {hi}")
    return pos.contiguous(), None if offsets is None else offsets.contiguous()


def rope_tables(op: str, cos, sin, ref: torch.Tensor, head_dim: int, ref_name: str = "q",
                rotated_name: str | None = None) -> tuple[_Table, bool, int]:
    """The cos / sin table (on ``ref``'s device; ``ref_name`` the caller's name of ``ref``),
    whether it is reused for both members of a pair, and HALF (R / 2). ``rotated_name``: the
    tensor whose ``head_dim`` the table must fit (``ref_name`` if None)."""
    tab = _table(op, ("cos", "sin"), cos, sin, ref, ref_name)
    reuse = cache_rotary_reuse(op, head_dim, tab.width, rotated_name or ref_name)
    return tab, reuse, tab.width if reuse else tab.width // 2


def max_offset(*tensors: torch.Tensor) -> int:
    """One past the largest element offset of any of ``tensors`` from its first element."""
    return max((sum(map(operator.mul, t.shape, map(abs, t.stride()))) - sum(map(abs, t.stride())) + 1
                for t in tensors if t is not None and t.numel()), default=0)
