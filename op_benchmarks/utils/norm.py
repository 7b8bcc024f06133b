"""What bench_rmsnorm.py and bench_layernorm.py share: cases, bytes moved, the timed
callables and the command line, for a norm with ``n_vecs`` (N,) parameters (RMSNorm:
weight; LayerNorm: weight and bias) and three ops: forward, fused add, backward.

Inputs are ``(x, *vecs)``, ``(x, *vecs, residual)`` or ``(x, *vecs, dy)``. Each bench
gives its providers as ``fwd(x, *vecs)`` and ``add(x, r, *vecs) -> (out, res_out)``.
"""

from collections.abc import Callable

import torch

from op_benchmarks.utils import harness

DEFAULT_MODELS = ["llama3-8B", "qwen2.5-32B", "deepseek-v3", "llama3-70B", "llama3-405B"]
DEFAULT_M = [1, 16, 64, 256, 1024, 4096, 16384, 32768]
MAX_LIGER_N = 65536  # Liger holds a whole row in one block, at most 64K columns


class NormBench:
    def __init__(self, name: str, ops: tuple[str, str, str], n_vecs: int, *, triton_fwd: Callable,
                 triton_add: Callable, native_fwd: Callable, native_add: Callable, liger: Callable):
        """``liger(case, inputs)``: None where Liger has no such op, else (fwd, add, inputs)."""
        self.name, self.ops, self.n_vecs = name, ops, n_vecs
        self._triton = (triton_fwd, triton_add)
        self._native = (native_fwd, native_add)
        self._liger = liger
        self._compiled = None

    def nbytes(self, op: str, m: int, n: int, e: int) -> int:
        """Each input read once, each output written once; the backward also reads fp32
        statistics (rstd, and the mean for LayerNorm) and writes each parameter's gradient."""
        fwd, add, _ = self.ops
        if op == fwd:
            return (2 * m * n + self.n_vecs * n) * e
        if op == add:
            return (4 * m * n + self.n_vecs * n) * e
        return (3 * m * n + (self.n_vecs + 1) * n) * e + 4 * self.n_vecs * m

    def case(self, op: str, label: str, m: int, n: int, dtype: torch.dtype) -> harness.Case:
        def make_inputs():
            x = torch.randn(m, n, device=harness.DEVICE, dtype=dtype)
            vecs = [torch.randn(n, device=harness.DEVICE, dtype=dtype) * 0.1 + 1 for _ in range(self.n_vecs)]
            if op == self.ops[1]:
                return x, *vecs, torch.randn_like(x)
            if op == self.ops[2]:
                return x.requires_grad_(), *(v.requires_grad_() for v in vecs), torch.randn_like(x)
            return x, *vecs

        return harness.Case(op=op, label=label, dims={"M": m, "N": n}, dtype=dtype, rows=m,
                            nbytes=self.nbytes(op, m, n, dtype.itemsize), make_inputs=make_inputs)

    def timed(self, case: harness.Case, inputs: tuple, fwd: Callable, add: Callable | None):
        """The callable to time for case.op (None where the provider has no such op)."""
        if case.op == self.ops[0]:
            x, *vecs = inputs
            return lambda: fwd(x, *vecs)
        if case.op == self.ops[1]:
            x, *vecs, r = inputs
            return None if add is None else lambda: add(x, r, *vecs)
        x, *vecs, dy = inputs
        y = fwd(x, *vecs)  # the forward stays out of the timing; retain_graph lets the backward repeat
        return lambda: torch.autograd.grad(y, (x, *vecs), dy, retain_graph=True)

    def _compile(self, case, inputs):
        if self._compiled is None:
            self._compiled = tuple(harness.compile_static(f) for f in self._native)
        # For the backward, AOTAutograd compiles the backward graph along with the forward.
        return self.timed(case, inputs, *self._compiled)

    def _liger_timed(self, case, inputs):
        if case.dims["N"] > MAX_LIGER_N:
            return None
        got = self._liger(case, inputs)
        return None if got is None else self.timed(case, got[2], got[0], got[1])

    def providers(self) -> dict[str, Callable]:
        return {"triton": lambda case, inputs: self.timed(case, inputs, *self._triton),
                "native": lambda case, inputs: self.timed(case, inputs, *self._native),
                "compile": self._compile, "liger": self._liger_timed}

    def main(self, argv, description: str):
        p = harness.make_parser(description, ("M", "N"))
        p.add_argument("--op", nargs="+", default=list(self.ops), choices=list(self.ops))
        harness.add_sweep_args(p)
        args = p.parse_args(argv)
        harness.eager_only_backward(args)
        shapes = harness.row_shapes(args, DEFAULT_MODELS, DEFAULT_M, lambda cfg: [("", cfg["hidden_size"])])
        cases = harness.build_cases(args, args.op, shapes, self.case)
        tiny = [self.case(op, "tiny", 3, 96, torch.bfloat16) for op in args.op]
        return harness.run(args, self.name, cases, self.providers(), tiny)
