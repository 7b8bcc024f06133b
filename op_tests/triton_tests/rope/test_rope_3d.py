"""rope_fwd_3d (aiter_lite.ops.triton.rope.rope): Wan's 3-D RoPE of video tokens under
sequence parallelism, against the fp32 reference and against Wan's ``rope_apply`` written
as the bench has it (op_benchmarks.utils.rope: per batch entry, complex multiplication in fp64,
padding multiplied by 1).

The output starts as NaN-poisoned memory (the conftest's allocations), so a token the op
does not write (aiter leaves the padding unwritten) fails.
"""

from __future__ import annotations

import pytest
import torch

from aiter_lite.ops.native.rope import rope as native
from aiter_lite.ops.triton.rope import rope as tr
from op_benchmarks.utils.rope import wan_freqs, wan_rope_apply
from op_tests.utils import DEVICE, assert_close, by_device
from op_tests.utils.fusions import assert_bits
from op_tests.utils.inputs import poison_allocations


@pytest.fixture(autouse=True)
def _poison(monkeypatch):
    poison_allocations(monkeypatch)


def _freqs(rows, pairs, dtype=torch.complex128):
    return wan_freqs(rows, pairs, DEVICE, dtype)


CASES = by_device(
    # (B, S, heads, C, grids, sp_size, sp_rank)
    [(1, 24, 2, 16, [(2, 3, 4)], 1, 0), (2, 10, 3, 24, [(2, 2, 3), (1, 3, 3)], 2, 1),
     (2, 7, 1, 128, [(1, 2, 5), (3, 1, 2)], 3, 0), (1, 5, 2, 36, [(1, 2, 2)], 2, 1)],
    [(1, 1560, 12, 128, [(4, 13, 30)], 1, 0), (2, 780, 40, 128, [(4, 13, 30), (2, 13, 30)], 2, 1),
     (1, 391, 5, 96, [(3, 10, 13)], 3, 2), (3, 77, 7, 64, [(1, 7, 11), (2, 5, 7), (1, 1, 1)], 4, 0)],
)


@pytest.mark.parametrize("b,s,n,c,grids,sp_size,sp_rank", CASES)
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_against_wan_and_reference(b, s, n, c, grids, sp_size, sp_rank, dtype):
    x = torch.randn(b, s, n, c, device=DEVICE).to(dtype)
    grid_sizes = torch.tensor(grids, dtype=torch.long)  # on the host, as Wan keeps it
    freqs = _freqs(64, c // 2)
    before = x.clone()
    got = tr.rope_fwd_3d(x, grid_sizes, freqs, sp_size, sp_rank)
    assert got.dtype == torch.float32 and got.shape == x.shape
    ref = native.rope_fwd_3d(x, grid_sizes, freqs, sp_size, sp_rank)
    assert_close(got, ref, name="vs reference", atol=2e-6, rtol=2e-6)
    assert_close(got, wan_rope_apply(x, grid_sizes, freqs, sp_size, sp_rank), name="vs Wan's rope_apply", atol=1e-5,
                 rtol=1e-5)
    assert_bits("x (the input)", x, before)


def test_padding_passes_through():
    """The last rank's tokens past f * h * w are x itself (aiter leaves them unwritten)."""
    x = torch.randn(1, 8, 2, 16, device=DEVICE)
    got = tr.rope_fwd_3d(x, torch.tensor([[1, 2, 5]]), _freqs(16, 8), 2, 1)  # tokens 8..15 of 10
    assert_bits("padding", got[0, 2:], x[0, 2:])
    assert not torch.equal(got[0, :2], x[0, :2])


def test_complex64_freqs_and_strided_x():
    big = torch.randn(2, 9, 4, 40, device=DEVICE)
    x = big[:, :, 1:3, 4:36]  # heads and channels a view of a larger tensor
    freqs = _freqs(32, 16, torch.complex64)
    grid = torch.tensor([[1, 3, 3], [2, 2, 2]], device=DEVICE)
    assert_close(tr.rope_fwd_3d(x, grid, freqs, 1, 0), native.rope_fwd_3d(x, grid, freqs, 1, 0), atol=2e-6,
                 rtol=2e-6)


def test_row_past_the_table_is_nan():
    x = torch.randn(1, 6, 1, 12, device=DEVICE)
    got = tr.rope_fwd_3d(x, torch.tensor([[6, 1, 1]]), _freqs(4, 6), 1, 0)  # frames 4, 5 past 4 rows
    assert not got[0, :4].isnan().any()
    assert got[0, 4:, :, :4].isnan().all()  # the frame pairs


def test_gradient_refused():
    x = torch.randn(1, 4, 1, 12, device=DEVICE, requires_grad=True)
    with pytest.raises(ValueError, match="rope_fwd_3d: x requires grad"):
        tr.rope_fwd_3d(x, torch.tensor([[1, 2, 2]]), _freqs(4, 6), 1, 0)


def _bad():
    x = torch.randn(2, 4, 2, 12, device=DEVICE)
    f = _freqs(8, 6)
    g = torch.tensor([[1, 2, 2], [1, 1, 4]])
    return [
        (ValueError, "x", dict(x=x[..., :11])),
        (ValueError, "x", dict(x=x[0])),
        (TypeError, "x", dict(x=x.to(torch.int32))),
        (ValueError, "grid_sizes", dict(grid_sizes=g[:1])),
        (TypeError, "grid_sizes", dict(grid_sizes=g.float())),
        (TypeError, "grid_sizes", dict(grid_sizes=[[1, 2, 2], [1, 1, 4]])),
        (TypeError, "freqs", dict(freqs=f.real)),
        (ValueError, "freqs", dict(freqs=_freqs(8, 5))),
        (ValueError, "sp_rank", dict(sp_rank=2)),
        (ValueError, "sp_size", dict(sp_size=0)),
        (TypeError, "sp_size", dict(sp_size=1.0)),
    ], dict(x=x, grid_sizes=g, freqs=f, sp_size=2, sp_rank=1)


@pytest.mark.parametrize("case", range(len(_bad()[0])))
def test_bad_arguments(case):
    cases, base = _bad()
    exc, name, change = cases[case]
    with pytest.raises(exc, match=name):
        tr.rope_fwd_3d(**{**base, **change})
