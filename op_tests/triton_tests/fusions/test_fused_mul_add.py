"""aiter's fused_mul_add (aiter_lite.ops.triton.fusions) against the fp32 native reference:
a and b each an int, a float, a one-element tensor or a tensor of x's element count (another
shape: memory order), every dtype and mixed dtypes; into x (aiter's in-place contract) or
into out (x untouched); empty, odd and 3-D sizes; bad arguments raise naming the op and the
argument. Outputs start poisoned (the package's conftest)."""

import pytest
import torch

from aiter_lite.ops.native.fusions import fused_mul_add as native_op
from aiter_lite.ops.triton.fusions import fused_mul_add
from op_tests.utils import DEVICE, DTYPES, assert_close, by_device

SIZES = by_device(cpu=[(0,), (1,), (1000,), (3, 5, 7), (2, 4097)],
                  gpu=[(0,), (1,), (1000,), (3, 5, 7), (2, 4097), (4096, 7168), (1 << 27,)])
OPERANDS = ["int", "float", "one", "full", "full_other_shape", "full_fp16"]


def _operand(kind: str, shape, n: int):
    if kind == "int":
        return 3
    if kind == "float":
        return -0.75
    if kind == "one":
        return torch.randn(1, device=DEVICE)
    if kind == "full":
        return torch.randn(shape, device=DEVICE)
    if kind == "full_other_shape":
        return torch.randn(n, device=DEVICE)
    return torch.randn(shape, device=DEVICE, dtype=torch.float16)


@pytest.mark.parametrize("b_kind", OPERANDS)
@pytest.mark.parametrize("a_kind", OPERANDS)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_operands(dtype, a_kind, b_kind):
    shape = (33, 40)
    x = torch.randn(shape, device=DEVICE, dtype=dtype)
    a, b = _operand(a_kind, shape, x.numel()), _operand(b_kind, shape, x.numel())
    want = native_op(x.clone(), a, b)
    got = fused_mul_add(x, a, b)
    assert got is x
    assert_close(x, want, name=f"{a_kind} {b_kind}")


@pytest.mark.parametrize("out_dtype", DTYPES, ids=str)
@pytest.mark.parametrize("shape", SIZES, ids=str)
def test_into_out(shape, out_dtype):
    x = torch.randn(shape, device=DEVICE, dtype=torch.bfloat16)
    before = x.clone()
    a, b = torch.randn(shape, device=DEVICE), torch.randn(1, device=DEVICE)
    out = torch.empty(x.numel(), device=DEVICE, dtype=out_dtype)  # another shape, the same element count
    assert fused_mul_add(x, a, b, out) is out
    assert torch.equal(x, before)
    assert_close(out, native_op(x, a, b, torch.empty_like(out)), name="out")


def test_nan_stays_in_its_element():
    x = torch.randn(64, device=DEVICE)
    x[5] = float("nan")
    y = fused_mul_add(x.clone(), 2.0, 1.0)
    assert y.isnan().nonzero().flatten().tolist() == [5]


@pytest.mark.parametrize("i", range(8))
def test_bad_arguments_raise(i):
    x = torch.randn(8, 16, device=DEVICE)
    calls = [
        (lambda: fused_mul_add(x.t(), 1.0, 2.0), "x"),
        (lambda: fused_mul_add(x, torch.randn(7, device=DEVICE), 2.0), "a"),
        (lambda: fused_mul_add(x, 1.0, torch.randn(16, 8, device=DEVICE).t()), "b"),
        (lambda: fused_mul_add(x, True, 2.0), "a"),
        (lambda: fused_mul_add(x, 1.0, "2"), "b"),
        (lambda: fused_mul_add(x, torch.ones(1, device=DEVICE, dtype=torch.int32), 2.0), "a"),
        (lambda: fused_mul_add(x, 1.0, 2.0, torch.empty(8, 15, device=DEVICE)), "out"),
        (lambda: fused_mul_add(x.int(), 1.0, 2.0), "x"),
    ]
    call, name = calls[i]
    with pytest.raises((TypeError, ValueError), match=f"fused_mul_add: {name}"):
        call()
