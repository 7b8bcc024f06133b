"""What bench_rmsnorm.py and bench_layernorm.py share: cases, bytes moved, the timed
callables and the command line, for a norm with ``n_vecs`` (N,) parameters (RMSNorm:
weight; LayerNorm: weight and bias) and four ops: forward, fused add, and the backward
of each (the autograd gradient of a forward run once, outside the timing).

Inputs are ``(x, *vecs)``, ``(x, *vecs, residual)``, ``(x, *vecs, dy)`` or ``(x, *vecs,
residual, dy, d_residual_out)``. Each bench gives its providers as ``fwd(x, *vecs)`` and
``add(x, r, *vecs) -> (out, res_out)``.
"""

from collections.abc import Callable

import torch

from op_benchmarks.utils import harness

DEFAULT_MODELS = ["llama3-8B", "qwen2.5-32B", "deepseek-v3", "llama3-70B", "llama3-405B"]
DEFAULT_M = [1, 16, 64, 256, 1024, 4096, 16384, 32768]
MAX_LIGER_N = 65536  # Liger holds a whole row in one block, at most 64K columns


class NormBench:
    def __init__(self, name: str, ops: tuple[str, str, str, str], n_vecs: int, *, triton_fwd: Callable,
                 triton_add: Callable, native_fwd: Callable, native_add: Callable, liger: Callable):
        """``ops``: forward, fused add, their backward ops (a subclass may add ops of its own after
        these four, with the cases and providers it overrides). ``liger(case, inputs)``: None where
        Liger has no such op, else (fwd, add, inputs)."""
        self.name, self.ops, self.n_vecs = name, ops, n_vecs
        self._triton = (triton_fwd, triton_add)
        self._native = (native_fwd, native_add)
        self._liger = liger
        self._compiled = None

    def nbytes(self, op: str, m: int, n: int, e: int) -> int:
        """Each input read once, each output written once. The backward ops also read the fp32
        statistics (rstd, and the mean for LayerNorm) and the weight, and write each parameter's
        gradient; the fused add's backward reads the saved sum x + residual, dy and residual_out's
        gradient and writes one gradient, which is both x's and the residual's."""
        fwd, add, bwd, add_bwd = self.ops[:4]
        if op == fwd:
            return (2 * m * n + self.n_vecs * n) * e
        if op == add:
            return (4 * m * n + self.n_vecs * n) * e
        rows = 3 if op == bwd else 4
        return (rows * m * n + (self.n_vecs + 1) * n) * e + 4 * self.n_vecs * m

    def case(self, op: str, label: str, m: int, n: int, dtype: torch.dtype) -> harness.Case:
        fwd, add, bwd, add_bwd = self.ops[:4]

        def make_inputs():
            x = torch.randn(m, n, device=harness.DEVICE, dtype=dtype)
            vecs = [torch.randn(n, device=harness.DEVICE, dtype=dtype) * 0.1 + 1 for _ in range(self.n_vecs)]
            if op == add:
                return x, *vecs, torch.randn_like(x)
            if op == bwd:
                return x.requires_grad_(), *(v.requires_grad_() for v in vecs), torch.randn_like(x)
            if op == add_bwd:
                return (x.requires_grad_(), *(v.requires_grad_() for v in vecs), torch.randn_like(x).requires_grad_(),
                        torch.randn_like(x), torch.randn_like(x))
            return x, *vecs

        # A parameter's gradient is a sum over the M rows: its budget grows with M.
        agrees = (lambda result, reference: harness.agrees(result, reference, dtype, sum_rows=m)) \
            if op in (bwd, add_bwd) else None
        return harness.Case(op=op, label=label, dims={"M": m, "N": n}, dtype=dtype, rows=m,
                            nbytes=self.nbytes(op, m, n, dtype.itemsize), make_inputs=make_inputs, agrees=agrees)

    def timed(self, case: harness.Case, inputs: tuple, fwd: Callable, add: Callable | None):
        """The callable to time for case.op (None where the provider has no such op)."""
        fwd_op, add_op, bwd_op, _ = self.ops[:4]
        if case.op == fwd_op:
            x, *vecs = inputs
            return lambda: fwd(x, *vecs)
        if case.op == add_op:
            x, *vecs, r = inputs
            return None if add is None else lambda: add(x, r, *vecs)
        if case.op == bwd_op:
            x, *vecs, dy = inputs
            return harness.backward_of(lambda: fwd(x, *vecs), (x, *vecs), dy)
        if add is None:
            return None
        x, *vecs, r, dy, ds = inputs
        return harness.backward_of(lambda: add(x, r, *vecs), (x, r, *vecs), (dy, ds))

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
        p.add_argument("--op", nargs="+", choices=list(self.ops), help=f"default: {', '.join(self.ops[:3])}")
        harness.add_direction_arg(p)
        harness.add_sweep_args(p)
        args = p.parse_args(argv)
        args.op = harness.directed_ops(args, list(self.ops[:3]) if args.direction is None else list(self.ops[:2]))
        models = harness.BWD_MODELS if args.direction == "bwd" else DEFAULT_MODELS
        shapes = harness.row_shapes(args, models, DEFAULT_M, lambda cfg: [("", cfg["hidden_size"])])
        cases = harness.build_cases(args, args.op, shapes, self.case)
        tiny = [self.case(op, "tiny", 3, 96, torch.bfloat16) for op in args.op]
        return harness.run(args, self.name, cases, self.providers(), tiny)
