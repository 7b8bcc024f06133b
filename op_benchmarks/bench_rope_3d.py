"""Benchmark rope_fwd_3d (Wan 2.x's 3-D RoPE of video tokens, sequence parallel).

    python op_benchmarks/bench_rope_3d.py                        # Wan2.1-14B / 1.3B 480p and 720p, 1-8 ranks
    python op_benchmarks/bench_rope_3d.py --shape 1x8190x40x128 --sp 4
    python op_benchmarks/bench_rope_3d.py --cudagraph --providers triton,compile

Shapes are BxSxNxC: B videos of S tokens on this rank (the whole grid split over --sp
ranks, this one rank 1 where there are several), N heads of C channels. Grids (f, h, w): 480p
81 frames (21, 30, 52) = 32760 tokens, 720p (21, 45, 80) = 75600; freqs a complex128 table of
1024 rows as Wan builds it.
Bytes moved: x read (B S N C e), the fp32 output written (4 B S N C), the tokens' freqs rows
(16 B S C / 2, complex128; shared by the heads).
Providers: triton (aiter_lite), native (the fp32 reference), compile (torch.compile of it),
wan (Wan's rope_apply as its repository writes it: a Python loop over the batch, fp64 complex
multiplication, padded freqs; not under --cudagraph, its loop reads grid_sizes on the host).
"""

import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

from op_benchmarks.utils import harness  # noqa: E402  (sets TRITON_INTERPRET on CPU before aiter_lite loads)

import torch  # noqa: E402

from aiter_lite.ops.native.rope import rope_3d as native  # noqa: E402
from aiter_lite.ops.triton.rope import rope_3d as tri  # noqa: E402
from op_benchmarks.utils.rope import wan_freqs, wan_rope_apply  # noqa: E402

# (label, grid (f, h, w), heads); C = 128 (Wan's head dim)
VIDEOS = [("wan14b-480p", (21, 30, 52), 40), ("wan14b-720p", (21, 45, 80), 40), ("wan1.3b-480p", (21, 30, 52), 12)]
SP = [1, 2, 4, 8]
ROWS = 1024


def _case(label, b, s, n, c, grid, sp_size, dtype):
    def make_inputs():
        dev = harness.DEVICE
        x = torch.randn(b, s, n, c, device=dev, dtype=dtype)
        return x, torch.tensor([grid] * b, dtype=torch.long, device=dev), wan_freqs(ROWS, c // 2, dev)

    e = dtype.itemsize
    return harness.Case(op="rope_fwd_3d", label=label, dims={"B": b, "S": s, "N": n, "C": c}, dtype=dtype,
                        rows=b * s, nbytes=b * s * n * c * (e + 4) + 8 * b * s * c,
                        make_inputs=make_inputs, extra={"sp_size": sp_size, "sp_rank": min(1, sp_size - 1),
                                                        "grid": "x".join(map(str, grid))})


def _call(fn, case, inputs):
    x, grid, freqs = inputs
    sp, rank = case.extra["sp_size"], case.extra["sp_rank"]
    return lambda: fn(x, grid, freqs, sp, rank)


_compiled = []


def _compile(case, inputs):
    if not _compiled:
        _compiled.append(harness.compile_static(native.rope_fwd_3d))
    return _call(_compiled[0], case, inputs)


PROVIDERS = {"triton": lambda c, i: _call(tri.rope_fwd_3d, c, i),
             "native": lambda c, i: _call(native.rope_fwd_3d, c, i), "compile": _compile,
             "wan": lambda c, i: _call(wan_rope_apply, c, i)}


def main(argv=None):
    p = harness.make_parser(__doc__.splitlines()[0], ("B", "S", "N", "C"))
    p.add_argument("--sp", type=int, nargs="+", help="sequence-parallel ranks (default 1 2 4 8)")
    args = p.parse_args(argv)
    if args.cudagraph and not args.providers:  # Wan's loop reads grid_sizes on the host: no graph captures it
        args.providers = "triton,native,compile" if harness.ON_GPU else "triton,native"
    sps = args.sp or SP
    if args.shape:
        shapes = []
        for text in args.shape:
            d = harness.parse_shape(text, ("B", "S", "N", "C"))
            shapes += [("custom", d["B"], d["S"], d["N"], d["C"], (1, 1, d["S"] * sp), sp) for sp in sps]
    else:
        shapes = [(f"{name}-sp{sp}", 1, -(-(f * h * w) // sp), n, 128, (f, h, w), sp)
                  for name, (f, h, w), n in VIDEOS for sp in sps]
    cases = [_case(label, b, s, n, c, grid, sp, harness.DTYPES[dt]) for dt in args.dtype
             for label, b, s, n, c, grid, sp in shapes]
    tiny = [_case("tiny", 2, 10, 3, 24, (2, 2, 3), 2, torch.bfloat16)]
    return harness.run(args, "rope_3d", cases, PROVIDERS, tiny)


if __name__ == "__main__":
    main()
