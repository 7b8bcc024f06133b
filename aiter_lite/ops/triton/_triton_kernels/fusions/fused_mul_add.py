"""``out = x * a + b`` over a flat run of elements (aiter's ``fused_mul_add``): ``a`` and ``b``
each a runtime fp32 scalar (SCALAR), one element read once ("one") or an element each
("full"); computed in fp32 (one multiply-add), stored in out's dtype."""

import triton
import triton.language as tl


@triton.jit
def _operand(ptr, offs, mask, scalar, KIND: tl.constexpr):
    if KIND == "scalar":
        return scalar
    elif KIND == "one":
        return tl.load(ptr).to(tl.float32)
    else:
        tl.static_assert(KIND == "full")
        return tl.load(ptr + offs, mask=mask, other=0.0).to(tl.float32)


@triton.jit
def _mul_add_kernel(x_ptr, a_ptr, b_ptr, out_ptr, n, a_scalar, b_scalar,
                    A: tl.constexpr,       # "scalar" | "one" | "full"
                    B: tl.constexpr,       # as A
                    INT64: tl.constexpr,   # offsets can pass 2^31
                    BLOCK: tl.constexpr):
    # scalars to fp32 (inductor passes Python floats as fp64); tl.cast: a float has no .to in the interpreter
    a_scalar = tl.cast(a_scalar, tl.float32)
    b_scalar = tl.cast(b_scalar, tl.float32)
    pid = tl.program_id(0)
    if INT64:
        pid = pid.to(tl.int64)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    y = x * _operand(a_ptr, offs, mask, a_scalar, A) + _operand(b_ptr, offs, mask, b_scalar, B)
    tl.store(out_ptr + offs, y.to(out_ptr.dtype.element_ty), mask=mask)
