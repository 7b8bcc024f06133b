"""Top-k on the Triton backend (aiter's ``topk``): the k largest (or smallest) elements
along a dim, with their int64 indices.

``topk(x, k, dim=-1, largest=True, sorted=True)`` takes any rank (``dim`` any axis,
read in place through its strides: no copy unless the dims around ``dim`` cannot be
addressed as two row strides), rows of any stride, float32 / float16 / bfloat16, any
``0 <= k <= x.shape[dim]``. Values come back in x's dtype, bit for bit the selected
elements (``x.gather(dim, indices) == values``).

Order and ties, as torch.topk where torch is deterministic:

* sorted largest first (``largest=False``: smallest first);
* equal values: the lower index first, and the lower index is the one kept at the
  k-th place (torch leaves this unspecified); -0.0 and +0.0 are equal;
* NaN ranks above +inf: for ``largest=True`` NaNs come first, for ``largest=False``
  last (picked only when k leaves no other choice);
* ``sorted=False`` returns the same sorted order (any order is allowed).

Three paths, picked by :func:`topk_launch_config`:

* one pass: a row (several short rows) per program, in registers;
* filter, for longer rows: the row cut into segments, one program each, two
  launches. The first reduces every GROUP columns to their largest key; the k-th
  largest of those is a bound that at least k elements reach, so the top k are among
  the elements at or above it. The second gathers those candidates (a few more than k
  on most data), and each row's last program sorts them and writes k. When a bound
  lets through more candidates than it holds (many elements equal to it), that
  program finds the row's exact k-th key instead, one pass over the row per key bit:
  slow, and exact;
* sort: for k above 2048 on long rows, each row is sorted in global memory (a
  bitonic sort: sorted blocks, compare-exchange passes) and the first k written.

Work a row of n: one pass O(n log^2 n) compare-exchanges in registers (k <= 4: k max
reductions); filter O(n) reads (two) plus a bitonic top-k of 2k to 4k candidates,
O(k log^2 k); sort (k > 2048) O(n log^2 n) compare-exchanges over log2(n / 4096) merge
stages, each a mirror pass, its half-cleaner passes and a re-sort of the 4096-element
blocks, one launch a pass (H200 numbers: docs/perf_softmax_h200.md).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import torch

from aiter_lite.ops.triton._triton_kernels.topk import (
    _bitonic_pass_kernel,
    _topk_filter_kernel,
    _topk_kernel,
)
from aiter_lite.spec.device import INTERPRETER, DeviceProfile, device_profile
from aiter_lite.utils.checks import TRITON_INTERPRET, check_bool, check_float_tensor, check_int, check_triton_device
from aiter_lite.utils.fast_launch import launch
from aiter_lite.utils.launch import cdiv, grid_sms, next_power_of_2, stream_buffer
from aiter_lite.utils.launcher import launcher
from aiter_lite.utils.logger import debug_on, log_call
from aiter_lite.utils.registry import public_op

__all__ = ["TopkLaunchConfig", "topk", "topk_launch_config"]

MAX_ROW = 2**30  # columns are packed in 31 bits, with room for a last chunk's lanes


@dataclass(frozen=True)
class TopkLaunchConfig:
    BLOCK_M: int  # rows per program (one pass; the other paths take 1)
    BLOCK_N: int  # one pass: the whole row; filter: columns a chunk; sort: a sort block
    BLOCK_K: int  # next power of 2 >= k (SORT: BLOCK_N)
    SELECT: bool  # one pass: BLOCK_K rounds of max extraction instead of a bitonic top-k
    num_warps: int
    SORT: bool = False  # the row sorted in global memory in BLOCK_N-element blocks
    GROUP: int = 0  # filter: columns reduced to one maximum for the bound (0: not the filter path)
    CAP: int = 0  # filter: candidates a row keeps (a power of 2 >= 2 * BLOCK_K; unused for k = 1)
    SEGMENTS: int = 1  # filter: programs a row
    filter_warps: int = 4  # filter: warps of the second launch, whose last program sorts CAP candidates
    ONE_LAUNCH: bool = False  # filter: bound and filter in one launch, programs waiting for their row's bound


# * _SELECT_MAX_K: one pass keeps up to 4 by k rounds of an integer max, larger k by
#   Triton's bitonic top-k.
# * _ONE_PASS_MAX: rows up to 8192 columns in one program (16 keys a lane with 16 warps).
# * filter (longer rows, k <= 2048): 4096-column chunks, a chunk a program; about
#   4 * BLOCK_K group maxima a row (256 to 2048, and up to twice that: the bound's
#   search holds them all, a reduction per key bit); CAP = 2 to 4 * BLOCK_K candidates
#   (on an H200, randn rows of 128256: 55 candidates for k = 50, 1144-1257 for
#   k = 1024). Each candidate takes its place by its own atomic: a prefix sum over the
#   chunk (or over 512-column slices of it) held the second launch to 3 to 5 times the
#   first's time (H200, 256 x 128256: 132 us against 25 for k = 50); with the atomics
#   85 us, and 248 us against 354 for k = 1024. The bound at 8 warps (16: 72 us against
#   43 at 256 rows, k = 1024). The second launch sorts in its last program: 16 warps for
#   2048 candidates (1 x 128256, k = 1024: 25 us against 36 at 8 warps), 4 for 256.
#   Triton's top-k of 1024 of 2048 int64 keys takes about 20 us on an H200, 4096 keys
#   four times that.
# * _MAX_BLOCK_K: above 2048 kept, rows longer than one pass are sorted (_SORT_BLOCK
#   elements a block) instead.
# * _TILE: short rows several to a program, about 2048 elements, as normalization's tiles.
_SELECT_MAX_K = 4
_ONE_PASS_MAX = 8192
_CHUNK = 4096
_SUB = 512  # filter: columns at a time of the exact path
_MIN_GROUPS = 256
_MAX_GROUPS = 2048
_MAX_BLOCK_K = 2048
_SORT_BLOCK = 4096
_TILE = 2048
_ONE_LAUNCH_PROGRAMS = 2  # filter: one launch up to this many programs an SM
_PASS_BLOCK = 1024  # pairs per bitonic pass program
_MAX_WARPS = 16


def _warps(elements: int, profile: DeviceProfile) -> int:
    """16 keys a lane, 4 to 16 warps."""
    return profile.warps_for(elements, 16, hi=_MAX_WARPS)


@functools.lru_cache(maxsize=1024)
def topk_launch_config(n_rows: int, n_cols: int, k: int, profile: DeviceProfile = INTERPRETER) -> TopkLaunchConfig:
    """Launch config of a top-k of ``k`` over ``n_rows`` rows of ``n_cols``.

    Rows up to ``_ONE_PASS_MAX`` wide go in one pass, short ones several to a program,
    halved until the grid has two programs per SM. Longer rows take the filter path,
    or with more than ``_MAX_BLOCK_K`` kept are sorted.
    """
    block_k = next_power_of_2(k)
    select = block_k <= _SELECT_MAX_K
    row = next_power_of_2(n_cols)
    want = 2 * grid_sms(profile, 1)  # the interpreter runs programs one after another
    if row <= _ONE_PASS_MAX:
        block_m = min(max(_TILE // row, 1), next_power_of_2(n_rows))
        while block_m > 1 and cdiv(n_rows, block_m) < want:
            block_m //= 2
        return TopkLaunchConfig(block_m, row, block_k, select, _warps(block_m * row, profile))
    if block_k > _MAX_BLOCK_K:
        return TopkLaunchConfig(1, _SORT_BLOCK, _SORT_BLOCK, False, _warps(_SORT_BLOCK, profile), SORT=True)
    target = min(max(4 * block_k, _MIN_GROUPS), _MAX_GROUPS)
    group = 1 << ((n_cols // target).bit_length() - 1)  # target to 2 * target groups
    chunk = max(_CHUNK, group)
    cap = max(2 * block_k, min(4 * block_k, 1024), 64)
    segments = cdiv(n_cols, chunk)
    # 8 warps measured on the H200 and built without spills for AMD; ptxas for sm_80,
    # sm_100 and sm_120 holds an 8-warp filter program to 64-80 registers and spills
    # 8-16 B, where 4 warps build in 127-162 without (scripts/check_targets.py)
    warps = 8 if profile.backend == "hip" or profile.arch == "sm_90" else 4
    return TopkLaunchConfig(1, chunk, block_k, False, warps, GROUP=group, CAP=cap, SEGMENTS=segments,
                            filter_warps=16 if cap >= 2048 else 8 if cap >= 512 else 4,
                            ONE_LAUNCH=n_rows * segments <= _ONE_LAUNCH_PROGRAMS * want // 2)


# ---------------------------------------------------------------------------
# launches


def _flat_stride(shape, stride) -> int | None:
    """The one stride that addresses these dims flattened in row-major order, or None."""
    flat, expected = 0, None
    for size, st in zip(reversed(shape), reversed(stride)):
        if size == 1:
            continue
        if expected is not None and st != expected:
            return None
        if expected is None:
            flat = st
        expected = st * size
    return flat


def _row_strides(t: torch.Tensor, dim: int) -> tuple[int, int, int] | None:
    """Strides of ``t`` as (dims before ``dim``, dims after, ``dim``): rows are
    (row // inner, row % inner); None where a group of dims has no single stride."""
    if dim == t.dim() - 1 and t.is_contiguous():
        return t.shape[dim], 0, 1
    shape, stride = t.shape, t.stride()
    before, after = _flat_stride(shape[:dim], stride[:dim]), _flat_stride(shape[dim + 1:], stride[dim + 1:])
    if before is None or after is None:
        return None
    return before, after, stride[dim]


def _check_config(cfg: TopkLaunchConfig, n: int, k: int) -> None:
    """A pinned config must fit: powers of 2, k within what each path keeps; a bitonic
    top-k keeps at least 2 (tl.topk of 1 does not build on Triton 3.6)."""
    filter_sizes = ((cfg.GROUP,) + ((cfg.CAP,) if k > 1 else ())) if cfg.GROUP else ()
    ok = all(v > 0 and v & (v - 1) == 0 for v in (cfg.BLOCK_M, cfg.BLOCK_N, cfg.BLOCK_K) + filter_sizes)
    if cfg.SORT:  # (the sorted row holds every k)
        ok = ok and cfg.BLOCK_K == cfg.BLOCK_N and not cfg.SELECT
    elif cfg.GROUP:
        ok = ok and k <= cfg.BLOCK_K and cfg.GROUP <= cfg.BLOCK_N and cdiv(n, cfg.GROUP) >= k
        ok = ok and cfg.BLOCK_M == 1 and cfg.SEGMENTS >= 1
        ok = ok and (k == 1 or (cfg.BLOCK_K >= 2 and cfg.CAP >= 2 * cfg.BLOCK_K))
    else:
        ok = ok and k <= cfg.BLOCK_K and next_power_of_2(n) <= cfg.BLOCK_N and (cfg.SELECT or cfg.BLOCK_K >= 2)
    if not ok:
        raise ValueError(f"topk: config {cfg} does not fit a row of {n} with k = {k}")


def topk_rows(x: torch.Tensor, x_strides: tuple, n: int, values: torch.Tensor, indices: torch.Tensor,
              out_strides: tuple, n_rows: int, inner: int, k: int, largest: bool,
              config: TopkLaunchConfig | None = None) -> None:
    """Top-k of ``n_rows`` rows of ``n`` elements of ``x``: row r's element j at
    (r // inner) * s0 + (r % inner) * s1 + j * s2 for ``x_strides`` (s0, s1, s2), its
    results at ``out_strides`` in ``values`` and ``indices``; ``config`` pins a launch
    (tests, tuning)."""
    cfg = config or topk_launch_config(n_rows, n, k, device_profile(x.device))
    if config is not None:
        _check_config(cfg, n, k)
    # Offsets of every lane, the masked lanes of a last chunk included.
    span = next_power_of_2(n) + cfg.BLOCK_N
    int64 = span * max(x_strides[2], out_strides[2]) >= 2**31
    key32 = x.element_size() == 2 and cfg.BLOCK_N <= 32768

    def select(cand_in, cand_out, n_in, block_m, block_n, block_k, mode, warps, *, from_x, final, n_chunks=None):
        n_chunks = n_chunks or cdiv(n_in, block_n)
        launch(
            _topk_kernel, (cdiv(n_rows, block_m) * n_chunks,),
            x, cand_in, cand_out, values, indices, *x_strides, *out_strides,
            0 if cand_in is None else cand_in.stride(0), 0 if cand_out is None else cand_out.stride(0),
            n_rows, inner, n_in, n_chunks, k, FROM_X=from_x, FINAL=final, LARGEST=largest, KEY32=key32 and from_x,
            MODE=mode, INT64=int64, BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_K=block_k, num_warps=warps,
        )

    if cfg.SORT:
        _sort_rows(select, x.device, n_rows, n, k, cfg)
    elif cfg.GROUP:
        _filter_rows(x, x_strides, n, values, indices, out_strides, n_rows, inner, k, largest, int64, cfg)
    else:
        select(None, None, n, cfg.BLOCK_M, cfg.BLOCK_N, cfg.BLOCK_K, 0 if cfg.SELECT else 1, cfg.num_warps,
               from_x=True, final=True)


@functools.lru_cache(maxsize=1024)
def _filter_plan(n_rows: int, n: int, k: int, key_bits: int, largest: bool, int64: bool, cfg: TopkLaunchConfig,
                 sms: int) -> tuple:
    """What a filter-path call launches, by the call's shape: the scratch width, the
    runtime sizes after n, the grid and each launch's meta-parameters and warps."""
    chunk = cfg.BLOCK_N
    n_chunks = cdiv(n, chunk)
    per_seg = cdiv(n_chunks, cfg.SEGMENTS)
    segs = cdiv(n_chunks, per_seg)
    n_groups = n_chunks * (chunk // cfg.GROUP)
    first = k == 1
    meta = dict(LARGEST=largest, KEY_BITS=key_bits, INT64=int64, FIRST=first, BLOCK_N=chunk, GROUP=cfg.GROUP,
                BLOCK_G=next_power_of_2(n_groups), BLOCK_K=cfg.BLOCK_K, CAP=max(cfg.CAP, 1), SUB=min(_SUB, chunk))
    if not first and cfg.ONE_LAUNCH and not TRITON_INTERPRET and segs <= sms:
        phases = ((0, max(cfg.num_warps, cfg.filter_warps)),)
    else:
        phases = ((1, cfg.num_warps),) + (() if first else ((2, cfg.filter_warps),))
    launches = tuple((dict(meta, PHASE=phase, num_warps=warps)) for phase, warps in phases)
    return n_groups + (0 if first else cfg.CAP), (n_chunks, per_seg, segs, k), (n_rows * segs,), launches


def _filter_rows(x, x_strides, n, values, indices, out_strides, n_rows, inner, k, largest, int64, cfg) -> None:
    """The filter path over ``cfg.SEGMENTS`` programs a row: the bound, then (k > 1) the
    filter, in one launch where ``cfg.ONE_LAUNCH`` (a GPU: the interpreter runs programs
    one after another, none could wait) and a row's segments fit the GPU at once."""
    width, sizes, grid, launches = _filter_plan(n_rows, n, k, 8 * x.element_size(), largest, int64, cfg,
                                                grid_sms(device_profile(x.device), 1))
    # the kernel leaves its work words zeroed (module doc): both buffers are the stream's own
    work = stream_buffer("topk_work", 4 * n_rows + 1, torch.int32, x.device, zeroed=True)
    scratch = stream_buffer("topk_scratch", n_rows * width, torch.int64, x.device, zeroed=False)
    for meta in launches:
        launch(_topk_filter_kernel, grid, x, work, scratch, values, indices, *x_strides, *out_strides, width, n_rows,
               inner, n, *sizes, **meta)


def _sort_rows(select, device, n_rows: int, n: int, k: int, cfg: TopkLaunchConfig) -> None:
    """Sort every row's packed keys, largest first, in an (n_rows, 2^m) buffer; write the first k.

    Blocks of C = BLOCK_N keys are sorted in registers; then for each merged length
    S = 2C, 4C, ..: a mirror pass (two sorted halves of S into two bitonic ones, every
    key of the first above every key of the second), half-cleaner passes at distances
    S / 4 .. C, and the C-blocks sorted in registers again (a bitonic block sorts
    to the same keys as the remaining half-cleaners would)."""
    c, block_m = cfg.BLOCK_N, cfg.BLOCK_M
    length = max(next_power_of_2(n), c)
    keys = torch.empty((n_rows, length), dtype=torch.int64, device=device)
    select(None, keys, n, block_m, c, c, 1, cfg.num_warps, from_x=True, final=False, n_chunks=length // c)
    pass_block = min(_PASS_BLOCK, length // 2)
    grid = (n_rows * (length // (2 * pass_block)),)
    log_c = c.bit_length() - 1
    for log_span in range(log_c + 1, length.bit_length()):
        launch(_bitonic_pass_kernel, grid, keys, keys.stride(0), length, log_span, 0, MIRROR=True, BLOCK=pass_block,
               num_warps=4)
        for log_dist in range(log_span - 2, log_c - 1, -1):
            launch(_bitonic_pass_kernel, grid, keys, keys.stride(0), length, 0, log_dist, MIRROR=False,
                   BLOCK=pass_block, num_warps=4)
        select(keys, keys, length, block_m, c, c, 1, cfg.num_warps, from_x=False, final=False)
    select(keys, None, k, block_m, c, c, 2, cfg.num_warps, from_x=False, final=True)


@launcher(mutates=("values", "indices"))
def _launch_topk(x: torch.Tensor, values: torch.Tensor, indices: torch.Tensor, k: int, dim: int, largest: bool,
                 config: TopkLaunchConfig | None = None) -> None:
    """The top k of x along ``dim`` into values and indices (x's rank, ``dim`` of size k)."""
    n, inner = x.shape[dim], math.prod(x.shape[dim + 1:])
    x_strides = _row_strides(x, dim)
    if x_strides is None:  # the dims around `dim` need more than two strides: gathered (a copy)
        x = x.movedim(dim, -1).contiguous()
        x_strides = (inner * n, n, 1)
    topk_rows(x, x_strides, n, values, indices, _row_strides(values, dim), values.numel() // k, inner, k, largest,
              config)


# ---------------------------------------------------------------------------
# the public op


def _new_out(shape, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    return torch.empty(shape, dtype=dtype, device=device)


@public_op(no_grad="no backward yet")
def topk(x: torch.Tensor, k: int, dim: int = -1, largest: bool = True, sorted: bool = True, *,
         tiny_row_thresh: int | None = None,
         config: TopkLaunchConfig | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """The ``k`` largest (``largest=False``: smallest) elements of ``x`` along ``dim``:
    ``(values, indices)`` as torch.topk's named tuple, values in x's dtype, indices
    int64, both of x's shape with ``dim`` of size k. Sorted, ties to the lower index,
    NaN above +inf (module doc).

    ``tiny_row_thresh``: aiter's choice between its one- and two-stage kernels, taken for
    aiter's callers (an int >= 0, or None) and not needed: the launch config
    (:func:`topk_launch_config`) picks the regime by row length and k. ``config`` pins a
    launch (tests, tuning)."""
    check_float_tensor("topk", "x", x)
    if tiny_row_thresh is not None:
        check_int("topk", "tiny_row_thresh", tiny_row_thresh, 0)
    k = check_int("topk", "k", k)
    rank = max(x.dim(), 1)
    dim = check_int("topk", "dim", dim, -rank, rank - 1, f"for x of shape {tuple(x.shape)}") % rank
    largest = check_bool("topk", "largest", largest)
    sorted = check_bool("topk", "sorted", sorted)
    n = x.shape[dim] if x.dim() else 1
    if not 0 <= k <= n:
        raise ValueError(f"topk: k must be in [0, {n}] (x.shape[dim] for dim={dim} and x of shape "
                         f"{tuple(x.shape)}), got {k}")
    if n > MAX_ROW:
        raise ValueError(f"topk: x.shape[{dim}] must be at most {MAX_ROW}, got {n}")
    check_triton_device("topk", "x", x)
    if debug_on():
        log_call("topk", x=x, k=k, dim=dim, largest=largest, sorted=sorted)
    if x.dim() == 0:  # as torch: a 0-dim x (k = 0 or 1) gives 0-dim outputs holding its element
        values, indices = topk(x.reshape(1), 1, 0, largest, sorted, config=config)
        return torch.return_types.topk((values.reshape(()), indices.reshape(())))
    shape = (*x.shape[:dim], k, *x.shape[dim + 1:])
    values, indices = _new_out(shape, x.dtype, x.device), _new_out(shape, torch.int64, x.device)
    if values.numel():
        _launch_topk(x, values, indices, k, dim, largest, config)
    return torch.return_types.topk((values, indices))
