"""Gradients of softmax / log_softmax (aiter_lite.ops.triton.softmax, the backward kernel)
against autograd through the fp32 native reference: every dtype, odd widths, M = 0 and 1,
rows in registers, split over programs and looped, strided rows and gradients, any dim, 0-d x, edge rows;
gradients reach upstream ops and come through torch.compile; the saved tensor is the output."""

import pytest
import torch

import aiter_lite.ops.triton.softmax as sm_mod
from aiter_lite.ops.native import softmax as native
from aiter_lite.ops.triton import softmax as tri
from aiter_lite.spec.device import INTERPRETER, PROFILES
from aiter_lite.utils.launch import grid_sms
from op_tests.utils import DEVICE, DTYPES, ON_GPU, assert_close, by_device, make_rows
from op_tests.utils.inputs import poison_allocations

OPS = ["softmax", "log_softmax"]
# (rows, width): odd widths in registers; 32768 columns in whole chunks (the backward's
# looped rows where they fill the SMs: 4 do the interpreter's); on the GPU also the widest
# row in registers, split and looped rows
SHAPES = by_device(
    cpu=[(0, 37), (1, 1), (1, 1000), (5, 3), (7, 37), (3, 1000), (4, 0), (4, 32768)],
    gpu=[(0, 37), (1, 1), (1, 1000), (5, 3), (7, 37), (3, 1000), (4, 0), (300, 4097), (64, 16384), (8, 16385),
         (300, 32768), (4, 131073)],
)
INF, NAN = float("inf"), float("nan")
COMPILE_BACKEND = "inductor" if ON_GPU else "aot_eager"


@pytest.fixture(autouse=True)
def _poisoned_empty(monkeypatch):
    """Every allocation (the gradient included) starts NaN: an element left unwritten fails."""
    poison_allocations(monkeypatch)


def _tol(op: str, x: torch.Tensor, dy: torch.Tensor, dim: int) -> dict:
    """The kernel reads the forward's output and dy rounded to x's dtype and rounds the
    gradient once: a few units of the dtype relative to each element, and to the largest
    of the terms the gradient subtracts (y * dy - y * sum(dy * y), dy - exp(y) * sum(dy):
    their difference may cancel)."""
    eps = 1e-5 if x.dtype == torch.float32 else 2 * torch.finfo(x.dtype).eps
    y, d = getattr(torch, op)(x.double(), dim), dy.double()
    if op == "softmax":
        terms = y * (d.abs() + (d * y).sum(dim, keepdim=True).abs())
    else:
        terms = d.abs() + y.exp() * d.sum(dim, keepdim=True).abs()
    scale = float(terms.nan_to_num(0.0, 0.0, 0.0).max()) if terms.numel() else 0.0
    return dict(atol=eps * scale + 1e-7, rtol=eps)


def _grad(fn, x: torch.Tensor, dy: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """x's gradient through ``fn(x, dim)`` for the output gradient dy (autograd.grad)."""
    x = x.detach().requires_grad_()
    y = fn(x, dim)
    assert y.grad_fn is not None
    (dx,) = torch.autograd.grad(y, x, dy)
    return dx


def _check(op: str, x: torch.Tensor, dy: torch.Tensor | None = None, dim: int = -1) -> torch.Tensor:
    """The Triton gradient against the native reference's in fp32; returns the Triton one."""
    dy = torch.randn(x.shape, device=DEVICE).to(x.dtype) if dy is None else dy
    got = _grad(getattr(tri, op), x, dy, dim)
    want = _grad(getattr(native, op), x.float(), dy.float(), dim)
    assert got.dtype == x.dtype and got.shape == x.shape
    assert_close(got, want, dtype=x.dtype, name=f"d{op} {tuple(x.shape)} dim={dim}",
                 **_tol(op, x, dy, dim))
    return got


@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("op", OPS)
def test_backward(op, dtype, shape):
    _check(op, make_rows(*shape, dtype, scale=2.0))


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("cfg", [sm_mod.SoftmaxLaunchConfig(1, 64, 4, True),
                                 sm_mod.SoftmaxLaunchConfig(1, 64, 4, False, SPLIT=True),
                                 sm_mod.SoftmaxLaunchConfig(4, 512, 4, False)], ids=["looped", "split", "registers"])
@pytest.mark.parametrize("n", [300, 320], ids=["last_part", "whole_chunks"])
def test_regimes_and_edge_rows(op, cfg, n, monkeypatch):
    """64-column chunks and segments stand for rows wider than _MAX_ROW_IN_REGS; edge rows
    give torch's gradient: a NaN row of the forward a NaN row, -inf elements 0 (log: dy)."""
    monkeypatch.setattr(sm_mod, "softmax_bwd_launch_config", lambda *a, **k: cfg)
    x = torch.randn(7, n, device=DEVICE) * 4
    x[1] = -INF                      # forward all NaN
    x[2, :200] = -INF                # a leading run of -inf (whole chunks)
    x[3, 250] = NAN                  # forward all NaN
    x[4, 10] = INF                   # forward all NaN
    x[5, ::3] = -INF
    dy = torch.randn(7, n, device=DEVICE)
    got = _check(op, x, dy)
    want = _grad(getattr(torch, op), x, dy)
    assert torch.equal(got.isnan(), want.isnan()) and got[[1, 3, 4]].isnan().all()


@pytest.mark.parametrize("op", OPS)
def test_strided_rows_and_gradients(op):
    x = make_rows(9, 1000, torch.bfloat16, strided=True, lead=(2,))       # a column slice of a wider tensor
    _check(op, x, make_rows(9, 1000, torch.bfloat16, strided=True, lead=(2,)))
    x = make_rows(6, 40, torch.float32)
    _check(op, x, torch.randn(40, 6, device=DEVICE).t())                  # no unit last stride
    _check(op, x, torch.randn(1, 40, device=DEVICE).expand(6, 40))        # a zero row stride
    x = make_rows(2, 40, torch.float32, lead=(3,))
    _check(op, x, torch.randn(3, 1, 40, device=DEVICE).expand(3, 2, 40))  # rows of no one stride: gathered


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16], ids=str)
@pytest.mark.parametrize("op", OPS)
def test_any_dim_and_rank(op, dtype):
    x = make_rows(5, 6, dtype, lead=(4,))                                 # (4, 5, 6)
    for dim in (0, 1, -1):
        _check(op, x, dim=dim)
    _check(op, x.transpose(0, 2), dim=0)                                  # x itself non-contiguous
    _check(op, torch.randn(0, 3, 4, device=DEVICE).to(dtype), dim=0)
    scalar = torch.tensor(1.5, device=DEVICE, dtype=dtype)                # 0-d: the gradient is 0
    got = _check(op, scalar, torch.tensor(0.7, device=DEVICE, dtype=dtype), dim=0)
    assert got.shape == () and float(got) == 0.0


def test_gradients_flow_to_upstream_ops():
    a = torch.randn(5, 33, device=DEVICE, requires_grad=True)
    w = torch.randn(33, device=DEVICE, requires_grad=True)
    dy = torch.randn(5, 33, device=DEVICE)
    grads = []
    for mod in (tri, native):
        h = a * w + 1.0
        y = mod.log_softmax(mod.softmax(h, 0), -1)
        grads.append(torch.autograd.grad(y, (a, w), dy))
    for got, want, name in zip(grads[0], grads[1], ("a", "w")):
        assert_close(got, want, name=f"d{name}", atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("op", OPS)
def test_saves_the_output_not_the_input(op):
    x = make_rows(3, 20, torch.float32).requires_grad_()
    packed = []

    def pack(t):
        packed.append(t)
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        y = getattr(tri, op)(x)
    assert len(packed) == 1 and packed[0].data_ptr() == y.data_ptr()
    assert type(y.grad_fn).__name__ == "_SoftmaxFunctionBackward"


def test_no_autograd_node_without_grad():
    """Under no_grad, or for inputs that need none, the forward alone: no node."""
    x = make_rows(4, 64, torch.float32)
    assert tri.softmax(x).grad_fn is None
    with torch.no_grad():
        assert tri.log_softmax(x.requires_grad_(), 0).grad_fn is None


@pytest.mark.parametrize("op", OPS)
def test_compiled_backward(op, monkeypatch):
    monkeypatch.undo()  # no NaN-filled allocations: AOTAutograd traces the backward (with its fills) into a graph
    x = make_rows(6, 50, torch.bfloat16, lead=(2,))
    dy = make_rows(6, 50, torch.bfloat16, lead=(2,))

    def block(x):
        return getattr(tri, op)(x * 2, 1) * 3

    torch._dynamo.reset()
    compiled = torch.compile(block, backend=COMPILE_BACKEND, fullgraph=True)
    got = _grad(lambda x, dim: compiled(x), x, dy)
    assert_close(got, _grad(lambda x, dim: block(x), x, dy), atol=0, rtol=0, name=f"compiled d{op}")


def test_opcheck_backward_launch():
    from torch.library import opcheck

    y = tri.softmax(make_rows(5, 40, torch.float32))
    dy = torch.randn_like(y)
    opcheck(torch.ops.aiter_lite.launch_softmax_bwd, (y, dy, torch.zeros_like(y), False))


@pytest.mark.parametrize("profile", [INTERPRETER, *PROFILES.values()], ids=lambda p: p.name)
@pytest.mark.parametrize("n_rows", [1, 300, 4096])
@pytest.mark.parametrize("n_cols", [1, 100, 16384, 16385, 32767, 32768, 65536, 262144, 1 << 20])
def test_launch_config(n_cols, n_rows, profile):
    """The forward's tiles in registers up to _MAX_ROW_IN_REGS columns; wider rows split
    over programs while a row's segments fit half the SMs, looped one a program beyond
    (the backward has no looped segments); rows of _BWD_LOOP_COLS columns looped in whole
    16384-wide chunks where they are at least as many as the SMs."""
    cfg = sm_mod.softmax_bwd_launch_config(n_rows, n_cols, profile)
    if n_cols == 32768 and n_rows >= grid_sms(profile):
        assert cfg == sm_mod.SoftmaxLaunchConfig(1, 16384, min(32, profile.max_warps), True)
    elif n_cols > sm_mod._MAX_ROW_IN_REGS:
        assert cfg.SPLIT or cfg == sm_mod._BWD_WIDE
        assert not cfg.SEGMENT
        if cfg.SPLIT:
            assert -(-n_cols // cfg.BLOCK_N) <= profile.sms // 2
    else:
        assert cfg == sm_mod.softmax_launch_config(n_rows, n_cols, profile)
        assert not (cfg.SPLIT or cfg.LOOPED)
