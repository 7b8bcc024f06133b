"""Outputs that share memory: the checks every public op runs on the tensors it writes.

torch refuses an output whose elements overlap one another (``expand``, a zero stride)
and an output that partly overlaps an input; so does every aiter_lite op. A kernel writes
each output element once, from programs that run in any order: an output element that is
also another output's element, or an element some program still has to read, gets
whichever write or read comes last. The one sharing allowed is an exact alias that the op
declares (``public_op(aliases=...)``): an output that *is* one of its inputs (same memory,
shape, strides and dtype: ``out=input`` of the fused-add norms, ``q_out=q``), which each
program reads before it writes.

:func:`overlap` decides whether two tensors share an element from their sizes, strides
and byte offsets (no element is read): exactly where both are dense, or where one is
dense, or from both tensors' strides (views of one buffer, such as q and k of a fused qkv
projection); where it cannot tell within a few thousand steps (strides that do not nest,
two dims of one stride) it answers ``None`` and the tensors are let through, as torch
does with layouts it cannot check.
"""

from __future__ import annotations

import math

import torch

__all__ = ["overlap", "check_written"]

_SEARCH_LIMIT = 4096  # index combinations looked at before answering "cannot tell"


def _dims(t: torch.Tensor) -> list[tuple[int, int]]:
    """(size, stride in bytes) of every dim of more than one element, widest stride first."""
    item = t.element_size()
    return sorted(((n, abs(s) * item) for n, s in zip(t.shape, t.stride()) if n > 1), key=lambda d: -d[1])


def _span(t: torch.Tensor) -> tuple[int, int]:
    """The bytes [lo, hi) that ``t``'s elements lie in."""
    ptr, item = t.data_ptr(), t.element_size()
    if t.is_contiguous():
        return ptr, ptr + t.numel() * item
    below = above = 0
    for n, s in zip(t.shape, t.stride()):
        if s > 0:
            above += (n - 1) * s
        else:
            below += (n - 1) * s
    return ptr + below * item, ptr + (above + 1) * item


def _dense(t: torch.Tensor) -> bool:
    """Whether ``t``'s elements fill its span (no gaps, no repeats)."""
    expected = t.element_size()
    for n, s in reversed(_dims(t)):
        if s != expected:
            return False
        expected *= n
    return True


def _reach(dims: list[tuple[int, int, int]], lo: int, hi: int) -> bool | None:
    """Whether some sum of ``stride * e`` with ``e`` in [e_lo, e_hi] per dim lands in [lo, hi]
    (``dims``: (stride, e_lo, e_hi), widest stride first); None past the search limit."""
    dims = [d for d in dims if d[0]]  # a zero stride moves nothing
    budget = [_SEARCH_LIMIT]
    # the least and most the dims after i can add
    rest_lo = [0] * (len(dims) + 1)
    rest_hi = [0] * (len(dims) + 1)
    for i in range(len(dims) - 1, -1, -1):
        s, e_lo, e_hi = dims[i]
        rest_lo[i] = rest_lo[i + 1] + s * e_lo
        rest_hi[i] = rest_hi[i + 1] + s * e_hi

    def search(i: int, lo: int, hi: int) -> bool | None:
        if hi < rest_lo[i] or lo > rest_hi[i]:
            return False
        if i == len(dims):
            return True
        s, e_lo, e_hi = dims[i]
        first = max(e_lo, math.ceil((lo - rest_hi[i + 1]) / s))
        last = min(e_hi, (hi - rest_lo[i + 1]) // s)
        unknown = False
        for e in range(first, last + 1):
            budget[0] -= 1
            if budget[0] < 0:
                return None
            found = search(i + 1, lo - s * e, hi - s * e)
            if found:
                return True
            unknown |= found is None
        return None if unknown else False

    return search(0, lo, hi)


def overlap(a: torch.Tensor, b: torch.Tensor) -> bool | None:
    """Whether ``a`` and ``b`` share a byte of an element: True, False, or None (cannot tell:
    two strided tensors of different strides whose spans meet)."""
    if a.device != b.device or a.numel() == 0 or b.numel() == 0 or a.device.type == "meta":
        return False
    (a_lo, a_hi), (b_lo, b_hi) = _span(a), _span(b)
    if a_hi <= b_lo or b_hi <= a_lo:
        return False
    a_dense, b_dense = _dense(a), _dense(b)
    if a_dense and b_dense:
        return True
    if a_dense or b_dense:  # does an element of the strided one fall in the dense one's span?
        dense_lo, dense_hi, t = (a_lo, a_hi, b) if a_dense else (b_lo, b_hi, a)
        base = _span(t)[0]
        dims = [(s, 0, n - 1) for n, s in _dims(t)]
        return _reach(dims, dense_lo - base - t.element_size() + 1, dense_hi - 1 - base)
    # a's element at index i and b's at index j meet where (i - j) . strides lies within
    # the element sizes of the offset between them (a dim one of them lacks: size 1)
    na, nb = dict((s, n) for n, s in _dims(a) if s), dict((s, n) for n, s in _dims(b) if s)
    if len(na) != sum(1 for n, s in _dims(a) if s) or len(nb) != sum(1 for n, s in _dims(b) if s):
        return None  # two dims of one stride: a layout that repeats elements
    strides = sorted(set(na) | set(nb), reverse=True)
    dims = [(s, -(nb.get(s, 1) - 1), na.get(s, 1) - 1) for s in strides]
    d = b_lo - a_lo
    return _reach(dims, d - a.element_size() + 1, d + b.element_size() - 1)


def _same_view(a: torch.Tensor, b: torch.Tensor) -> bool:
    return (a.data_ptr() == b.data_ptr() and a.dtype == b.dtype and a.shape == b.shape
            and a.stride() == b.stride())


def check_written(op: str, tensors: list[tuple[str, torch.Tensor]], written: frozenset[str],
                  aliases: dict[str, tuple[str, ...]]) -> None:
    """A ``ValueError`` naming ``op`` and the arguments where a written tensor has
    elements that overlap each other, or overlaps another argument other than as an
    exact alias ``aliases`` allows (written name -> the inputs it may be).

    Every eager call runs this, so the common case is cheap: each tensor's byte span is
    computed once and the spans swept in address order; only pairs whose spans meet
    (views of one allocation, an alias) go to the exact :func:`overlap`."""
    spans = []
    for i, (name, t) in enumerate(tensors):
        if t.numel() == 0 or t.is_meta:
            continue
        if name in written and t.numel() > 1 and torch._debug_has_internal_overlap(t) == 1:
            raise ValueError(f"{op}: {name} has elements that share memory (shape {tuple(t.shape)}, strides "
                             f"{tuple(t.stride())}, e.g. from expand()); an output needs memory of its own "
                             f"for each element")
        spans.append((*_span(t), i))
    spans.sort()
    for k, (_, hi, i) in enumerate(spans):
        for lo2, _, j in spans[k + 1:]:
            if lo2 >= hi:
                break
            a, b = min(i, j), max(i, j)  # in argument order: the first written one is named
            (name, w), (other, t) = tensors[a], tensors[b]
            if name not in written:
                (name, w), (other, t) = (other, t), (name, w)
            if name not in written or not overlap(w, t):
                continue
            if (other in aliases.get(name, ()) or name in aliases.get(other, ())) and _same_view(w, t):
                continue
            allowed = " or ".join(aliases.get(name, ()))
            hint = f"; {name} may be {allowed} itself (same memory, shape, strides and dtype)" if allowed else ""
            raise ValueError(f"{op}: {name} overlaps {other} in memory ({name}: shape {tuple(w.shape)}, "
                             f"strides {tuple(w.stride())}; {other}: shape {tuple(t.shape)}, strides "
                             f"{tuple(t.stride())}); an output must not share memory with another argument"
                             f"{hint}")
