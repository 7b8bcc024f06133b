"""Eager launches with the host work of a repeated call done once, only where that is sound.

An op's wrapper checks its arguments, picks a launch config, makes 2-D views and
launches through Triton's ``kernel[grid](...)``, which binds and specializes every
argument and formats a cache key on each call: 40-60 us on a slow host for a kernel
of 2-5 us at decode sizes. A serving loop calls each op with the same shapes step
after step, so :func:`planned` keeps, per op, the launches a call made, under a key of
what all that host work depends on (each tensor's shape, strides, dtype, device and
16-byte alignment, which inputs share an allocation and at what offsets; every other
argument's value; the current device and stream): each compiled kernel, its grid and every argument but
the call's tensors. A later call with the same key launches them directly, in order, as
torch.compile's generated code does, allocating the outputs an allocating op returns.

    @planned
    def static_per_tensor_quant_fp8_i8(qx, x_in, scale_in):
        ...checks, config, views, launch(kernel, grid, *args, **meta); return qx

Why a plan gives the checked path's answer, checked rather than assumed:

* a plan repeats exactly what it can see: allocations and launches. The recorded
  call runs under a dispatch mode (:class:`_Watch`) that sees every aten op the checked
  path runs; any op besides an allocation or a view (a copy, a fill, a computation, a
  read of a tensor's value on the host: ``.item()``, ``int(t)``, ``bool(t)``, a copy to
  the CPU; an op whose output shape depends on values) makes the key unplannable, for
  good. A tensor argument on the CPU (values a GPU kernel cannot read, so the wrapper
  reads them: ``.tolist()`` of a CPU tensor reaches no dispatcher) has no key;
* every launch argument that is a tensor must be one of the call's tensors (or a view
  inside one), a tensor it returns, a work buffer it allocated (each replay allocates its
  own), or a buffer declared persistent (:func:`keep`, ``utils.launch.stream_buffer``);
* a signature is recorded the third time it is seen: a call whose first tensor's shape
  (with its argument count and keywords) is new costs the checked path and a set lookup
  (serving sees a new prefill length on most prefills: that is the common new signature);
  the second sighting pays the key as well; the third is recorded, under the watch;
* ``op_tests/integration/test_plans.py`` replays every registered op's plan with fresh
  argument values of the same key and compares it with the checked path, bit for bit.

Nothing is cached under Triton's interpreter, while torch.compile traces, during
CUDA-graph capture, while autograd records (a tensor requiring grad), with DEBUG
logging or launch hooks (profilers) on, inside :func:`plans_off` (this thread), or
with ``AITER_FAST_LAUNCH=0``. A plan calls the compiled kernel's launcher with the
calling convention of Triton's own ``CompiledKernel[grid]`` runner; where the installed
Triton's runner does not have it, plans are off.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import logging
import re
import threading
from typing import Callable

import torch
from triton.tools.tensor_descriptor import TensorDescriptor
from torch.utils._python_dispatch import TorchDispatchMode

from aiter_lite import envs
from aiter_lite.utils.checks import TRITON_INTERPRET
from aiter_lite.utils.logger import debug_on

try:
    from triton import knobs as _knobs

    _hooks = _knobs.runtime
except ImportError:  # Triton before knobs: its hooks live on CompiledKernel
    from triton.compiler import CompiledKernel as _hooks

__all__ = ["planned", "launch", "keep", "unwatched", "record", "plans_off", "plan_count", "fast_launch_enabled",
           "reset"]

_MAX_PLANS = 4096
RECORD_AT = 3  # the sighting of a signature that records its plan (tests call an op this often first)
# A CPU tensor given to a GPU op holds values the wrapper reads on the host (positions to
# check, an image size): no key. (The recording logic's own tests run on CPU tensors.)
_CPU_IS_HOST = True
_state = threading.local()
_enabled: bool | None = None
_all_plans: list[Plans] = []
_log = logging.getLogger("aiter_lite")


@functools.lru_cache(maxsize=1)
def _launcher_convention() -> bool:
    """Whether Triton's ``CompiledKernel[grid]`` runner calls ``run(g0, g1, g2, stream, function,
    packed_metadata, launch_metadata, enter_hook, exit_hook, *args)``, the call a plan makes."""
    from triton.compiler.compiler import CompiledKernel

    try:
        source = re.sub(r"\s+", "", inspect.getsource(CompiledKernel.__getitem__))
    except (OSError, TypeError):
        return False
    return "self.run(grid[0],grid[1],grid[2],stream,self.function,self.packed_metadata,launch_metadata," in source


def fast_launch_enabled() -> bool:
    """Whether plans are kept: a GPU, not the interpreter, AITER_FAST_LAUNCH not 0, and a
    Triton whose launcher convention plans know."""
    global _enabled
    if _enabled is None:
        wanted = envs.fast_launch()  # read first: a bad value raises whether or not plans could run
        _enabled = wanted and not TRITON_INTERPRET and torch.cuda.is_available()
        if _enabled and not _launcher_convention():
            _log.warning("aiter_lite: launch plans off: this Triton's CompiledKernel launcher takes other arguments")
            _enabled = False
    return _enabled


def plan_count() -> int:
    """Plans held, over every op."""
    return sum(callable(plan) for plans in _all_plans for plan in plans.entries.values())


def reset() -> None:
    """Forget every plan and every key seen, and re-read AITER_FAST_LAUNCH and
    AITER_INT8_ROUNDING (tests, benchmarks)."""
    global _enabled
    for plans in _all_plans:
        plans.entries.clear()
        plans.shapes.clear()
    _enabled = None
    envs.int8_truncates.cache_clear()


@contextlib.contextmanager
def _counted(flag: str):
    """``flag`` of this thread raised inside (nesting counts)."""
    setattr(_state, flag, getattr(_state, flag, 0) + 1)
    try:
        yield
    finally:
        setattr(_state, flag, getattr(_state, flag) - 1)


def plans_off():
    """No plan used or made inside, in this thread: every call takes the checked path
    (tests and benchmarks compare the two)."""
    return _counted("off")


def _active() -> bool:
    """Whether plans are used or made now: not while torch.compile traces, with plans off (in
    this thread or for good), or inside another op's recording."""
    return not (torch.compiler.is_compiling() or not (_enabled if _enabled is not None else fast_launch_enabled())
                or getattr(_state, "off", 0) or getattr(_state, "recording", None) is not None)


def _quiet() -> bool:
    """No plan use now: capturing, logging calls, or hooks watching launches."""
    return (torch.cuda.is_current_stream_capturing() or debug_on() or _hooked(_hooks.launch_enter_hook)
            or _hooked(_hooks.launch_exit_hook))


def _hooked(hook) -> bool:
    """A launch hook set: a function, or a HookChain (Triton's knobs) with calls in it."""
    return bool(getattr(hook, "calls", hook))


_current = None  # Triton's driver's (get_current_device, get_current_stream), bound on first use


def _device_stream() -> tuple[int, int]:
    """The current device and its current stream, as Triton's own launcher reads them."""
    global _current
    if _current is None:
        from triton.runtime import driver

        _current = driver.active.get_current_device, driver.active.get_current_stream
    device = _current[0]()
    return device, _current[1](device)


def _key(args: tuple, names: tuple = ()) -> tuple | None:
    """What the checked path's work depends on; None where autograd records the call or a
    tensor is on the CPU. ``names``: the keywords the last arguments were passed by. A
    non-empty tensor's entry ends with the position of the first input in the same
    allocation and its byte offset from that input (its own position and 0 when none; empty
    tensors share no memory), so calls share a plan only where their tensors overlap alike:
    the checked path refuses outputs that overlap other arguments, and a plan must not let a
    new overlap through."""
    key = [*_device_stream(), names]
    storages: dict = {}
    grad = torch.is_grad_enabled()
    for i, a in enumerate(args):
        if isinstance(a, torch.Tensor):
            if (grad and a.requires_grad) or (_CPU_IS_HOST and a.is_cpu):
                return None
            ptr = a.data_ptr()
            if a.numel():
                j, base = storages.setdefault(ptr - a.storage_offset() * a.element_size(), (i, ptr))
                key += (a.shape, a.stride(), a.dtype, a.get_device(), ptr & 15, j, ptr - base)
            else:
                key += (a.shape, a.stride(), a.dtype, a.get_device(), ptr & 15, i)
        elif a.__class__ is list and all(isinstance(v, (bool, int, float)) for v in a):
            key += (list, tuple(a))  # vLLM's group sizes: a list of numbers stands for its values
        else:
            key += (a.__class__, a)
    return tuple(key)


def _replay(launches: list, allocs: tuple, scratch: tuple, result):
    """A recorded call as a function of (the call's inputs, the stream): it allocates the
    new outputs and the call's work buffers, launches each recorded ``compiled`` kernel
    directly, in order, with every argument but the call's tensors fixed, and returns what
    the call returned. Generated straight-line code, as torch.compile's wrappers are: at
    decode sizes the replay's own host time is the op's.

    ``launches``: (compiled, grid, template, subs), ``subs`` (argument position, source,
    index) with source 0 for the call's inputs, 1 for its new outputs, allocated as
    ``allocs`` (size, stride, dtype, device) describe them, 2 for a pointer into an input
    (index: the input and the byte offset, an int launch argument), 3 for a pointer into a
    work buffer (index: the buffer in ``scratch`` and the byte offset); ``result``: what
    the call returns, in the same terms (see ``_Recording._result_spec``)."""
    ns = {"empty_strided": torch.empty_strided}

    def bind(prefix: str, value) -> str:
        name = f"{prefix}{len(ns)}"
        ns[name] = value
        return name

    lines = ["def replay(inputs, stream):"]
    for k, (size, stride, dtype, device) in enumerate(allocs):
        lines.append(f"    out{k} = empty_strided({bind('size', size)}, {bind('stride', stride)}, "
                     f"dtype={bind('dtype', dtype)}, device={bind('device', device)})")
    for k, (size, stride, dtype, device) in enumerate(scratch):
        lines.append(f"    buf{k} = empty_strided({bind('size', size)}, {bind('stride', stride)}, "
                     f"dtype={bind('dtype', dtype)}, device={bind('device', device)})")
        lines.append(f"    scr{k} = buf{k}.data_ptr()")  # buf{k} held until the launches are queued
    for compiled, grid, template, subs in launches:
        call_tensors = {pos: f"out{i}" if source == 1 else f"inputs[{i}]" if source == 0 else
                        f"inputs[{i[0]}].data_ptr() + {int(i[1])}" if source == 2 else f"scr{i[0]} + {int(i[1])}"
                        for pos, source, i in subs}
        names = [call_tensors[pos] if pos in call_tensors else bind("arg", a) for pos, a in enumerate(template)]
        g0, g1, g2 = (*grid, 1, 1)[:3]
        lines.append(f"    {bind('run', compiled.run)}({int(g0)}, {int(g1)}, {int(g2)}, stream, "
                     f"{bind('function', compiled.function)}, {bind('packed', compiled.packed_metadata)}, None, None, "
                     f"None, {', '.join(names)})")

    def expr(spec) -> str:
        kind, value = spec
        if kind == "in":
            return f"inputs[{value}]"
        if kind == "out":
            return f"out{value}"
        if kind == "tuple":
            cls, items = value
            items = "(" + "".join(f"{expr(item)}, " for item in items) + ")"
            if cls is tuple:
                return items
            return f"{bind('cls', cls)}._make({items})" if hasattr(cls, "_make") else f"{bind('cls', cls)}({items})"
        return bind("const", value)

    lines.append(f"    return {expr(result)}")
    exec("\n".join(lines), ns)  # noqa: S102 (code built above from the recorded launch)
    return ns["replay"]


def _constexpr_values(kernel, n_args: int, meta: dict) -> list | None:
    """The values of the parameters after the ``n_args`` positional ones, in signature
    order (Triton's launcher takes every parameter, skipping the constexprs' slots), or
    None where one of them is a runtime parameter or has no value."""
    values = []
    for param in kernel.params[n_args:]:
        if not param.is_constexpr:
            return None
        if param.name in meta:
            values.append(meta[param.name])
        else:
            default = kernel.signature.parameters[param.name].default
            if default is inspect.Parameter.empty:
                return None
            values.append(default)
    return values


class _Lasting(Exception):
    """No call with the recorded call's key can be replayed from a plan."""


def _extent(t: torch.Tensor) -> int:
    """Bytes from ``t``'s first element to past its last (non-negative strides)."""
    return (sum((n - 1) * st for n, st in zip(t.shape, t.stride())) + 1) * t.element_size()


def _inside(a: torch.Tensor, inputs: tuple) -> tuple[int, int]:
    """(i, byte offset) of the first input whose elements' span holds all of launch argument
    ``a``'s: a view the checked path made of input i (its halves, a column offset), which the
    key's shapes, strides and values place at the same offset on every call with the key; or
    _Lasting (a buffer of the call's own, not returned, is not to be reused)."""
    ptr = a.data_ptr()
    if a.numel():
        for i, t in enumerate(inputs):
            if isinstance(t, torch.Tensor) and t.numel():
                start = t.data_ptr()
                if start <= ptr and ptr + _extent(a) <= start + _extent(t):
                    return i, ptr - start
    raise _Lasting


# What a plan repeats besides its launch: allocations of uninitialized memory. Views cost
# nothing to repeat (a launch reads their pointers and strides, which the key fixes).
_ALLOCATIONS = frozenset(
    op for op in (getattr(torch.ops.aten.empty, "memory_format", None), torch.ops.aten.empty_strided.default,
                  torch.ops.aten.empty_like.default, torch.ops.aten.new_empty.default,
                  torch.ops.aten.new_empty_strided.default) if op is not None)


class _Watch(TorchDispatchMode):
    """Sees every aten op a recorded call runs; an op a plan would not repeat (anything but
    an allocation or a view) refuses the call's key. Ops inside :func:`unwatched` (buffers
    made once and kept) pass."""

    def __init__(self, rec: _Recording):
        super().__init__()
        self.rec = rec

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if not (func in _ALLOCATIONS or func.is_view or getattr(_state, "unwatched", 0)):
            self.rec.refused = self.rec.refused or str(func)
        out = func(*args, **(kwargs or {}))
        if func in _ALLOCATIONS and isinstance(out, torch.Tensor) and out.numel():
            self.rec.scratch.append((out.data_ptr(), _extent(out), tuple(out.shape), out.stride(), out.dtype,
                                     out.device))
        return out


def unwatched():
    """Torch work inside is not the recorded call's (a persistent buffer made or grown once,
    see ``utils.launch.stream_buffer``): it does not refuse the plan."""
    return _counted("unwatched")


class _Recording:
    __slots__ = ("launches", "persistent", "result", "refused", "scratch")

    def __init__(self):
        self.launches = []
        self.persistent = set()
        self.result = None
        self.refused = ""  # what made the key unplannable: an aten op's name
        self.scratch = []  # the call's allocations: (pointer, bytes, size, stride, dtype, device)

    def plan(self, inputs: tuple) -> Callable | None:
        """The plan of the recorded call; None where calls with its key never have one."""
        try:
            return self._plan(inputs)
        except _Lasting:
            return None

    def _plan(self, inputs: tuple) -> Callable:
        if not self.launches or self.refused:
            raise _Lasting
        # Inputs on one pointer (aliased, as the key records) stand for each other: any of them
        # gives the kernel the same address. A returned input is matched by identity first.
        by_ptr, by_id = {}, {}
        for i, t in enumerate(inputs):
            if isinstance(t, torch.Tensor):
                by_id.setdefault(id(t), i)
                if t.numel():
                    by_ptr.setdefault(t.data_ptr(), i)
        allocs, out_ptr = [], {}
        result = self._result_spec(self.result, inputs, by_id, by_ptr, allocs, out_ptr)
        scratch, launches = [], []
        for compiled, kernel, grid, args, meta in self.launches:
            tail = _constexpr_values(kernel, len(args), meta)
            if compiled is None or tail is None or not all(isinstance(g, int) for g in grid):
                raise _Lasting
            template, subs = list(args) + tail, []
            for pos, a in enumerate(args):
                if isinstance(a, TensorDescriptor):
                    raise _Lasting  # it holds the recorded call's tensor: a replay would read and write that one
                if isinstance(a, torch.Tensor):
                    ptr = a.data_ptr()
                    if ptr in by_ptr:
                        subs.append((pos, 0, by_ptr[ptr]))
                    elif ptr in out_ptr:
                        subs.append((pos, 1, out_ptr[ptr]))
                    elif ptr in self.persistent:
                        continue
                    elif (own := self._own(a, scratch, out_ptr)) is not None:  # the call's work buffer
                        subs.append((pos, 3, own))
                    else:  # a view inside an input (its second half, a column offset): that input's pointer + bytes
                        subs.append((pos, 2, _inside(a, inputs)))
                    template[pos] = None
            launches.append((compiled, grid, template, tuple(subs)))
        return _replay(launches, tuple(allocs), tuple(spec for _, spec in scratch), result)

    def _own(self, a: torch.Tensor, scratch: list, out_ptr: dict) -> tuple[int, int] | None:
        """(k, byte offset): ``a`` lies inside an allocation the call made and does not return
        (its k-th work buffer, allocated anew by each replay, as the checked path does); else
        None. Inside a returned one (a part of an output): no plan."""
        ptr, end = a.data_ptr(), a.data_ptr() + (_extent(a) if a.numel() else 0)
        for base, nbytes, *spec in self.scratch:
            if base <= ptr and end <= base + nbytes:
                if base in out_ptr:
                    raise _Lasting
                bases = [b for b, _ in scratch]
                if base not in bases:
                    scratch.append((base, tuple(spec)))
                    bases.append(base)
                return bases.index(base), ptr - base
        return None

    @staticmethod
    def _result_spec(value, inputs: tuple, by_id: dict, by_ptr: dict, allocs: list, out_ptr: dict):
        """The returned value in terms of the call's inputs ("in", i), new outputs ("out", k),
        constants and tuples of those."""
        if isinstance(value, tuple):  # a tuple, or a named one (torch.return_types.topk)
            return "tuple", (type(value), tuple(_Recording._result_spec(v, inputs, by_id, by_ptr, allocs, out_ptr)
                                                for v in value))
        if not isinstance(value, torch.Tensor):
            if value is not None and not isinstance(value, (bool, int, float, str)):
                raise _Lasting
            return "const", value
        if id(value) in by_id:
            return "in", by_id[id(value)]
        if not value.numel() or value.storage_offset():
            raise _Lasting
        ptr = value.data_ptr()
        if ptr in by_ptr:  # an input's alias: handed back as that input where it looks the same
            i = by_ptr[ptr]
            if (value.shape, value.stride(), value.dtype) != (inputs[i].shape, inputs[i].stride(), inputs[i].dtype):
                raise _Lasting
            return "in", i
        if ptr in out_ptr:
            raise _Lasting  # two outputs on one allocation
        if value.untyped_storage().nbytes() != _extent(value):
            raise _Lasting  # a view of a larger allocation: a new one of its shape would be too small
        out_ptr[ptr] = len(allocs)
        allocs.append((tuple(value.shape), value.stride(), value.dtype, value.device))
        return "out", out_ptr[ptr]


# Entries besides plans: a key seen once (its next call is recorded), and a key whose calls
# cannot be replayed (the checked path, not recorded again).
_SEEN = object()
_REFUSED = object()


class Plans:
    """Launch plans of one op, by the key of its call's arguments; and the shapes seen (a
    call's first tensor's shape, argument count and keywords), whose absence tells a new
    signature without a key. One lookup a call: a key is a long tuple, hashed and compared
    on each lookup."""

    __slots__ = ("entries", "shapes")

    def __init__(self):
        self.entries: dict = {}
        self.shapes: set = set()
        _all_plans.append(self)

    def key(self, inputs: tuple, names: tuple = ()) -> tuple | None:
        """The plans' key of these arguments (the last ones passed by the keywords ``names``),
        or None where no plan is used or made now."""
        return _key(inputs, names) if _active() else None

    def new_shape(self, inputs: tuple, names: tuple) -> bool:
        """Whether no call with this first tensor's shape, argument count and keywords was
        seen (then its key was not either); notes it."""
        first = inputs[0] if inputs else None
        mark = (len(inputs), names, first.shape if isinstance(first, torch.Tensor) else None)
        if mark in self.shapes:
            return False
        if len(self.shapes) >= _MAX_PLANS:
            self.shapes.clear()
        self.shapes.add(mark)
        return True

    def note(self, key: tuple, value) -> None:
        if len(self.entries) >= _MAX_PLANS:
            self.entries.clear()
        self.entries[key] = value

    def record(self, fn: Callable, key: tuple, inputs: tuple, args: tuple, kwargs: dict):
        """``fn(*args, **kwargs)`` through the checked path, watched; its plan kept under
        ``key``, or the key as refused."""
        rec = _state.recording = _Recording()
        try:
            with _Watch(rec):
                rec.result = fn(*args, **kwargs)
        finally:
            _state.recording = None
        plan = rec.plan(inputs)
        self.note(key, _REFUSED if plan is None else plan)
        return rec.result


def planned(fn=None, *, unless: Callable[[], bool] | None = None):
    """Decorate an op's public function with launch plans: a call whose arguments match
    an earlier recorded one's key launches that call's kernel directly and returns the same
    kind of result (its own tensors, or new ones of the recorded shapes). The function's
    effects on tensors must be its launches through :func:`launch`; where a recorded call
    did more (a torch op on a tensor, a host read of a value, a buffer made before the call
    and kept past it passed to a kernel) no plan is kept; several launches replay in order, and
    a work buffer the call allocates is allocated anew by each replay. ``unless``: asked on each call; True runs the
    checked path (a switch that asks the op to check tensor values on the host)."""
    if fn is None:
        return functools.partial(planned, unless=unless)
    plans = Plans()

    @functools.wraps(fn)
    def call(*args, **kwargs):
        if not _active():
            return fn(*args, **kwargs)
        inputs, names = ((*args, *kwargs.values()), tuple(kwargs)) if kwargs else (args, ())
        if plans.new_shape(inputs, names):  # a new signature: the checked path, nothing more
            return fn(*args, **kwargs)
        key = _key(inputs, names)
        if key is None:
            return fn(*args, **kwargs)
        try:
            plan = plans.entries.get(key)
        except TypeError:  # an unhashable argument: the checked path says what is wrong with it
            return fn(*args, **kwargs)
        if plan is None:  # seen once, its shape at least: the key noted
            plans.note(key, _SEEN)
            return fn(*args, **kwargs)
        if plan is _REFUSED or (unless is not None and unless()) or _quiet():
            return fn(*args, **kwargs)
        if plan is _SEEN:
            return plans.record(fn, key, inputs, args, kwargs)
        return plan(inputs, key[1])

    call.plans = plans
    return call


def keep(t: torch.Tensor) -> None:
    """Declare ``t`` a buffer that outlives the call (reused by every launch on this
    device and stream), so a plan may hold it."""
    rec = getattr(_state, "recording", None)
    if rec is not None:
        rec.persistent.add(t.data_ptr())


def record(fn: Callable, *args, **kwargs) -> tuple:
    """``fn(*args, **kwargs)`` through its checked path, and the launches it made as
    (kernel, grid, args, meta): what a bare ``kernel[grid](*args, **meta)`` repeats
    (the host-time benchmark's baseline)."""
    rec, _state.recording = getattr(_state, "recording", None), _Recording()
    try:
        result = fn(*args, **kwargs)
        launches = [(kernel, grid, a, meta) for _, kernel, grid, a, meta in _state.recording.launches]
    finally:
        _state.recording = rec
    return result, launches


def launch(kernel, grid: tuple, *args, **meta) -> None:
    """``kernel[grid](*args, **meta)``: runtime arguments positional, constexprs and
    launch options by keyword; recorded for a plan when one is being made."""
    if TRITON_INTERPRET:
        _runtime_by_position(kernel, meta)
    compiled = kernel[grid](*args, **meta)
    rec = getattr(_state, "recording", None)
    if rec is not None:
        rec.launches.append((compiled, kernel, grid, args, meta))


@functools.cache
def _runtime_names(kernel) -> frozenset:
    params = inspect.signature(kernel.fn).parameters.values()  # a JITFunction or the interpreter's
    return frozenset(p.name for p in params if "constexpr" not in str(p.annotation))


def _runtime_by_position(kernel, meta: dict) -> None:
    """A plan replays the positional arguments and the constexprs' values: a runtime argument
    passed by keyword would leave its launch with no plan. Checked where kernels are
    interpreted (the CPU tests), so every launcher is held to it without a cost on a GPU."""
    if not hasattr(kernel, "fn"):  # not a Triton kernel (a stand-in of the tests)
        return
    named = _runtime_names(kernel) & meta.keys()
    if named:
        raise TypeError(f"{kernel.fn.__name__}: runtime arguments {sorted(named)} passed by keyword; "
                        f"launch() takes them by position")

