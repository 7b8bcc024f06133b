"""One argument changed at a time, for every registered op: the input contract, checked.

A valid call of each op comes from ``op_benchmarks.utils.op_args`` (what the registry
tests use); :func:`cases` changes one of its arguments at a time across the classes a
user gets wrong or meets at the edges (dtype, device, rank, shape, strides, an output
whose elements overlap or that overlaps another argument, NaN / inf / huge values,
indices out of range, None, bad scalars, zero and one rows). :func:`run` calls the
Triton op and classifies what happened:

* ``error``: a ``TypeError`` / ``ValueError`` naming the op and the changed argument;
* ``correct``: a result equal to the native reference's on the same arguments (NaN where
  it has NaN), every written tensor included;

and the failures: ``silent_wrong`` (a result that differs), ``leaked`` (any other
exception: Triton's, the interpreter's, an assert), ``wrong_name`` (a clear error that
names another op or argument), ``accepted`` (a result where the reference raised, or an
overlapping output let through), ``modified`` (a tensor the call may not write changed,
or any tensor changed by a call that raised).

A new op is covered by registering it (``public_op``) and giving ``op_args`` its valid
call: nothing here is written per op.
"""

from __future__ import annotations

import math
import os
import re
import typing
from dataclasses import dataclass, replace
from typing import Any, Callable, Iterator

import torch

from aiter_lite.library import OPS, _registered_signature
from aiter_lite.utils.registry import PUBLIC_OPS, flat_tensors
from op_benchmarks.utils.op_args import TINY, op_args
from op_tests.utils.checks import TOLERANCES

OUTCOMES = ("error", "correct", "silent_wrong", "leaked", "wrong_name", "accepted", "modified")
FAILURES = OUTCOMES[2:]
INDEX_DTYPES = (torch.int32, torch.int64)
_INDEX_SWITCHES = ("AITER_ROPE_CHECK_POSITIONS", "AITER_KV_CACHE_CHECK_SLOTS", "AITER_CROSS_ENTROPY_CHECK_TARGETS")
# op_args' tiny sizes with fewer rows and heads: every code path, a few programs a launch
# (the interpreter runs each program in Python)
DIMS = replace(TINY, tokens=3, heads=2, kv_heads=1, batch=1)


@dataclass
class Case:
    op: str
    kind: str            # the class of change, e.g. "dtype", "strided", "nan"
    arg: str             # the argument changed ("" for a whole-call change: zero rows)
    args: tuple
    must_raise: bool = False  # no result is right (an overlapping output, a meta tensor)


@dataclass
class Result:
    case: Case
    outcome: str
    detail: str = ""

    def __str__(self) -> str:
        return f"{self.case.op} [{self.case.kind} {self.case.arg}]: {self.outcome}: {self.detail}"


def params(name: str) -> list[tuple[str, Any]]:
    """(name, annotation) of the registered op's arguments, in op_args' order."""
    sig = _registered_signature(PUBLIC_OPS[name])
    return [(p.name, p.annotation) for p in sig.parameters.values()]


def _allows_none(hint) -> bool:
    return hint is None or type(None) in typing.get_args(hint)


def _fresh_like(t: torch.Tensor, shape=None) -> torch.Tensor:
    shape = tuple(t.shape) if shape is None else shape
    if t.dtype.is_floating_point and t.dtype.itemsize >= 2:
        return torch.randn(shape, device=t.device).to(t.dtype)
    if t.dtype in INDEX_DTYPES:
        return torch.randint(0, 2, shape, device=t.device, dtype=t.dtype)
    return torch.zeros(shape, device=t.device, dtype=t.dtype)


def _strided_copy(t: torch.Tensor, last: bool) -> torch.Tensor:
    """``t``'s values in memory with gaps: between rows (``last`` False) or between the
    elements of the last dim."""
    if last:
        buf = torch.empty(*t.shape[:-1], 2 * t.shape[-1], device=t.device, dtype=t.dtype)
        view = buf[..., ::2]
    else:
        buf = torch.empty(2 * t.shape[0], *t.shape[1:], device=t.device, dtype=t.dtype)
        view = buf[::2]
    view.copy_(t)
    return view


def _tensor_changes(name: str, t: torch.Tensor, written: bool, others: dict) -> Iterator[tuple[str, Any, bool]]:
    """(kind, new value, must_raise) for a tensor argument."""
    is_index = t.dtype in INDEX_DTYPES
    yield "dtype", (t.float() if is_index else t.to(torch.float64)), False
    yield "meta", t.to("meta"), True
    yield "rank+1", t.unsqueeze(0).clone(), False
    if t.dim() >= 1:
        yield "rank-1", t.reshape(-1)[:1].reshape(()).clone() if t.dim() == 1 else t[0].clone(), False
        yield "shape", _fresh_like(t, (*t.shape[:-1], t.shape[-1] + 1)), False
    if t.dim() >= 1 and t.shape[0] > 1:
        yield "strided rows", _strided_copy(t, last=False), False
    if t.dim() >= 1 and t.shape[-1] > 1:
        yield "strided last", _strided_copy(t, last=True), False
    if written and t.dim() >= 1 and t.shape[0] > 1:
        yield "expanded", torch.empty(1, *t.shape[1:], device=t.device, dtype=t.dtype).expand(t.shape), True
    if written:
        for other, o in others.items():
            if o is not t and o.dtype == t.dtype and o.numel() > t.numel() >= 2 and o.is_contiguous():
                # the output's memory starts one element into another argument's
                yield f"overlaps {other}", o.view(-1)[1:t.numel() + 1].view(t.shape), True
                break
    if not written and t.numel() and t.dtype.is_floating_point:
        for kind, value in (("nan", math.nan), ("inf", math.inf), ("-inf", -math.inf)):
            u = t.clone()
            u.view(-1)[t.numel() // 2] = value
            yield kind, u, False
        if t.dtype == torch.float32:
            yield "huge", t * 1e30, False
    if is_index and t.numel():
        for kind, value in (("index past the end", 10**6), ("index -7", -7)):
            u = t.clone()
            u.view(-1)[-1] = value
            yield kind, u, False
    yield "None", None, False


def _scalar_changes(value, hint) -> Iterator[tuple[str, Any]]:
    if isinstance(value, bool):
        yield "bool 2", 2
        yield "bool 'yes'", "yes"
    elif isinstance(value, int):
        yield "int -1", -1
        yield "int 0", 0
        yield "int 2^40", 2**40
        yield "int as float", float(value) + 0.5
        yield "int True", True
    elif isinstance(value, float):
        yield "nan", math.nan
        yield "inf", math.inf
        yield "negative", -abs(value) - 1.0
        yield "float as str", str(value)
    elif isinstance(value, str):
        yield "unknown choice", "bogus"
        yield "choice None", None
    elif isinstance(value, torch.dtype):
        yield "dtype float64", torch.float64
    elif value is None and not _allows_none(hint):
        yield "None given", None


def cases(name: str, device, dtype=torch.float32, qdtype=torch.int8) -> list[Case]:
    """Every one-argument change of op ``name``'s valid call, and its calls at zero and one rows."""
    base = op_args(name, DIMS, device, dtype, qdtype)
    ps = params(name)
    mutates = set(OPS[name].mutates)
    out = [Case(name, "valid", "", base)]
    for rows in (0, 1):
        out.append(Case(name, f"{rows} rows", "", op_args(name, replace(DIMS, tokens=rows), device, dtype, qdtype)))
    tensors = {p: a for (p, _), a in zip(ps, base) if isinstance(a, torch.Tensor)}
    for i, ((p, hint), a) in enumerate(zip(ps, base)):
        if isinstance(a, torch.Tensor):
            changes = _tensor_changes(p, a, p in mutates, tensors)
        else:
            changes = ((kind, v, False) for kind, v in _scalar_changes(a, hint))
        for kind, value, must_raise in changes:
            if kind == "None" and _allows_none(hint):
                kind = "None (optional)"
            args = (*base[:i], value, *base[i + 1:])
            out.append(Case(name, kind, p, args, must_raise))
    return out


# ---------------------------------------------------------------------------
# running a case


def _copy(args: tuple) -> tuple:
    return tuple(a.clone() if isinstance(a, torch.Tensor) and a.device.type != "meta" else a for a in args)


def _bits(t: torch.Tensor) -> torch.Tensor:
    return t.detach().contiguous().reshape(-1).view(torch.uint8).cpu() if t.numel() else t.detach().cpu()


def _tensors(result) -> list[torch.Tensor]:
    return flat_tensors(result)


def _close(got: torch.Tensor, want: torch.Tensor) -> str:
    """Where ``got`` differs from the reference's ``want`` (empty: equal within tolerance)."""
    if got.shape != want.shape or got.dtype != want.dtype:
        return f"{tuple(got.shape)} {got.dtype}, expected {tuple(want.shape)} {want.dtype}"
    if not got.numel():
        return ""
    a, e = got.detach().double().cpu(), want.detach().double().cpu()
    if got.dtype in (torch.int8, torch.uint8) or not (got.dtype.is_floating_point or got.dtype.is_complex):
        atol, rtol = (1.0, 0.0) if got.dtype == torch.int8 else (0.0, 0.0)  # int8: a rounding step
    elif got.dtype.itemsize == 1:
        atol, rtol = 1e-3, 0.13  # fp8: about one step of a 3-bit mantissa
    else:
        atol, rtol = TOLERANCES[got.dtype]
        atol, rtol = 20 * atol, 20 * rtol  # fp32 math in another order, over short reductions
    nan_a, nan_e = a.isnan(), e.isnan()
    if not torch.equal(nan_a, nan_e):
        return f"NaN at {int((nan_a ^ nan_e).sum())} elements where the reference {'has none' if nan_a.any() else 'has'}"
    same = nan_a | (a == e) | ((a - e).abs() <= atol + rtol * e.abs())
    if bool(same.all()):
        return ""
    err = torch.where(same, 0.0, (a - e).abs().nan_to_num(math.inf))
    where = tuple(int(i) for i in (err == err.max()).nonzero()[0])
    return f"{int((~same).sum())} of {a.numel()} differ; worst at {where}: {a[where].item():.6g} vs {e[where].item():.6g}"


def _names(message: str, word: str) -> bool:
    return re.search(rf"(?<![\w.]){re.escape(word)}(?!\w)", message) is not None


def run(case: Case, triton_fn: Callable | None = None, native_fn: Callable | None = None) -> Result:
    """Call op ``case.op`` on ``case.args`` and say what happened (see the module doc)."""
    spec = OPS[case.op]
    triton_fn = triton_fn or spec.triton
    native_fn = native_fn or spec.native
    names = [p for p, _ in params(case.op)]
    mutates = set(spec.mutates)
    args = case.args
    before = {i: _bits(a) for i, a in enumerate(args) if isinstance(a, torch.Tensor) and a.device.type != "meta"}
    reference_args = _copy(args)
    # GPU indices (positions, slots, cu_seqlens) are checked against their tables on the host
    # only under these switches (without them an index past a table gives NaN rows or a
    # skipped slot, as documented); any change may make one invalid (a shorter table)
    saved = {k: os.environ.get(k) for k in _INDEX_SWITCHES}
    os.environ.update(dict.fromkeys(_INDEX_SWITCHES, "1"))
    try:
        got = triton_fn(*args)
    except (TypeError, ValueError) as e:
        changed = [names[i] for i, b in before.items() if not torch.equal(_bits(args[i]), b)]
        if changed:
            return Result(case, "modified", f"raised {type(e).__name__} after writing {changed}: {e}")
        message = str(e)
        if not _names(message, case.op):
            return Result(case, "wrong_name", f"does not name {case.op}: {type(e).__name__}: {message}")
        if case.arg and not _names(message, case.arg):
            return Result(case, "wrong_name", f"does not name {case.arg}: {type(e).__name__}: {message}")
        return Result(case, "error", f"{type(e).__name__}: {message}")
    except Exception as e:  # noqa: BLE001 (the outcome is what is being classified)
        return Result(case, "leaked", f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"[:300])
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    changed = [names[i] for i, b in before.items() if names[i] not in mutates and not torch.equal(_bits(args[i]), b)]
    if changed:
        return Result(case, "modified", f"wrote {changed}, which it does not declare")
    if case.must_raise:
        return Result(case, "accepted", "returned a result for an argument no result is right for")
    # the reference runs on the CPU: torch's indexing of a bad index on a GPU asserts on the
    # device, which ends the process's CUDA context
    reference_args = tuple(a.cpu() if isinstance(a, torch.Tensor) else a for a in reference_args)
    try:
        want = native_fn(*reference_args)
    except Exception as e:  # noqa: BLE001
        return Result(case, "accepted", f"the reference raised {type(e).__name__}: {str(e)[:200]}")
    pairs = [(f"result {i}", g, w) for i, (g, w) in enumerate(zip(_tensors(got), _tensors(want)))]
    if len(_tensors(got)) != len(_tensors(want)):
        return Result(case, "silent_wrong", f"{len(_tensors(got))} tensors returned, the reference "
                                            f"{len(_tensors(want))}")
    pairs += [(names[i], a, reference_args[i]) for i, a in enumerate(args)
              if names[i] in mutates and isinstance(a, torch.Tensor)]
    for what, g, w in pairs:
        diff = _close(g, w)
        if diff:
            return Result(case, "silent_wrong", f"{what}: {diff}")
    return Result(case, "correct")


def fuzz(name: str, device, dtype=torch.float32, qdtype=torch.int8) -> list[Result]:
    torch.manual_seed(0)
    return [run(c) for c in cases(name, device, dtype, qdtype)]
