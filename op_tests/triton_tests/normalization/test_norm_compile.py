"""The normalization ops under torch.compile(fullgraph=True): registered custom ops
(opcheck), whole graphs with no breaks, the same results as eager, in-place
semantics kept, gradients through the compiled graph."""

import pytest
import torch
from torch.library import opcheck

from aiter_lite.ops.triton.normalization import layernorm as tri_ln
from aiter_lite.ops.triton.normalization import rmsnorm as tri_rms
from op_tests.utils import DEVICE, ON_GPU, assert_close, make_rows
from op_tests.utils.norm import weights

# On a GPU, inductor compiles the code around the ops; on the CPU (the interpreter)
# aot_eager traces the same graph without generating code.
BACKEND = "inductor" if ON_GPU else "aot_eager"
N = 96


def _compiled(fn):
    torch._dynamo.reset()
    return torch.compile(fn, backend=BACKEND, fullgraph=True)


@pytest.mark.parametrize("case", ["rms", "rms_residual_stats", "ln_stats", "ln_x_bias"])
def test_opcheck_norm_fwd(case):
    m = 5
    x, y = make_rows(m, N, torch.float32), torch.empty(m, N, device=DEVICE)
    w, b = weights(N, torch.float32, bias=True)
    rstd = torch.empty(m, device=DEVICE)
    mean = torch.empty(m, device=DEVICE)
    r, r_out = make_rows(m, N, torch.float32), torch.empty(m, N, device=DEVICE)
    args = {
        "rms": (x, y, w, None, 1e-6, True, None, None, None, 0.0, None, None),
        "rms_residual_stats": (x, y, w, None, 1e-6, True, r, r_out, None, 1.0, None, rstd),
        "ln_stats": (x, y, w, b, 1e-5, False, None, None, None, 0.0, mean, rstd),
        "ln_x_bias": (x, y, None, b, 1e-5, False, r, r_out, w, 0.0, None, None),
    }[case]
    opcheck(torch.ops.aiter_lite.launch_norm_fwd, args)


@pytest.mark.parametrize("is_rms, has_weight", [(True, True), (False, True), (True, False)])
def test_opcheck_norm_bwd(is_rms, has_weight):
    # (no weight: neither sum is asked for)
    m = 6
    x, w = make_rows(m, N, torch.float32), weights(N, torch.float32) if has_weight else None
    y, rstd, mean = torch.empty_like(x), torch.empty(m, device=DEVICE), torch.empty(m, device=DEVICE)
    torch.ops.aiter_lite.launch_norm_fwd(x, y, w, None, 1e-6, is_rms, None, None, None, 0.0, None if is_rms else mean,
                                         rstd)
    dy, dx = torch.randn_like(x), torch.empty_like(x)
    dw = torch.empty(N, device=DEVICE) if has_weight else None
    db = torch.empty(N, device=DEVICE) if has_weight and not is_rms else None
    opcheck(torch.ops.aiter_lite.launch_norm_bwd, (dy, x, w, None if is_rms else mean, rstd, dx, dw, db, is_rms, 0.0))


def test_compiled_rms_norm_and_fused_add():
    x, r, w = make_rows(7, N, torch.bfloat16), make_rows(7, N, torch.bfloat16), weights(N, torch.bfloat16)

    def block(x, r, w):
        h = tri_rms.rms_norm(x, w, 1e-6)
        x2, r2 = h * 2, r.clone()
        tri_rms.fused_add_rms_norm(x2, r2, w, 1e-6, 1.0)  # in place: x2 the output, r2 the sum
        out, r_out = torch.empty_like(x), torch.empty_like(x)
        tri_rms.rmsnorm2d_fwd_with_add(out, x2, r2, r_out, w, 1e-6)
        return h, x2, r2, out, r_out

    for got, want, name in zip(_compiled(block)(x, r, w), block(x, r, w), ["h", "x2", "r2", "out", "r_out"]):
        assert_close(got, want, atol=0, rtol=0, name=name)


def test_compiled_layer_norm_with_add():
    x, r = make_rows(5, N, torch.float32), make_rows(5, N, torch.float32)
    w, b = weights(N, torch.float32, bias=True)

    def block(x, r):
        out, r_out = torch.empty_like(x), torch.empty_like(x)
        tri_ln.layernorm2d_fwd_with_add(out, x, r, r_out, w, b, 1e-5)
        return tri_ln.layer_norm(out, w, None, 1e-5), r_out

    for got, want in zip(_compiled(block)(x, r), block(x, r)):
        assert_close(got, want, atol=0, rtol=0)


@pytest.mark.parametrize("kind", ["rms", "ln", "rms_no_weight"])
def test_compiled_backward(kind):
    x = make_rows(9, N, torch.float32, scale=2.0)
    w, b = weights(N, torch.float32, bias=True)
    dy = torch.randn_like(x)

    def loss(x, w, b):
        if kind == "rms_no_weight":
            y = tri_rms.rms_norm(x, None, 1e-6)
        else:
            y = tri_rms.rms_norm(x, w, 1e-6) if kind == "rms" else tri_ln.layer_norm(x, w, b, 1e-5)
        return (y * dy).sum()

    n_grads = {"rms": 2, "ln": 3, "rms_no_weight": 1}[kind]
    grads = []
    for fn in (loss, _compiled(loss)):
        leaves = [t.detach().clone().requires_grad_(i < n_grads) for i, t in enumerate((x, w, b))]
        fn(*leaves).backward()
        grads.append([t.grad for t in leaves[:n_grads]])
    for got, want, name in zip(grads[1], grads[0], ["dx", "dweight", "dbias"]):
        assert_close(got, want, atol=1e-5, name=name)
