"""Launch arithmetic shared by the wrappers, in plain Python integers.

``triton.cdiv`` and ``triton.next_power_of_2`` are constexpr functions whose
calls unwrap and re-check their arguments: eight of them cost about 10 us per
launch on a slow host, which eager decode pays on every call.
"""

from __future__ import annotations

import functools

import torch

WARP_SIZE = 64 if torch.version.hip else 32  # a CDNA wavefront is 64 lanes


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


def next_power_of_2(n: int) -> int:
    """Smallest power of two >= n (1 for n <= 1)."""
    return 1 << (n - 1).bit_length() if n > 1 else 1


@functools.lru_cache(maxsize=16)
def _sm_count(device_index: int) -> int:
    return torch.cuda.get_device_properties(device_index).multi_processor_count


def num_sms(device: torch.device) -> int:
    """Streaming multiprocessors (compute units on AMD) of a CUDA/HIP device."""
    return _sm_count(device.index if device.index is not None else torch.cuda.current_device())
