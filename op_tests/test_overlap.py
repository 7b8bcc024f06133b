"""Outputs sharing memory: ``utils.overlap`` against a byte-by-byte count, and the
checks every public op runs on what it writes."""

import itertools
import random

import pytest
import torch

from aiter_lite.ops.triton.activation import silu_and_mul
from aiter_lite.ops.triton.normalization.rmsnorm import fused_add_rms_norm, rmsnorm2d_fwd_with_add
from aiter_lite.ops.native.normalization.rmsnorm import rmsnorm2d_fwd_with_add as native_with_add
from aiter_lite.utils.overlap import overlap
from op_tests.utils import DEVICE


def _bytes(t: torch.Tensor) -> set:
    out = set()
    for idx in itertools.product(*[range(n) for n in t.shape]):
        o = t.data_ptr() + sum(i * s for i, s in zip(idx, t.stride())) * t.element_size()
        out.update(range(o, o + t.element_size()))
    return out


def _random_view(rng: random.Random, buf: torch.Tensor) -> torch.Tensor:
    dims = rng.randint(1, 3)
    shape = [rng.randint(1, 5) for _ in range(dims)]
    strides = [rng.choice([0, 1, 2, 3, 5, 8, 16, 40]) for _ in range(dims)]
    base = buf if rng.random() < 0.5 else buf.view(torch.float16)
    return base.as_strided(shape, strides, rng.randint(0, 200))


def test_overlap_matches_a_byte_count():
    rng = random.Random(0)
    buf = torch.zeros(4096)
    decided = 0
    for _ in range(1500):
        a = _random_view(rng, buf)
        b = _random_view(rng, buf)
        if rng.random() < 0.3:  # same strides, shifted: views of one buffer such as q and k
            b = a.as_strided(a.shape, a.stride(), a.storage_offset() + rng.randint(0, 30))
        got = overlap(a, b)
        if got is not None:
            decided += 1
            assert got == bool(_bytes(a) & _bytes(b)), (a.shape, a.stride(), b.shape, b.stride())
    assert decided > 1200


def test_q_and_k_of_one_qkv_buffer_do_not_overlap():
    qkv = torch.randn(7, (8 + 2 * 2) * 16)
    q, k, v = qkv.split([8 * 16, 2 * 16, 2 * 16], dim=-1)
    q, k = q.view(7, 8, 16), k.view(7, 2, 16)
    assert overlap(q, k) is False and overlap(k, v.view(7, 2, 16)) is False
    assert overlap(q, qkv) is True and overlap(q[:, :1], q[:, 1:]) is False


def test_expanded_output_is_refused():
    x = torch.randn(5, 16, device=DEVICE)
    out = torch.empty(1, 8, device=DEVICE).expand(5, 8)
    with pytest.raises(ValueError, match=r"silu_and_mul: out has elements that share memory"):
        silu_and_mul(out, x)


def test_output_over_an_input_is_refused():
    x = torch.randn(5, 16, device=DEVICE)
    with pytest.raises(ValueError, match=r"silu_and_mul: out overlaps input in memory"):
        silu_and_mul(x[:, 4:12], x)
    with pytest.raises(ValueError, match=r"fused_add_rms_norm: input overlaps residual"):
        fused_add_rms_norm(x, x, torch.randn(16, device=DEVICE), 1e-6)


def test_declared_aliases_work_and_partial_ones_are_refused():
    x, r = (torch.randn(5, 32, device=DEVICE) for _ in range(2))
    w = torch.randn(32, device=DEVICE)
    want_out, want_res = torch.empty_like(x), torch.empty_like(x)
    native_with_add(want_out, x.clone(), r.clone(), want_res, w, 1e-6)
    x2, r2 = x.clone(), r.clone()
    rmsnorm2d_fwd_with_add(x2, x2, r2, r2, w, 1e-6)  # out=input, residual_out=residual_in
    torch.testing.assert_close(x2, want_out, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(r2, want_res, rtol=1e-5, atol=1e-5)
    big = torch.randn(6, 32, device=DEVICE)
    with pytest.raises(ValueError, match=r"rmsnorm2d_fwd_with_add: out overlaps input .* out may be input itself"):
        rmsnorm2d_fwd_with_add(big[1:], big[:5], r.clone(), torch.empty_like(x), w, 1e-6)
    with pytest.raises(ValueError, match=r"rmsnorm2d_fwd_with_add: out overlaps weight"):
        rmsnorm2d_fwd_with_add(big[:5], x, r.clone(), torch.empty_like(x), big[4], 1e-6)
    rmsnorm2d_fwd_with_add(big[:5], x, r.clone(), torch.empty_like(x), big[5], 1e-6)  # the next row: apart
