"""Device selection, seeds and xdist GPU pinning for the op tests.

With no GPU, every Triton kernel runs on the CPU through Triton's interpreter:
TRITON_INTERPRET must be set before any kernel module is imported, so this file
sets it first, before anything imports aiter_lite.
"""

import os
import zlib

import torch

if not torch.cuda.is_available():
    os.environ["TRITON_INTERPRET"] = "1"
elif torch.cuda.device_count() > 1:
    # One GPU per xdist worker, round-robin, so `-n auto` spreads over every GPU.
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0")
    torch.cuda.set_device(int(worker.lstrip("gw") or 0) % torch.cuda.device_count())

import pytest  # noqa: E402


def _patch_triton_language_once_a_launch() -> None:
    """The interpreter patches ``triton.language`` for a launch (``GridExecutor``) and undoes
    it after; every call of a ``@triton.jit`` helper inside the kernel patches the same
    modules again (its scope never undone) at some 1.8 ms a call: a fifth of the interpreter's
    time in the RoPE tests (11268 patchings for 1080 programs). Within a launch, a helper
    whose module sees no language module the launch has not patched gets the launch's patch
    (``tl.cdiv``'s module sees ``triton.language.core``: patched on its first call, as every
    call did before, and left patched after the launch, as before). Only where this Triton
    has the functions this relies on; nothing else changes."""
    from triton.runtime import interpreter as interp

    patch, grid, scope_cls = (getattr(interp, n, None) for n in ("_patch_lang", "GridExecutor", "_LangPatchScope"))
    if patch is None or grid is None or scope_cls is None or getattr(patch, "_aiter_lite_once", False):
        return
    import threading

    import triton.language as tl

    state = threading.local()

    def langs(fn) -> frozenset:
        return frozenset(id(v) for v in fn.__globals__.values() if v is tl or v is tl.core)

    def patch_once(fn):
        launch = getattr(state, "launch", None)
        if launch is not None and launch["patched"] is not None and langs(fn) <= launch["patched"]:
            return scope_cls()  # a device function's call: the launch's patch holds
        scope = patch(fn)
        if launch is not None:  # (a helper's extra module stays patched: the interpreter never undoes its scope)
            launch["patched"] = langs(fn) | (launch["patched"] or frozenset())
        return scope

    patch_once._aiter_lite_once = True
    grid_call = grid.__call__

    def call(self, *args, **kwargs):
        outer = getattr(state, "launch", None)
        state.launch = {"patched": None}
        try:
            return grid_call(self, *args, **kwargs)
        finally:
            state.launch = outer

    interp._patch_lang = patch_once
    grid.__call__ = call


def _reuse_interpreter_types() -> None:
    """Two pure look-ups the interpreter redoes at every operation, done once: the numpy
    dtype of a Triton dtype (``_get_np_dtype`` builds its 18-entry table at each of its
    calls), and the block type of a (dtype, shape) (``tl.block_type`` re-validates the shape
    and formats its name at each of ``get_block_ty`` / ``with_element_ty``'s calls; the
    objects are never changed after construction, and equal ones compare equal). Together
    about a third of the interpreter's time in the quant tests (``test_per_tensor`` at 33 x
    1076: 1.07 -> 0.70 s). Pointer dtypes (unhashable) and anything unknown take the
    original path; only where this Triton has the functions this relies on."""
    import numpy as np
    import triton.language as tl
    from triton.runtime import interpreter as interp

    get_np, builder = getattr(interp, "_get_np_dtype", None), getattr(interp, "InterpreterBuilder", None)
    block = getattr(tl.core, "block_type", None)
    if get_np is None or builder is None or block is None or getattr(get_np, "_aiter_lite_cached", False):
        return
    as_np = {t: get_np(t) for t in (tl.int1, tl.float16, tl.float32, tl.float64, tl.int8, tl.uint8, tl.int16,
                                    tl.uint16, tl.int32, tl.uint32, tl.int64, tl.uint64, tl.bfloat16, tl.float8e5,
                                    tl.float8e5b16, tl.float8e4nv, tl.float8e4b8, tl.float8e4b15)}
    u64 = np.dtype(np.uint64)
    assert get_np(tl.pointer_type(tl.float32)) == u64

    def np_dtype(t):
        if isinstance(t, block):
            t = t.element_ty
        if isinstance(t, tl.pointer_type):
            return u64
        found = as_np.get(t)
        return found if found is not None else get_np(t)

    made: dict = {}

    def block_type(dtype, shape):
        try:
            key = (dtype, tuple(int(getattr(s, "value", s)) for s in shape))
            found = made.get(key)
        except TypeError:  # a pointer element type: not hashable
            return block(dtype, shape)
        if found is None:
            found = made[key] = block(dtype, shape)
        return found

    np_dtype._aiter_lite_cached = True
    interp._get_np_dtype = np_dtype
    builder.get_block_ty = lambda self, dtype, shape: block_type(dtype, shape)
    block.with_element_ty = lambda self, scalar_ty: block_type(scalar_ty, self.shape)

    # A tensor's shape: the same constexprs for every tensor of a shape (``tensor.__init__``
    # builds a ``tl.tuple`` of new ones, with its tuple type, for each: a fifth of the time
    # in the RoPE fuzz cases). Only for the constructor this was written against (Triton
    # 3.6 - 3.9), whose shape tuple nothing in the interpreter changes afterwards.
    import hashlib
    import inspect
    import math

    core = tl.core
    if hashlib.sha1(inspect.getsource(core.tensor.__init__).encode()).hexdigest() != _TENSOR_INIT_SHA1:
        return

    def shape_of(shape):
        return core.constexpr(math.prod(shape)), core.tuple([core.constexpr(s) for s in shape])

    scalar = shape_of(())

    def tensor_init(self, handle, type):
        if type.is_block():  # kept on the block type (one object a dtype and shape, above)
            numel_shape = type.__dict__.get("_aiter_lite_shape")
            if numel_shape is None:
                numel_shape = type._aiter_lite_shape = shape_of(type.shape)
        else:
            numel_shape = scalar
        self.handle = handle
        self.numel, self.shape = numel_shape
        self.type = type
        self.dtype = type.scalar

    core.tensor.__init__ = tensor_init


_TENSOR_INIT_SHA1 = "918c80e8ee879fd341cc10e430862e14d8f7368b"


def _skip_dropped_overflow_checks() -> None:
    """Integer add / sub / mul check int32 overflow by redoing the operation in int64 and
    building a ``device_assert`` of the range, which the interpreter then drops: its options
    have ``debug`` off, fixed. The whole check is skipped while ``debug`` is off, as the
    assert would be (its own assertions cannot fail after the type checks before it): the
    same results, at 40-45% less time in the RoPE fuzz cases and ``test_per_tensor``."""
    from triton.runtime import interpreter as interp

    semantic = getattr(interp, "interpreter_semantic", None)
    check = getattr(type(semantic), "binary_op_sanitize_overflow_impl", None)
    if semantic is None or check is None or getattr(semantic, "_aiter_lite_overflow", False):
        return

    def overflow_check(lhs, rhs, binary_op):
        if semantic.builder.options.debug:
            return check(semantic, lhs, rhs, binary_op)
        return None

    semantic.binary_op_sanitize_overflow_impl = overflow_check
    semantic._aiter_lite_overflow = True


if os.environ.get("TRITON_INTERPRET") == "1":
    _patch_triton_language_once_a_launch()
    _reuse_interpreter_types()
    _skip_dropped_overflow_checks()

from aiter_lite import envs  # noqa: E402
from op_tests.utils import DEVICE, ON_GPU  # noqa: E402

if envs.test_compile():
    # Before the test modules import the ops: every public Triton op compiled (fullgraph).
    from op_tests.utils.compiled import swap_in_compiled  # noqa: E402

    swap_in_compiled("inductor" if ON_GPU else "aot_eager")


# The interpreter's slowest tests (5-30 s each), run first on the CPU: xdist hands out the rest
# as workers free up, so the workers end within a short test of each other rather than one
# waiting on a long test sent last. (Order only: every test runs as before.)
_SLOW_ON_THE_INTERPRETER = {
    "test_every_pair_to_one_expert_and_the_limit", "test_draws_stay_in_the_kept_set_and_follow_it",
    "test_compiled_callers_get_the_launches_results", "test_long_row_paths_on_short_rows", "test_gated_any_tile",
    "test_pinned_launch_config", "test_bench_runs", "test_bench_host_runs", "test_fused_rms_row_loop",
    "test_a_pinned_launch_compiles_whole", "test_cross_entropy_reduced_in_the_launch",
    "test_aiters_calling_convention", "test_top_k_survivor_lists_and_the_whole_row_path",
    "test_from_uniform_rows_indices_temperature_and_edge_numbers", "test_patched_bf16_within_hf_noise",
    "test_fuzz",
}


def pytest_collection_modifyitems(config, items):
    if not ON_GPU:  # a stable sort: the slow ones first, each group in collection order
        items.sort(key=lambda item: getattr(item, "originalname", item.name) not in _SLOW_ON_THE_INTERPRETER)
    if envs.test_compile():
        skip = pytest.mark.skip(reason="a host check of index values, which compiled calls skip (AITER_TEST_COMPILE=1)")
        for item in items:
            if item.get_closest_marker("eager_host_checks"):
                item.add_marker(skip)


def pytest_report_header(config):
    where = torch.cuda.get_device_name() if ON_GPU else "CPU (Triton interpreter)"
    compiled = ", every public op through torch.compile (AITER_TEST_COMPILE=1)" if envs.test_compile() else ""
    return f"aiter_lite op tests on {where}, device={DEVICE}{compiled}"


@pytest.fixture(autouse=True)
def _seed(request):
    # A different, reproducible seed per test: fresh random inputs, no shared state.
    seed = zlib.crc32(request.node.nodeid.encode())
    torch.manual_seed(seed)
    yield
    if ON_GPU:
        # Workers share one GPU: what a test freed goes back to it, so one worker's cache of
        # a large test does not starve the others (an 80 GB card at -n 14).
        torch.cuda.empty_cache()
