"""Launch plans (aiter_lite.utils.fast_launch): what a plan keeps, when it refuses, and
that ops launched from plans give the checked path's results (every registered op:
op_tests/integration/test_plans.py).

The recording logic runs everywhere against a stand-in kernel; the real ops' plans
only exist on a GPU (Triton's interpreter has no compiled kernels to keep)."""

import inspect
from types import SimpleNamespace

import pytest
import torch

from aiter_lite.utils import fast_launch as fl
from op_tests.utils import DEVICE, ON_GPU


class _Compiled:
    def __init__(self, calls):
        self.calls = calls
        self.function = "fn"
        self.packed_metadata = "meta"

    def run(self, *args):
        self.calls.append(args)


class _Kernel:
    """Parameters (a, b, n, eps, BLOCK: constexpr, EVEN: constexpr = True) like a @triton.jit kernel."""

    def __init__(self):
        def sig(a, b, n, eps, BLOCK, EVEN=True):
            pass

        self.signature = inspect.signature(sig)
        self.params = [SimpleNamespace(name=name, is_constexpr=name.isupper()) for name in self.signature.parameters]
        self.launches = []  # Triton's path
        self.runs = []      # plans' direct launches

    def __getitem__(self, grid):
        def call(*args, **meta):
            self.launches.append((grid, args, meta))
            return _Compiled(self.runs)

        return call


@pytest.fixture
def on(monkeypatch):
    monkeypatch.setattr(fl, "_enabled", True)
    monkeypatch.setattr(fl, "fast_launch_enabled", lambda: True)
    monkeypatch.setattr(fl, "_quiet", lambda: False)
    monkeypatch.setattr(fl, "_device_stream", lambda: (0, 7))
    monkeypatch.setattr(fl, "_CPU_IS_HOST", False)  # CPU tensors stand for device ones here


def _op(kernel, launches=1, buffer=None, allocate=False):
    """A planned op: launches ``kernel`` on (x's first row, y or ``buffer`` or a new
    tensor, n, 0.5) and returns y (or the new tensor)."""

    @fl.planned
    def op(x, y, n=4):
        out = torch.empty(3, 5, dtype=torch.float16) if allocate else y
        for _ in range(launches):
            fl.launch(kernel, (3,), x[0], out if buffer is None else buffer, n, 0.5, BLOCK=16)
        return out

    return op


def _held(op) -> int:
    """Plans an op holds (a refused or once-seen key is no plan)."""
    return sum(callable(plan) for plan in op.plans.entries.values())


def _warm(op, *args, **kwargs):
    """Call ``op`` as often as a plan takes to be recorded."""
    for _ in range(fl.RECORD_AT):
        op(*args, **kwargs)


def test_plan_relaunches_with_the_new_tensors(on):
    k = _Kernel()
    op = _op(k)
    x, y = torch.randn(2, 8), torch.randn(2, 8)
    for call in range(1, fl.RECORD_AT + 1):  # seen (the checked path only), then recorded
        assert op(x, y) is y and len(k.launches) == call and _held(op) == (call == fl.RECORD_AT)
    x2, y2 = torch.randn(2, 8), torch.randn(2, 8)
    assert op(x2, y2) is y2
    assert len(k.launches) == fl.RECORD_AT
    (run,) = k.runs
    # grid padded to 3 dims, the stream, function, metadata, no hooks; then every parameter
    assert run[:9] == (3, 1, 1, 7, "fn", "meta", None, None, None)
    assert run[9] is x2 and run[10] is y2 and run[11:] == (4, 0.5, 16, True)


def test_a_view_inside_an_input_is_replayed_at_its_offset(on):
    # vLLM's mul_and_silu launches on input's second half, rotary_embedding on the sine half of
    # cos_sin_cache: the plan passes the new input's pointer plus the recorded byte offset.
    k = _Kernel()

    @fl.planned
    def op(x, y):
        fl.launch(k, (3,), x[1, 2:], y, 4, 0.5, BLOCK=16)
        return y

    _warm(op, torch.randn(2, 8), torch.randn(2, 8))
    assert _held(op) == 1
    x2, y2 = torch.randn(2, 8), torch.randn(2, 8)
    op(x2, y2)
    (run,) = k.runs
    assert run[9] == x2.data_ptr() + 10 * x2.element_size() and run[10] is y2


def test_a_new_signature_costs_the_checked_path_and_a_key(on, monkeypatch):
    # Serving sees a new prefill length on most prefills: a call whose first tensor has a shape
    # not seen before computes no key; recording (a watched call, generated code) waits.
    built, keys = [], []
    monkeypatch.setattr(fl, "_replay", lambda *a: built.append(a) or (lambda inputs, stream: None))
    monkeypatch.setattr(fl, "_key", lambda *a: keys.append(a) or ("key",))
    k = _Kernel()
    op = _op(k)
    for rows in range(2, 7):
        op(torch.randn(rows, 8), torch.randn(rows, 8))
    assert not built and not keys and len(k.launches) == 5 and not op.plans.entries
    op(torch.randn(6, 8), torch.randn(6, 8))  # a shape seen: its key noted
    assert len(keys) == 1 and op.plans.entries == {("key",): fl._SEEN}


def test_keywords_are_part_of_the_key(on):
    k = _Kernel()
    op = _op(k)
    x, y = torch.randn(2, 8), torch.randn(2, 8)
    _warm(op, x, y, n=5)
    op(x, y, n=5)
    assert len(k.launches) == fl.RECORD_AT and k.runs[0][11] == 5
    op(x, y, n=6)  # another value: a key of its own, recorded the second time it is seen
    assert len(k.launches) == fl.RECORD_AT + 1
    _warm(op, x, y=y, n=6)  # the same values, y by keyword: a key of its own
    launched = len(k.launches)
    x2, y2 = torch.randn(2, 8), torch.randn(2, 8)
    assert op(x2, y=y2, n=6) is y2 and len(k.launches) == launched
    assert k.runs[-1][9] is x2 and k.runs[-1][10] is y2 and k.runs[-1][11] == 6
    op(x2, n=6, y=y2)  # the keywords in another order: another key
    assert len(k.launches) == launched + 1


def test_a_different_key_takes_the_checked_path(on):
    k = _Kernel()
    op = _op(k)
    x, y = torch.randn(2, 8), torch.randn(2, 8)
    _warm(op, x, y)
    op(torch.randn(2, 9)[:, :8], y)                     # strides
    op(torch.randn(2, 8, dtype=torch.float64), y)       # dtype
    op(x, y, 5)                                         # a scalar's value
    op(torch.randn(17)[1:].view(2, 8), y)               # 16-byte alignment
    assert len(k.launches) == fl.RECORD_AT + 4 and not k.runs


@pytest.mark.parametrize("case", ["host read", "copy", "fill", "requires grad", "own buffer", "raised"])
def test_no_plan_where_reuse_could_be_wrong(on, case):
    k = _Kernel()
    x, y = torch.randn(2, 8), torch.randn(2, 8)
    if case == "host read":  # a tensor's value read on the host: no dispatcher sees a Python int's origin
        @fl.planned
        def op(x, y):
            fl.launch(k, (3,), x, y, int(y[0, 0] > 0), 0.5, BLOCK=16)
    elif case == "copy":  # e.g. a table made contiguous
        @fl.planned
        def op(x, y):
            fl.launch(k, (3,), x.t().contiguous(), y, 4, 0.5, BLOCK=16)
    elif case == "fill":  # e.g. the scale of an empty input written by torch
        @fl.planned
        def op(x, y):
            y.fill_(1.0)
            fl.launch(k, (3,), x, y, 4, 0.5, BLOCK=16)
    elif case == "requires grad":
        op = _op(k)
        x.requires_grad_(True)
    elif case == "own buffer":
        op = _op(k, buffer=torch.empty(16))
    else:
        @fl.planned
        def op(x, y):
            fl.launch(k, (3,), x, y, 4, 0.5, BLOCK=16)
            raise ValueError("a check failed")

    for _ in range(fl.RECORD_AT + 1):
        try:
            op(x, y)
        except ValueError:
            assert case == "raised"
    assert not _held(op) and not k.runs


def test_a_value_read_on_the_host_is_never_replayed(on):
    # rope_fwd_2d(x, ..., img_height, img_width) with the sizes as 0-d tensors: a plan made
    # with (4, 8) must not answer a call with (2, 16).
    k = _Kernel()

    @fl.planned
    def op(x, h, w):
        fl.launch(k, (int(h),), x, x, int(w), 0.5, BLOCK=16)

    x = torch.randn(2, 8)
    sizes = [(4, 8)] * (fl.RECORD_AT + 1) + [(2, 16)]
    for h, w in sizes:
        op(x, torch.tensor(h), torch.tensor(w))
        assert k.launches[-1][0] == (h,) and k.launches[-1][1][2] == w
    assert len(k.launches) == len(sizes) and not k.runs and not _held(op)


def test_a_cpu_tensor_argument_has_no_key(on, monkeypatch):
    # On a GPU a CPU tensor holds values the wrapper reads on the host (``tolist`` of a CPU
    # tensor reaches no dispatcher): no plan, whatever the call does.
    monkeypatch.setattr(fl, "_CPU_IS_HOST", True)
    k = _Kernel()
    op = _op(k)
    x, y = torch.randn(2, 8), torch.randn(2, 8)
    assert op.plans.key((x, y)) is None
    for _ in range(fl.RECORD_AT + 1):
        op(x, y)
    assert not op.plans.entries and len(k.launches) == fl.RECORD_AT + 1


def test_buffers_made_once_for_every_call_do_not_refuse(on):
    # utils.launch.stream_buffer makes (zeroed) and grows its buffer outside the watch and
    # declares it persistent.
    from aiter_lite.utils.launch import stream_buffer

    k = _Kernel()

    @fl.planned
    def op(x, y):
        work = stream_buffer("test_plans", x.numel() + 1000, torch.int32, x.device, zeroed=True)
        fl.launch(k, (3,), x, work, 4, 0.5, BLOCK=16)

    for _ in range(fl.RECORD_AT + 1):
        op(torch.randn(2, 8), torch.randn(2, 8))
    assert _held(op) == 1 and len(k.runs) == 1


def test_plans_off_is_per_thread(on):
    import threading

    op = _op(_Kernel())
    x, y = torch.randn(2, 8), torch.randn(2, 8)
    keys = {}
    with fl.plans_off():
        keys["off"] = op.plans.key((x, y))
        t = threading.Thread(target=lambda: keys.setdefault("other", op.plans.key((x, y))))
        t.start()
        t.join()
    assert keys["off"] is None and keys["other"] is not None


def test_aliased_inputs_are_planned_by_their_pattern(on):
    # out=input (an in-place call through an out-of-place signature): the plan of an aliased
    # call serves aliased calls only, and returns the input the caller handed in.
    k = _Kernel()
    op = _op(k)
    x = torch.randn(2, 8)
    _warm(op, x, x)
    x2 = torch.randn(2, 8)
    assert op(x2, x2) is x2 and len(k.launches) == fl.RECORD_AT
    assert k.runs[0][9].data_ptr() == k.runs[0][10].data_ptr() == x2.data_ptr()
    y3 = torch.randn(2, 8)
    assert op(x2, y3) is y3 and len(k.launches) == fl.RECORD_AT + 1  # not aliased: a key of its own


def test_a_switch_can_bypass_plans(on):
    k = _Kernel()
    checking = [False]

    @fl.planned(unless=lambda: checking[0])
    def op(x, y):
        fl.launch(k, (3,), x, y, 4, 0.5, BLOCK=16)

    x, y = torch.randn(2, 8), torch.randn(2, 8)
    _warm(op, x, y)
    op(x, y)
    assert len(k.launches) == fl.RECORD_AT and len(k.runs) == 1
    checking[0] = True
    op(x, y)
    assert len(k.launches) == fl.RECORD_AT + 1 and len(k.runs) == 1


def test_record_returns_the_launches(on):
    k = _Kernel()
    op = _op(k)
    x, y = torch.randn(2, 8), torch.randn(2, 8)
    result, launches = fl.record(op, x, y)
    assert result is y and not op.plans.entries
    (kernel, grid, args, meta), = launches
    assert kernel is k and grid == (3,) and args[1] is y and meta == {"BLOCK": 16}


def test_a_returned_view_of_a_larger_buffer_is_not_planned(on):
    k = _Kernel()

    @fl.planned
    def op(x, y):
        out = torch.empty(4, 8)
        fl.launch(k, (3,), x, out, 4, 0.5, BLOCK=16)
        return out[:, :4]  # offset 0, yet a new (4, 4) tensor of these strides is too small

    x, y = torch.randn(2, 8), torch.randn(2, 8)
    for _ in range(fl.RECORD_AT + 1):
        op(x, y)
    assert not _held(op) and len(k.launches) == fl.RECORD_AT + 1


def test_a_refused_key_is_not_recorded_again(on):
    k = _Kernel()
    op = _op(k, launches=2, buffer=torch.empty(16))  # a buffer of its own, made before the call
    x, y = torch.randn(2, 8), torch.randn(2, 8)
    for _ in range(fl.RECORD_AT + 1):
        op(x, y)
    assert len(op.plans.entries) == 1 and not _held(op) and len(k.launches) == 2 * (fl.RECORD_AT + 1)
    assert next(iter(op.plans.entries.values())) is fl._REFUSED


def test_a_kept_buffer_stays_in_the_plan(on):
    k = _Kernel()
    work = torch.zeros(3)

    @fl.planned
    def op(x, y):
        fl.keep(work)
        fl.launch(k, (3,), x, work, 4, 0.5, BLOCK=16)

    for _ in range(fl.RECORD_AT + 1):
        assert op(torch.randn(2, 8), torch.randn(2, 8)) is None
    assert k.runs[0][10] is work


def test_an_allocating_op_gets_new_outputs(on):
    k = _Kernel()
    op = _op(k, allocate=True)
    x, y = torch.randn(2, 8), torch.randn(2, 8)
    _warm(op, x, y)
    first = op(x, y)
    second = op(x, y)
    assert second is not first and second.data_ptr() != first.data_ptr()
    assert (second.shape, second.stride(), second.dtype) == (first.shape, first.stride(), first.dtype)
    assert k.runs[-1][10] is second


def test_an_op_calling_an_op_is_planned_as_one(on):
    k = _Kernel()
    inner = _op(k)

    @fl.planned
    def outer(x, y):
        return inner(x, y), 1.5

    x, y = torch.randn(2, 8), torch.randn(2, 8)
    _warm(outer, x, y)
    assert not _held(inner) and _held(outer) == 1
    y2 = torch.randn(2, 8)
    assert outer(x, y2) == (y2, 1.5) and k.runs[0][10] is y2


def test_unhashable_argument_falls_through(on):
    k = _Kernel()
    op = _op(k)
    x, y = torch.randn(2, 8), torch.randn(2, 8)
    op(x, y)
    for _ in range(fl.RECORD_AT):
        op(x, y, [1])  # the checked path runs (and says what is wrong with a list, in a real op)
    assert len(k.launches) == fl.RECORD_AT + 1 and not k.runs


def test_switched_off(monkeypatch):
    monkeypatch.setenv("AITER_FAST_LAUNCH", "0")
    fl.reset()
    try:
        assert not fl.fast_launch_enabled()
    finally:
        monkeypatch.delenv("AITER_FAST_LAUNCH")
        fl.reset()


def test_the_installed_triton_launches_as_plans_do():
    # A plan calls CompiledKernel.run with the convention of Triton's own runner; a Triton
    # that changes it turns plans off rather than launching wrongly.
    assert fl._launcher_convention()


@pytest.mark.skipif(not ON_GPU, reason="plans hold compiled GPU kernels; the interpreter has none")
@pytest.mark.parametrize("rows", [1, 5, 300])
def test_quant_ops_from_plans_match_the_reference(rows, monkeypatch):
    from aiter_lite.ops.native import quant as nat
    from aiter_lite.ops.triton import quant as tq
    from aiter_lite.ops.triton.quant import quant as quant_mod

    fl.reset()
    checked = []  # launches through the checked path

    def counted(*args, **meta):
        checked.append(args[0])
        fl.launch(*args, **meta)

    monkeypatch.setattr(quant_mod, "launch", counted)
    ops = [
        ("static", tq.static_per_tensor_quant_fp8_i8, nat.static_per_tensor_quant_fp8_i8, (1,)),
        ("dynamic", tq.dynamic_per_tensor_quant_fp8_i8, nat.dynamic_per_tensor_quant_fp8_i8, (1,)),
        ("per token", tq.dynamic_per_token_quant_fp8_i8, nat.dynamic_per_token_quant_fp8_i8, (rows, 1)),
        ("group", lambda q, x, s: tq.per_token_group_quant(q, x, s, 128),
         lambda q, x, s: nat.per_token_group_quant(q, x, s, 128), (rows, 12)),
    ]
    for name, ours, ref, scale_shape in ops:
        checked.clear()
        for step in range(fl.RECORD_AT + 2):  # seen, recorded, then two launches from the plan
            x = torch.randn(rows, 1536, device=DEVICE, dtype=torch.bfloat16) * (step + 1)
            q = torch.full((rows, 1536), float("nan"), device=DEVICE).to(torch.float8_e4m3fn)
            q_ref = torch.empty_like(q)
            if name == "static":
                scale = torch.full(scale_shape, 0.01 * (step + 1), device=DEVICE)
                scale_ref = scale
            else:
                scale = torch.full(scale_shape, float("nan"), device=DEVICE)
                scale_ref = torch.empty_like(scale)
            ours(q, x, scale)
            ref(q_ref, x, scale_ref)
            msg = f"{name}, call {step + 1}"
            want = min(step + 1, fl.RECORD_AT)
            assert len(checked) == want, f"{msg}: {len(checked)} launches through the checked path, expected {want}"
            torch.testing.assert_close(scale, scale_ref, rtol=1e-6, atol=0, msg=msg)
            torch.testing.assert_close(q.float(), q_ref.float(), rtol=0.13, atol=0, msg=msg)


@pytest.mark.skipif(not ON_GPU, reason="plans hold compiled GPU kernels; the interpreter has none")
@pytest.mark.parametrize("rows", [1, 300])
def test_fused_and_allocating_ops_from_plans_repeat_the_checked_call(rows, monkeypatch):
    # A call from the plan writes what the checked calls wrote; in-place residuals included;
    # allocating ops return new tensors.
    from aiter_lite.ops.triton.quant import act_quant, norm_quant
    from aiter_lite.ops.triton.quant import quant as quant_mod

    fl.reset()
    checked = []
    for module in (act_quant, norm_quant, quant_mod):
        monkeypatch.setattr(module, "launch", lambda *a, **m: (checked.append(a[0]), fl.launch(*a, **m)))
    f8, n = torch.float8_e4m3fn, 1536
    x = torch.randn(rows, n, device=DEVICE, dtype=torch.bfloat16)
    x2 = torch.randn(rows, 2 * n, device=DEVICE, dtype=torch.bfloat16)
    res = torch.randn(rows, n, device=DEVICE, dtype=torch.bfloat16)
    w = torch.randn(n, device=DEVICE, dtype=torch.bfloat16)
    scale = torch.full((1,), 0.02, device=DEVICE)

    def q():
        return torch.full((rows, n), float("nan"), device=DEVICE).to(f8)

    def nan(*shape):
        return torch.full(shape, float("nan"), device=DEVICE)

    calls = {
        "add rms dynamic": lambda: (lambda o, r, s: (norm_quant.rmsnorm2d_fwd_with_add_dynamicquant(
            o, x, res, r, s, w, 1e-6), o, r, s))(q(), torch.empty_like(res), nan(rows, 1)),
        "add rms static, residual in place": lambda: (lambda o, r: (norm_quant.fused_add_rms_norm_static_fp8_quant(
            o, x, r, w, scale, 1e-6), o, r))(q(), res.clone()),
        "silu and mul static": lambda: (lambda o: (act_quant.silu_and_mul_quant(o, x2, scale), o))(q()),
        "silu group 128 (allocating)": lambda: act_quant.act_mul_and_fp8_group_quant(x2, "silu", 128),
        "scaled_fp8_quant per token (allocating)": lambda: quant_mod.scaled_fp8_quant(
            x, use_per_token_if_dynamic=True),
    }
    for name, call in calls.items():
        checked.clear()
        for _ in range(fl.RECORD_AT - 1):
            call()
        first = [t for t in call() if isinstance(t, torch.Tensor)]
        second = [t for t in call() if isinstance(t, torch.Tensor)]
        assert len(checked) == fl.RECORD_AT, f"{name}: {len(checked)} launches through the checked path"
        for a, b in zip(first, second):
            assert a.data_ptr() != b.data_ptr(), name
            assert torch.equal(a.view(torch.uint8) if a.element_size() == 1 else a,
                               b.view(torch.uint8) if b.element_size() == 1 else b), name


def test_reused_zeroed_buffers_are_left_zeroed(monkeypatch):
    # topk's filter path and softmax's split path reuse one zeroed buffer a stream
    # (utils.launch.stream_buffer): each launch must leave it zeroed for the next, whatever
    # the shapes in between (k = 1 and k > 1, several rows, odd widths).
    from aiter_lite.ops.triton import softmax as sm
    from aiter_lite.ops.triton import topk
    from aiter_lite.utils import launch as launch_mod

    n = 200_000 if ON_GPU else 40_000
    if not ON_GPU:  # the interpreter's 4 "SMs" would loop these rows: split them as a GPU does
        monkeypatch.setattr(sm, "softmax_launch_config", lambda *a: sm._SPLIT)
    for rows, k in ((1, 50), (3, 1), (2, 7), (1, 1)):
        x = torch.randn(rows, n + rows, device=DEVICE)
        vals, _ = topk.topk(x, k)
        assert torch.equal(vals, torch.topk(x, k).values), (rows, k)
        torch.testing.assert_close(sm.softmax(x), torch.softmax(x, -1))
        if ON_GPU:
            torch.cuda.synchronize()
        reused = {key[0]: buf for key, buf in launch_mod._stream_buffers.items()
                  if key[0] in ("topk_work", "softmax_split")}
        assert set(reused) == {"topk_work", "softmax_split"}, f"reused buffers: {set(reused)}"
        for name, buf in reused.items():
            assert not buf.any(), f"{name} left {int(buf.count_nonzero())} words set after rows={rows} k={k}"


def test_several_launches_and_work_buffers_replay_in_order(on):
    # sampling: a stats launch, search launches and a finish, over work buffers the call allocates
    k1, k2 = _Kernel(), _Kernel()

    @fl.planned
    def op(x, y):
        work = torch.empty(10, dtype=torch.float32)
        a, b = work.split([4, 6])
        fl.launch(k1, (3,), x, b, 4, 0.5, BLOCK=16)
        fl.launch(k2, (2, 5), b, y, 6, 0.25, BLOCK=32)
        return y

    x, y = torch.randn(2, 8), torch.randn(2, 8)
    _warm(op, x, y)
    assert _held(op) == 1 and len(k1.launches) == fl.RECORD_AT and not k1.runs
    x2, y2 = torch.randn(2, 8), torch.randn(2, 8)
    assert op(x2, y2) is y2
    assert len(k1.launches) == fl.RECORD_AT  # replayed, not launched through Triton
    (r1,), (r2,) = k1.runs, k2.runs
    assert r1[:3] == (3, 1, 1) and r2[:3] == (2, 5, 1)
    assert r1[9] is x2 and r2[10] is y2 and r1[11:] == (4, 0.5, 16, True) and r2[11:] == (6, 0.25, 32, True)
    # the work buffer: a fresh allocation's pointer, the view's byte offset kept (16 bytes in), the
    # same buffer in both launches
    assert isinstance(r1[10], int) and r1[10] == r2[9]
    assert not any(t.data_ptr() == r1[10] - 16 for t in (x, y, x2, y2))


def test_a_launch_on_part_of_a_new_output_is_not_planned(on):
    # the output's second half written by a launch: a plan replaying it as a work buffer would
    # leave the returned tensor unwritten
    k = _Kernel()

    @fl.planned
    def op(x, y):
        out = torch.empty(4, 8)
        fl.launch(k, (3,), x, out[2:], 4, 0.5, BLOCK=16)
        return out

    for _ in range(fl.RECORD_AT + 1):
        op(torch.randn(2, 8), torch.randn(2, 8))
    assert not _held(op) and not k.runs
