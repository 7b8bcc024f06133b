"""The input contract of every registered op, one changed argument at a time (see
``op_tests/fuzz/cases.py``): a clear error naming the op and the argument, or the native
reference's result; never a silent wrong answer, a leaked internal error, or a tensor
changed that the call may not write.

``python -m op_tests.fuzz`` prints the outcome counts of every op.
"""

import pytest
import torch

from aiter_lite.library import OPS
from aiter_lite.ops.triton.quant import get_fp8_e4m3_dtype
from op_tests.fuzz.cases import FAILURES, cases, run
from op_tests.utils import DEVICE, ON_GPU

# fp32 activations and int8 outputs everywhere; on a GPU, also what serving passes.
DTYPES = [(torch.float32, torch.int8)] + ([(torch.bfloat16, get_fp8_e4m3_dtype())] if ON_GPU else [])


@pytest.mark.parametrize("dtype,qdtype", DTYPES, ids=lambda d: str(d).replace("torch.", ""))
@pytest.mark.parametrize("name", sorted(OPS))
def test_fuzz(name, dtype, qdtype):
    torch.manual_seed(0)
    results = [run(c) for c in cases(name, DEVICE, dtype, qdtype)]
    failures = [str(r) for r in results if r.outcome in FAILURES]
    assert not failures, f"{len(failures)} of {len(results)} cases:\n" + "\n".join(failures)
    assert any(r.outcome == "correct" for r in results) and any(r.outcome == "error" for r in results)
