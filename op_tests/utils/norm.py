"""Shared cases and checks for the RMSNorm and LayerNorm tests."""

import torch

import aiter_lite.ops.triton.normalization.norm as norm_mod
from aiter_lite.ops.native.normalization import layernorm as ref_ln
from aiter_lite.ops.native.normalization import rmsnorm as ref_rms
from aiter_lite.ops.triton.normalization import layernorm as tri_ln
from aiter_lite.ops.triton.normalization import rmsnorm as tri_rms
from aiter_lite.ops.triton.normalization.norm import NormBwdLaunchConfig, NormLaunchConfig
from op_tests.utils.checks import assert_close, tolerance
from op_tests.utils.device import DEVICE, by_device

# (M, N). Every regime: several rows per program (short rows), a whole row in
# registers (forward up to 32768, backward up to 16384), looped rows beyond;
# M = 0 (empty batch) and 1 (decode).
SHAPES = by_device(
    cpu=[(0, 64), (1, 1), (7, 1), (1000, 64), (7, 127), (7, 768), (33, 769), (3, 4096), (2, 5120), (2, 8192),
         (1, 65537)],
    gpu=[(m, n) for m in (0, 1, 7, 1000) for n in (1, 64, 127, 768, 769, 4096, 5120, 8192, 65537)]
    + [(1, 131072), (1000, 131072), (1, 262144), (300, 262144), (100000, 128)]
    # decode rows with a residual (32-warp tiles); compile-time widths, chunks narrowed to divide 12288
    + [(16, 7168), (16, 8192), (300, 12288), (200, 16384)],
)
BWD_SHAPES = by_device(
    cpu=[(0, 64), (1, 1), (1000, 64), (7, 127), (33, 769), (3, 4096), (2, 16385)],
    gpu=[(0, 64), (1, 1), (1000, 64), (7, 127), (33, 769), (1000, 4096), (2048, 5120), (7, 8192), (64, 8193), (64, 16385),
         (100, 65537), (3, 262144), (20000, 128)],
)


def weights(n, dtype, *, bias=False):
    """Random weight (and bias) near 1 (and 0), fresh per call."""
    w = (torch.randn(n, device=DEVICE) * 0.2 + 1).to(dtype)
    return (w, (torch.randn(n, device=DEVICE) * 0.2).to(dtype)) if bias else w


def ref_grads(kind, x, w, b, dy, eps, **kw):
    """Gradients through the fp32 native reference (x, w, b, dy upcast)."""
    xs = x.detach().float().requires_grad_()
    ws = None if w is None else w.detach().float().requires_grad_()
    bs = None if b is None else b.detach().float().requires_grad_()
    if kind == "rms":
        y = ref_rms.rms_norm(xs, ws, eps, **kw)
    else:
        y = ref_ln.layer_norm(xs, ws, bs, eps, **kw)
    leaves = [t for t in (xs, ws, bs) if t is not None]
    return torch.autograd.grad(y, leaves, dy.float())


def tri_grads(kind, x, w, b, dy, eps, **kw):
    xs = x.detach().requires_grad_()
    ws = None if w is None else w.detach().requires_grad_()
    bs = None if b is None else b.detach().requires_grad_()
    y = tri_rms.rms_norm(xs, ws, eps, **kw) if kind == "rms" else tri_ln.layer_norm(xs, ws, bs, eps, **kw)
    assert y.dtype == x.dtype and y.shape == x.shape
    leaves = [t for t in (xs, ws, bs) if t is not None]
    return torch.autograd.grad(y, leaves, dy)


def check_backward(kind, x, w, b, eps=1e-5, *, dy=None, **kw):
    """dx, dweight, dbias against autograd through the fp32 reference; tolerances grow with reductions."""
    m, n = x.reshape(-1, x.shape[-1]).shape if x.dim() else (1, 1)
    dy = torch.randn(x.shape, device=x.device).to(x.dtype) if dy is None else dy
    got = tri_grads(kind, x, w, b, dy, eps, **kw)
    want = ref_grads(kind, x, w, b, dy, eps, **kw)
    names = ["dx", "dweight", "dbias"][: len(got)] if w is not None else ["dx", "dbias"][: len(got)]
    for name, g, e in zip(names, got, want):
        length = n if name == "dx" else max(m, 1)
        atol, rtol = tolerance(g.dtype, length)
        # Reduced gradients are sums of `length` terms of size ~1: scale atol with their magnitude.
        scale = max(1.0, float(e.abs().max())) if e.numel() else 1.0
        assert_close(g, e, atol=atol * scale, rtol=rtol, name=f"{kind} {name} {tuple(x.shape)}")
    return got


def pin_config(monkeypatch, fwd=None, bwd=None):
    """Force a launch config (e.g. a looped row on a small N, so the CPU run covers that regime)."""
    if fwd is not None:
        monkeypatch.setattr(norm_mod, "norm_launch_config", lambda *a, **k: fwd)
    if bwd is not None:
        monkeypatch.setattr(norm_mod, "norm_bwd_launch_config", lambda *a, **k: bwd)


# Pinned small configs, so the interpreter covers every code path of each regime cheaply.
LOOPED_FWD = {
    "looped": NormLaunchConfig(1, 64, 4, True),
    "looped_prefetch": NormLaunchConfig(1, 64, 4, True, PREFETCH=True),
    "looped_static": NormLaunchConfig(1, 256, 4, True, STATIC=True),  # the width compiled in, a partial last chunk
    "split": NormLaunchConfig(1, 256, 4, False, SPLIT=True),  # 1000 = 3 x 256 + a 232-wide segment
    "split_narrow": NormLaunchConfig(1, 64, 4, False, SPLIT=True),  # 129 = 2 x 64 + one column
}
BWD_REGIMES = {
    "looped": (NormBwdLaunchConfig(NormLaunchConfig(2, 64, 4, True), 3), 300),  # (config, N)
    "multirow": (NormBwdLaunchConfig(NormLaunchConfig(4, 128, 4, False), 5), 100),
    "multirow_prefetch": (NormBwdLaunchConfig(NormLaunchConfig(4, 128, 4, False, PREFETCH=True), 5), 100),
    "row_prefetch": (NormBwdLaunchConfig(NormLaunchConfig(1, 128, 4, False, PREFETCH=True), 4), 127),
}
