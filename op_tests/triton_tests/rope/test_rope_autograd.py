"""Every RoPE op differentiable in x (and y) while autograd records: the gradient of each
Triton op (forward, in-place, backward forms) equals autograd's through the native op; the
in-place forms record their writes; a table that requires grad is refused (its gradient is
the RoPE / RoPECached / RoPETHD / RoPE2D classes'); RotaryEmbedding trains alike on both
backends."""

import gc
import inspect
import weakref

import pytest
import torch

from aiter_lite.layers import RotaryEmbedding
from aiter_lite.ops.native.rope import rope as ref
from aiter_lite.ops.triton.rope import rope
from aiter_lite.utils.registry import PUBLIC_OPS
from op_benchmarks.utils.op_args import TINY, op_args
from op_tests.utils import DEVICE, assert_close

ROPE_OPS = sorted(n for n, op in PUBLIC_OPS.items() if op.module.endswith("rope.rope"))


def _grads(fn, args, names, inplace):
    """(outputs, gradients of x and y) of ``fn`` on fresh leaves of args' x / y."""
    args = list(args)
    leaves = {}
    for i, n in enumerate(names[:len(args)]):
        if n in ("x", "y") and isinstance(args[i], torch.Tensor):
            leaves[n] = args[i].detach().clone().requires_grad_()
            args[i] = leaves[n] * 1.0 if inplace else leaves[n]  # a non-leaf, as an activation, for in-place
    out = fn(*args)
    outs = out if isinstance(out, tuple) else (out,)
    torch.manual_seed(1)
    torch.autograd.backward(list(outs), [torch.randn_like(o) for o in outs])
    return outs, {n: t.grad for n, t in leaves.items()}


@pytest.mark.parametrize("name", ROPE_OPS)
def test_gradient_matches_native(name):
    op = PUBLIC_OPS[name]
    names = list(inspect.signature(op.python).parameters)
    args = op_args(name, TINY, DEVICE, torch.float32)
    inplace = name.endswith("_inplace")
    outs, grads = _grads(op.fn, args, names, inplace)
    want_outs, want = _grads(getattr(ref, name), args, names, inplace)
    assert grads and all(g is not None for g in grads.values())
    for o, w in zip(outs, want_outs):
        assert_close(o, w, name=f"{name} output")
    for n in grads:
        assert_close(grads[n], want[n], name=f"{name} d{n}")


@pytest.mark.parametrize("name", ["rope_cached_thd_positions_2c_fwd", "rope_thd_fwd"])
def test_tables_and_positions_released_by_the_backward(name):
    """What the backward reads besides the gradients (tables, positions, cu_seqlens) is held
    until the backward has run, not as long as the graph: a model's whole backward would
    otherwise keep every layer's tables."""
    op = PUBLIC_OPS[name]
    names = list(inspect.signature(op.python).parameters)
    args = [a.clone() if isinstance(a, torch.Tensor) else a for a in op_args(name, TINY, DEVICE, torch.float32)]
    held = {n: weakref.ref(a) for n, a in zip(names, args) if isinstance(a, torch.Tensor) and n not in ("x", "y")}
    assert held
    for i, n in enumerate(names[:len(args)]):
        if n in ("x", "y"):
            args[i] = args[i].requires_grad_()
    out = op.fn(*args)
    outs = out if isinstance(out, tuple) else (out,)
    del args
    gc.collect()
    assert all(r() is not None for r in held.values()), "released before the backward"
    torch.autograd.backward(list(outs), [torch.ones_like(o) for o in outs])
    gc.collect()
    alive = [n for n, r in held.items() if r() is not None]
    assert not alive, f"{name}: {alive} still held by the graph after its backward"
    assert all(o.grad_fn is not None for o in outs)  # the graph itself is still there


def test_tables_that_require_grad_are_refused():
    args = list(op_args("rope_cached_positions_fwd", TINY, DEVICE, torch.float32))
    args[1] = args[1].detach().clone().requires_grad_()
    with pytest.raises(ValueError, match="rope_cached_positions_fwd: cos requires grad; .* RoPECached"):
        rope.rope_cached_positions_fwd(*args)


def test_rotary_embedding_trains_alike_on_both_backends():
    t, qh, kh, d = 7, 4, 2, 32
    positions = torch.randint(0, 64, (t,), device=DEVICE)
    q0, k0 = torch.randn(t, qh * d, device=DEVICE), torch.randn(t, kh * d, device=DEVICE)
    dq, dk = torch.randn(t, qh * d, device=DEVICE), torch.randn(t, kh * d, device=DEVICE)
    grads = []
    for backend in ("triton", "native"):
        layer = RotaryEmbedding(d, d, 64, 10000.0, True, torch.float32, backend=backend).to(DEVICE)
        q, k = q0.clone().requires_grad_(), k0.clone().requires_grad_()
        qo, ko = layer(positions, q * 1.0, k * 1.0)
        torch.autograd.backward([qo, ko], [dq, dk])
        grads.append((q.grad, k.grad))
    assert_close(grads[0][0], grads[1][0], name="dquery")
    assert_close(grads[0][1], grads[1][1], name="dkey")
