"""Launch arithmetic shared by the wrappers, in plain Python integers.

``triton.cdiv`` and ``triton.next_power_of_2`` are constexpr functions whose
calls unwrap and re-check their arguments: eight of them cost about 10 us per
launch on a slow host, which eager decode pays on every call.
"""

from __future__ import annotations

from typing import Callable

import torch

from aiter_lite.spec.device import DeviceProfile, device_profile


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


def next_power_of_2(n: int) -> int:
    """Smallest power of two >= n (1 for n <= 1)."""
    return 1 << (n - 1).bit_length() if n > 1 else 1


def prev_power_of_2(n: int) -> int:
    """Largest power of two <= n (1 for n <= 1)."""
    return 1 << (n.bit_length() - 1) if n > 1 else 1


def fill_tile(n_tokens: int, n_heads: int, width: int, tile: int, max_heads: int | None = None) -> tuple[int, int]:
    """(tokens, heads) a program, powers of 2: heads of ``width`` elements (at most
    ``max_heads``, and as many as there are), then tokens (as many as there are), while the
    tile stays within ``tile`` elements; at least one of each."""
    block_h = min(next_power_of_2(max(n_heads, 1)), prev_power_of_2(tile // max(width, 1)))
    if max_heads is not None:
        block_h = min(block_h, max_heads)
    block_t = min(prev_power_of_2(tile // (block_h * max(width, 1))), next_power_of_2(max(n_tokens, 1)))
    return block_t, block_h


def grid_sms(profile: DeviceProfile, interpreter_sms: int = 4) -> int:
    """SMs to size a grid for: the profile's, or ``interpreter_sms`` in the interpreter
    (whose programs run one after another: each config's own small number)."""
    return interpreter_sms if profile.interpreter else profile.sms


def halve_until_filled(block: int, programs: Callable[[int], int], profile: DeviceProfile, floor: int = 1) -> int:
    """``block`` (a power of 2: tokens, heads) halved, not below ``floor``, until
    ``programs(block)`` programs give the grid two programs an SM: at decode sizes more,
    smaller programs."""
    want = 2 * grid_sms(profile)
    while block > floor and programs(block) < want:
        block //= 2
    return block


_stream_buffers: dict = {}


def stream_buffer(tag: str, numel: int, dtype: torch.dtype, device: torch.device, *,
                  zeroed: bool) -> torch.Tensor:
    """A flat buffer of at least ``numel`` elements that every launch on the current device
    and stream reuses (kernels of one stream run one after another), kept for the next call
    and grown as needed: no allocation per call, and a launch plan may hold it
    (``fast_launch.keep``). A ``zeroed`` buffer starts zeroed, and the kernels given it must
    leave it zeroed when they finish (the interpreter's CPU launches reuse one too, so the
    CPU tests check that). Under CUDA-graph capture a new one, the graph's own. Declared
    persistent to a plan being recorded (``fast_launch.keep``); making or growing it is not
    the recorded call's work."""
    from aiter_lite.utils import fast_launch

    new = torch.zeros if zeroed else torch.empty
    if device.type != "cuda":
        key = (tag, dtype, device.type, None)
    elif torch.cuda.is_current_stream_capturing():
        return new(numel, dtype=dtype, device=device)
    else:
        index = device.index if device.index is not None else torch.cuda.current_device()
        key = (tag, dtype, index, torch.cuda.current_stream(index).cuda_stream)
    buf = _stream_buffers.get(key)
    if buf is None or buf.numel() < numel:
        with fast_launch.unwatched():
            buf = _stream_buffers[key] = new(max(numel, 2 * (0 if buf is None else buf.numel())), dtype=dtype,
                                             device=device)
    fast_launch.keep(buf)
    return buf


def split_row_slots(op: str, n_rows: int, n_cols: int, block_n: int, device: torch.device, *,
                    released: bool = False):
    """(n_segs, slots, phases) for rows split into ``block_n``-wide segments, one program
    each, that wait for each other: a zeroed int64 word per segment for its statistics and
    one for the ticket (``_segment_ticket``), and the launches to make. On a GPU every
    segment of a row must be resident at once; the interpreter runs programs one after
    another, so there the segments publish in a first launch and finish in a second.

    ``released``: the kernel calls ``_segment_release`` (a count a row after the ticket), so
    it leaves the slots zeroed and they are the stream's reused buffer (``stream_buffer``)."""
    from aiter_lite.utils.checks import TRITON_INTERPRET

    n_segs = cdiv(n_cols, block_n)
    sms = device_profile(device).sms
    if not TRITON_INTERPRET and n_segs > sms:
        raise ValueError(f"{op}: rows of {n_cols} columns in {block_n}-wide segments need {n_segs} programs "
                         f"running at once, more than this GPU's {sms} SMs")
    if released:
        slots = stream_buffer(f"{op}_split", n_rows * n_segs + 1 + n_rows, torch.int64, device, zeroed=True)
    else:
        slots = torch.zeros(n_rows * n_segs + 1, dtype=torch.int64, device=device)
    return n_segs, slots, (1, 2) if TRITON_INTERPRET else (0,)
