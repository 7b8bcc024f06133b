"""cross_entropy and fused_linear_cross_entropy (aiter_lite.ops.triton.cross_entropy) against
autograd through the fp32 native reference: the loss and every gradient, each dtype and
reduction, ignore_index, label smoothing and softcapping, odd widths (one and several
column chunks), M = 0 and 1, strided rows, more than 2 dims, int32 targets, logits chunks of
every size, gradient weights other than 1; edge rows (NaN, -inf, a target out of range, every
target ignored); nothing the caller passed is modified; bad arguments raise."""

import pytest
import torch

from aiter_lite.ops.native import cross_entropy as native
from aiter_lite.ops.triton import cross_entropy as tri
from op_tests.utils import DEVICE, DTYPES, ON_GPU, assert_close, by_device, make_rows
from op_tests.utils.inputs import poison_allocations

REDUCTIONS = ["mean", "sum", "none"]
OPTIONS = {"plain": {}, "ignore 3": dict(ignore_index=3), "smoothed": dict(label_smoothing=0.2),
           "softcapped": dict(softcap=4.0), "smoothed, softcapped": dict(label_smoothing=0.1, softcap=2.5)}
# (rows, vocab): one column chunk, several (8192-wide chunks), a single row, none
SHAPES = by_device(cpu=[(0, 37), (1, 1), (5, 37), (3, 1000), (2, 9000)],
                   gpu=[(0, 37), (1, 1), (5, 37), (3, 1000), (2, 9000), (64, 32000), (16, 128256), (4, 262147)])


@pytest.fixture(autouse=True)
def _poisoned_empty(monkeypatch):
    """Every allocation (the gradients included) starts NaN: an element left unwritten fails."""
    poison_allocations(monkeypatch)


def _targets(rows: int, vocab: int, ignore_index: int = -100, lead: tuple = ()) -> torch.Tensor:
    g = torch.Generator().manual_seed(rows * 7919 + vocab)
    t = torch.randint(0, max(vocab, 1), (*lead, rows), generator=g).to(DEVICE)
    if t.numel() > 2:
        t.view(-1)[1] = ignore_index  # one ignored row
    return t


def _tol(dtype: torch.dtype, grad: torch.Tensor | None = None) -> dict:
    """fp32: a few ulps; fp16 / bf16: two units of the dtype against the largest element
    (a loss or a gradient is one rounding of fp32 math; the interpreter truncates bf16)."""
    if dtype == torch.float32:
        return dict(atol=1e-5 if grad is None else 1e-6, rtol=1e-5)
    scale = 1.0 if grad is None else max(grad.abs().max().item(), 1e-3)
    return dict(atol=2 * torch.finfo(dtype).eps * scale, rtol=2 * torch.finfo(dtype).eps)


def _grad_weights(loss: torch.Tensor) -> torch.Tensor:
    """dL/dloss: random (not 1: the backward's scaling is checked) of loss's shape."""
    return (torch.rand(loss.shape, device=loss.device) + 0.5).to(loss.dtype)


# ---------------------------------------------------------------------------
# cross_entropy


# every option with "mean"; "sum" and "none" with the plainest and the fullest
OPTION_REDUCTIONS = [(o, "mean") for o in OPTIONS] + [(o, r) for o in ("plain", "smoothed, softcapped")
                                                      for r in ("sum", "none")]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("option, reduction", OPTION_REDUCTIONS)
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_cross_entropy_matches_native(shape, option, reduction, dtype):
    rows, vocab = shape
    kw = dict(OPTIONS[option], reduction=reduction)
    x = make_rows(rows, vocab, dtype, scale=3.0, strided=rows % 2 == 1)
    t = _targets(rows, vocab, kw.get("ignore_index", -100))
    saved = x.clone()
    a, b = x.clone().requires_grad_(), x.clone().requires_grad_()
    got, want = tri.cross_entropy(a, t, **kw), native.cross_entropy(b, t, **kw)
    assert got.dtype == dtype and got.shape == want.shape
    assert_close(got, want, **_tol(dtype), name="loss")
    if rows == 0:
        return
    w = _grad_weights(want)
    (got.float() * w.float()).sum().backward()
    (want.float() * w.float()).sum().backward()
    assert_close(a.grad, b.grad, **_tol(dtype, b.grad), name="logits' gradient")
    assert torch.equal(x, saved), "the logits were modified"


@pytest.mark.parametrize("dtype", DTYPES)
def test_cross_entropy_leading_dims_and_int32_targets(dtype):
    x = make_rows(5, 300, dtype, lead=(2,)).requires_grad_()
    t = _targets(5, 300, lead=(2,)).int()
    ref = x.detach().clone().requires_grad_()
    got, want = tri.cross_entropy(x, t, reduction="none"), native.cross_entropy(ref, t, reduction="none")
    assert got.shape == (2, 5)
    assert_close(got, want, **_tol(dtype))
    got.float().sum().backward()
    want.float().sum().backward()
    assert_close(x.grad, ref.grad, **_tol(dtype, ref.grad))


def test_cross_entropy_edge_rows():
    """NaN and +inf rows are NaN, -inf logits (a masked vocabulary) are fine, every target
    ignored is NaN for "mean" (0 / 0, as torch) and 0 for "sum"."""
    x = torch.randn(5, 50, device=DEVICE)
    x[0, 7] = float("nan")
    x[1, 3] = float("inf")
    x[2, 10:] = float("-inf")
    t = torch.tensor([1, 2, 4, 49, 5], device=DEVICE)
    loss = tri.cross_entropy(x.requires_grad_(), t, reduction="none")
    assert loss[:2].isnan().all() and loss[2:].isfinite().all()
    assert_close(loss[2:], native.cross_entropy(x[2:], t[2:], reduction="none"))
    loss[2:].sum().backward()
    assert (x.grad[2, 10:] == 0).all() and x.grad[2:].isfinite().all()
    assert x.grad[:2].isnan().all()  # NaN * a weight of 0, as torch's
    ignored = torch.full((5,), -100, device=DEVICE)
    assert tri.cross_entropy(x.detach(), ignored).isnan().item()
    assert tri.cross_entropy(x.detach(), ignored, reduction="sum").item() == 0


@pytest.mark.parametrize("reduction", ["mean", "sum"])
def test_cross_entropy_reduced_in_the_launch(reduction):
    """"mean" / "sum" are reduced by the launch's last program over more rows than one step
    of its sum (1024): the same loss and gradient as the native reference, call after call
    with fresh values (the ticket it draws is left zeroed), in the logits' dtype; the
    gradient through a loss weight, "mean" dividing by the count the forward made."""
    from aiter_lite.utils import launch as launch_mod

    # the interpreter's rows are slow: more than one step of the sum for "mean" only
    cpu_rows = ((1030, 0.3), (7, 1.0)) if reduction == "mean" else ((40, 0.3), (7, 1.0))
    for rows, ignored in by_device(cpu=cpu_rows, gpu=((2500, 0.3), (1025, 0.0), (70000, 0.1), (7, 1.0))):
        x = (torch.randn(rows, 13, device=DEVICE, dtype=torch.bfloat16) * 3).requires_grad_()
        t = torch.randint(0, 13, (rows,), device=DEVICE)
        t[torch.rand(rows, device=DEVICE) < ignored] = -100
        loss = tri.cross_entropy(x, t, reduction=reduction)
        x_ref = x.detach().float().requires_grad_()
        want = native.cross_entropy(x_ref, t, reduction=reduction)
        assert loss.dtype == torch.bfloat16 and loss.shape == ()
        if ignored == 1.0 and reduction == "mean":
            assert loss.isnan().item()
            continue
        assert_close(loss, want, dtype=torch.bfloat16, atol=0, rtol=2 * torch.finfo(torch.bfloat16).eps)
        w = torch.rand((), device=DEVICE) + 0.5
        (loss * w.bfloat16()).backward()
        (want * w.bfloat16().float()).backward()
        assert_close(x.grad, x_ref.grad, dtype=torch.bfloat16, **_tol(torch.bfloat16, x_ref.grad))
        if ON_GPU:
            torch.cuda.synchronize()
        tickets = [buf for key, buf in launch_mod._stream_buffers.items() if key[0] == "cross_entropy_ticket"]
        assert tickets and not any(buf.any() for buf in tickets), "the ticket was left drawn"


@pytest.mark.parametrize("op", ["cross_entropy", "fused_linear_cross_entropy"])
def test_target_out_of_range(op, monkeypatch):
    """A target outside [0, V) that is not ignore_index: a ValueError where targets are checked
    on the host (on the CPU, or AITER_CROSS_ENTROPY_CHECK_TARGETS=1), else a NaN loss in its
    row only (a GPU never waits for the host to check)."""
    x, w = torch.randn(4, 16, device=DEVICE), torch.randn(50, 16, device=DEVICE)
    t = torch.tensor([1, 50, -1, 3], device=DEVICE)
    call = (lambda: tri.cross_entropy(x @ w.t(), t, reduction="none")) if op == "cross_entropy" else \
        (lambda: tri.fused_linear_cross_entropy(x, w, t, reduction="none"))
    monkeypatch.delenv("AITER_CROSS_ENTROPY_CHECK_TARGETS", raising=False)
    if ON_GPU:
        loss = call()
        assert loss[1:3].isnan().all() and loss[[0, 3]].isfinite().all()
        monkeypatch.setenv("AITER_CROSS_ENTROPY_CHECK_TARGETS", "1")
    match = rf"{op}: target must hold class indices in \[0, 50\).* got 50 at flat index 1"
    with pytest.raises(ValueError, match=match):
        call()


# ---------------------------------------------------------------------------
# fused_linear_cross_entropy


def _linear_inputs(rows: int, hidden: int, vocab: int, dtype, bias: bool, lead: tuple = ()):
    g = torch.Generator().manual_seed(rows + hidden + vocab)
    x = torch.randn(*lead, rows, hidden, generator=g).to(DEVICE, dtype)
    w = (torch.randn(vocab, hidden, generator=g) * hidden ** -0.5 * 4).to(DEVICE, dtype)
    b = torch.randn(vocab, generator=g).to(DEVICE, dtype) if bias else None
    return x, w, b


def _flce_both(x, w, b, t, which=(True, True, True), **kw):
    """(loss, grads) of the Triton op and of the native reference, each from its own leaf copies."""
    out = []
    for fn in (tri.fused_linear_cross_entropy, native.fused_linear_cross_entropy):
        leaves = [None if v is None else v.clone().requires_grad_(need) for v, need in zip((x, w, b), which)]
        loss = fn(leaves[0], leaves[1], t, leaves[2], **kw)
        out.append((loss, leaves))
    (got, lg), (want, lw) = out
    if got.requires_grad:
        weights = _grad_weights(want)
        (got * weights).sum().backward()
        (want * weights).sum().backward()
    return got, want, lg, lw


def _grad_tol(dtype, ref: torch.Tensor, chunks: int = 1) -> dict:
    """Gradients are products of the rounded logits' gradient with x or w (fp32 accumulate);
    the weight's is summed over chunks in its dtype (a rounding a chunk)."""
    if dtype == torch.float32:
        return dict(atol=1e-5 * max(ref.abs().max().item(), 1.0), rtol=1e-4)
    eps = torch.finfo(dtype).eps
    return dict(atol=4 * eps * chunks * max(ref.abs().max().item(), 1e-6), rtol=4 * eps * chunks)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("option", ["plain", "ignore 3", "smoothed, softcapped"])
@pytest.mark.parametrize("bias", [False, True], ids=["no bias", "bias"])
@pytest.mark.parametrize("chunk_size", [None, 3])
def test_fused_linear_cross_entropy_matches_native(chunk_size, bias, option, reduction, dtype):
    rows, hidden, vocab = 7, 24, 45
    x, w, b = _linear_inputs(rows, hidden, vocab, dtype, bias, lead=(2,))
    t = _targets(rows, vocab, OPTIONS[option].get("ignore_index", -100), lead=(2,))
    saved = [v.clone() for v in (x, w, b) if v is not None]
    kw = dict(OPTIONS[option], reduction=reduction, chunk_size=chunk_size)
    got, want, lg, lw = _flce_both(x, w, b, t, **kw)
    assert got.dtype == torch.float32 and got.shape == want.shape == ((2, rows) if reduction == "none" else ())
    loss_tol = dict(atol=1e-5, rtol=1e-5) if dtype == torch.float32 else dict(atol=2e-2, rtol=2e-2)
    assert_close(got, want, **loss_tol, name="loss")
    chunks = 1 if chunk_size is None else -(-2 * rows // chunk_size)
    for name, a, r in zip(("input", "weight", "bias"), lg, lw):
        if r is not None:
            assert a.grad.dtype == dtype
            assert_close(a.grad, r.grad, **_grad_tol(dtype, r.grad, chunks if name != "input" else 1),
                         name=f"{name}'s gradient")
    assert all(torch.equal(v, s) for v, s in zip((v for v in (x, w, b) if v is not None), saved))


@pytest.mark.parametrize("which", [(True, False, False), (False, True, True), (False, False, False)],
                         ids=["input only", "weight and bias only", "none"])
def test_fused_linear_cross_entropy_gradients_wanted(which):
    """Only the gradients autograd asks for (a frozen head, a frozen trunk); none: no graph."""
    x, w, b = _linear_inputs(9, 16, 70, torch.float32, True)
    t = _targets(9, 70)
    got, want, lg, lw = _flce_both(x, w, b, t, which=which, chunk_size=1)
    assert got.requires_grad == any(which)
    assert_close(got, want)
    for a, r, need in zip(lg, lw, which):
        assert (a.grad is None) == (not need)
        if need:
            assert_close(a.grad, r.grad, **_grad_tol(torch.float32, r.grad))


def test_fused_linear_cross_entropy_wide_vocab_and_no_rows():
    """Several column chunks a row; zero rows: the weight's gradient is 0, the mean NaN."""
    x, w, _ = _linear_inputs(3, 8, 9000 if not ON_GPU else 128256, torch.float32, False)
    t = _targets(3, w.shape[0])
    got, want, lg, lw = _flce_both(x, w, None, t, chunk_size=2)
    assert_close(got, want)
    assert_close(lg[1].grad, lw[1].grad, **_grad_tol(torch.float32, lw[1].grad))
    w0 = w.clone().requires_grad_()
    loss = tri.fused_linear_cross_entropy(x[:0], w0, t[:0], reduction="sum")
    loss.backward()
    assert loss.item() == 0 and (w0.grad == 0).all()


def test_fused_linear_cross_entropy_gradient_weight_one_and_three():
    """The loss's gradient of exactly 1 (no pass over the gradients) and of 3 (scaled)."""
    x, w, _ = _linear_inputs(6, 16, 50, torch.float32, False)
    t = _targets(6, 50)
    grads = []
    for factor in (1.0, 3.0):
        xs, ws = x.clone().requires_grad_(), w.clone().requires_grad_()
        (tri.fused_linear_cross_entropy(xs, ws, t, chunk_size=4) * factor).backward()
        grads.append((xs.grad, ws.grad))
    xr, wr = x.clone().requires_grad_(), w.clone().requires_grad_()
    native.fused_linear_cross_entropy(xr, wr, t).backward()
    assert_close(grads[0][0], xr.grad, **_grad_tol(torch.float32, xr.grad))
    assert_close(grads[1][0], 3 * xr.grad, **_grad_tol(torch.float32, xr.grad))
    assert_close(grads[1][1], 3 * wr.grad, **_grad_tol(torch.float32, wr.grad))


# ---------------------------------------------------------------------------
# arguments


@pytest.mark.parametrize("call, error, match", [
    (lambda x, t, w: tri.cross_entropy(x.int(), t), TypeError, "cross_entropy: logits must be"),
    (lambda x, t, w: tri.cross_entropy(x, t.float()), TypeError, "cross_entropy: target must be int64 or int32"),
    (lambda x, t, w: tri.cross_entropy(x, t[:3]), ValueError, "cross_entropy: target must have the shape of logits"),
    (lambda x, t, w: tri.cross_entropy(x.t(), t), ValueError, "cross_entropy: logits must have unit stride"),
    (lambda x, t, w: tri.cross_entropy(x, t, reduction="avg"), ValueError, "cross_entropy: reduction must be"),
    (lambda x, t, w: tri.cross_entropy(x, t, label_smoothing=1.5), ValueError, r"label_smoothing must be in \[0, 1\]"),
    (lambda x, t, w: tri.cross_entropy(x, t, softcap=0.0), ValueError, "cross_entropy: softcap must be positive"),
    (lambda x, t, w: tri.cross_entropy(x, t, ignore_index=1.5), TypeError, "cross_entropy: ignore_index must be"),
    (lambda x, t, w: tri.cross_entropy(x[0, 0], t), ValueError, "cross_entropy: logits must have at least 1 dim"),
    (lambda x, t, w: tri.fused_linear_cross_entropy(x, w.t(), t), ValueError,
     r"fused_linear_cross_entropy: weight must be \(V, 8\)"),
    (lambda x, t, w: tri.fused_linear_cross_entropy(x, w.half(), t), TypeError,
     "fused_linear_cross_entropy: weight must have input's dtype"),
    (lambda x, t, w: tri.fused_linear_cross_entropy(x, w, t, torch.zeros(3, device=DEVICE)), ValueError,
     r"fused_linear_cross_entropy: bias must be \(20,\)"),
    (lambda x, t, w: tri.fused_linear_cross_entropy(x, w, t, chunk_size=0), ValueError,
     "fused_linear_cross_entropy: chunk_size must be >= 1"),
    (lambda x, t, w: tri.fused_linear_cross_entropy(x, w[:0], t), ValueError,
     "fused_linear_cross_entropy: weight must have at least one row"),
], ids=lambda v: v if isinstance(v, str) else "")
def test_bad_arguments_raise(call, error, match):
    x = torch.randn(5, 8, device=DEVICE)
    t = _targets(5, 8)
    w = torch.randn(20, 8, device=DEVICE)
    with pytest.raises(error, match=match):
        call(x, t, w)


def test_fused_linear_cross_entropy_gradients_handed_over(monkeypatch):
    """The gradients computed in the forward become the parameters' .grad without a copy
    (a head's weight gradient is as large as the weight); a second backward of them
    (retain_graph) raises, "none" recomputes and gives the same gradients again."""
    made = []  # the data pointers of the gradients each call computed (a reference would be a second owner)
    chunks = tri._linear_chunks

    def spy(*args, **kwargs):
        grads = chunks(*args, **kwargs)
        made.append([None if g is None else g.data_ptr() for g in grads])
        return grads

    monkeypatch.setattr(tri, "_linear_chunks", spy)
    x, w, _ = _linear_inputs(6, 8, 30, torch.float32, False)
    t = _targets(6, 30)
    x.requires_grad_()
    w.requires_grad_()
    tri.fused_linear_cross_entropy(x, w, t, chunk_size=4).backward()
    assert (x.grad.data_ptr(), w.grad.data_ptr()) == tuple(made[0][:2])
    loss = tri.fused_linear_cross_entropy(x, w, t, chunk_size=4)
    loss.backward(retain_graph=True)
    with pytest.raises(RuntimeError, match="fused_linear_cross_entropy: its backward .* runs once"):
        loss.backward()
    w.grad = x.grad = None
    rows = tri.fused_linear_cross_entropy(x, w, t, reduction="none", chunk_size=4)
    grads = [torch.autograd.grad(rows.sum(), (x, w), retain_graph=True) for _ in range(2)]
    assert all(torch.equal(a, b) for a, b in zip(*grads))


@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("op", ["cross_entropy", "fused_linear_cross_entropy"])
def test_compiles_whole_with_gradients(op, reduction, monkeypatch):
    """torch.compile(fullgraph=True) of the loss and its backward: the eager gradients (fp32
    logits: a loss returned as an alias of its own tensor got a zero gradient under inductor)."""
    monkeypatch.undo()  # no NaN-filled allocations: AOTAutograd traces the backward (with its fills) into a graph
    x, w, _ = _linear_inputs(6, 8, 30, torch.float32, False)
    t = _targets(6, 30)
    g = torch.rand(6, device=DEVICE) + 0.5 if reduction == "none" else torch.tensor(1.5, device=DEVICE)
    fn = (lambda x, w: tri.cross_entropy(x @ w.t(), t, reduction=reduction)) if op == "cross_entropy" else \
        (lambda x, w: tri.fused_linear_cross_entropy(x, w, t, reduction=reduction, chunk_size=4))
    torch._dynamo.reset()
    compiled = torch.compile(fn, backend="inductor" if ON_GPU else "aot_eager", fullgraph=True)
    results = []
    for f in (fn, compiled):
        a, b = x.clone().requires_grad_(), w.clone().requires_grad_()
        loss = f(a, b)
        loss.backward(g)
        results.append((loss.detach(), a.grad, b.grad))
    for got, want in zip(results[1], results[0]):
        assert_close(got, want, atol=1e-6, rtol=1e-5)
