"""Benchmark rotary position embedding (aiter's rope_* ops).

    python op_benchmarks/bench_rope.py                             # serving RoPE, 5 models' heads, T = 1..32768
    python op_benchmarks/bench_rope.py --model all -o rope.csv
    python op_benchmarks/bench_rope.py -T 1 16 64 --cudagraph
    python op_benchmarks/bench_rope.py -l thd -T 4096 -H 128 -D 64 --rotate_style gptj --two_inputs false
    python op_benchmarks/bench_rope.py -l sbhd -B 8 -S 1024 --cached false --bwd
    python op_benchmarks/bench_rope.py --direction bwd -o rope_bwd.csv     # llama3-8B/70B heads, T = 1..32768
    python op_benchmarks/bench_rope.py --direction bwd -l sbhd -B 8 -S 1024 --cached false

With no flags the op is the serving one, rope_cached_thd_positions_2c_fwd_inplace: Q
(T, HQ, D) and K (T, HK, D) turned together in place, NEOX, by half-width fp32 cos / sin
tables (MAX_POS, D / 2) (reuse_freqs_front_part) at random int64 positions in [0, MAX_POS).
aiter's flags pick another op: -l thd|sbhd, --cached, --pos, --offs, --two_inputs,
--inplace, --bwd (the *_bwd ops, out of place), --rotate_style, --reuse_freqs_front_part,
--nope (a rotary part of D / 2), --nope_first; each takes true|false, or alone means true.
--direction bwd times the backward through autograd of the out-of-place forward op instead
(op <forward op>_bwd, e.g. rope_cached_thd_positions_2c_fwd_bwd): the forward runs once with
Q (and K) requiring grad, then torch.autograd.grad of its outputs with respect to Q (and K)
for random upstream gradients is timed; the CSV's op column names it. Its default models are
llama3-8B and llama3-70B. It excludes --bwd (the *_bwd op called directly) and --inplace, and
is timed eagerly only.
-H K heads, -Q Q heads per K head (HQ = Q * H), -D head dim, as in aiter; they replace the
models' values. -S/-T/-M sequence lengths: B sequences of S tokens, T = B * S. One-tensor
ops turn a Q-like tensor of HQ heads; THD has one-tensor ops only for uncached tables (by
cu_seqlens of B equal sequences), so one-tensor THD with positions runs the SBHD op on
(T, 1, HQ, D). Models give (HQ, HK, D) from num_attention_heads, num_key_value_heads and
head_dim (else hidden_size / heads); DeepSeek-V3's MLA turns 128 Q heads and one shared K
head of qk_rope_head_dim = 64.

Bytes moved (each input read once, each output written once; e = Q/K element size, 4 bytes
a table entry, 8 an index; R rotary channels of D, F = R / 2 with reuse_freqs_front_part
else R; N = HQ + HK heads for Q and K, HQ for one tensor):
    Q / K      out of place, and the backward (dx from dy; --direction bwd's    2 * T * N * D * e
               too): read and write all D
               in place: read and write the rotary part only                    2 * T * N * R * e
    tables     cos and sin (cached) or angles (uncached), one row per token     rows * F * 4 * (2 or 1)
               rows = T with positions, S without (a row serves every sequence)
    indices    positions, offsets                                               8 * T each
               cu_seqlens (THD, uncached)                                       4 * (B + 1)
Providers: triton (aiter_lite), native (aiter_lite's eager reference), compile
(torch.compile of op_benchmarks/utils/rope.py's vLLM-style function), liger (Liger-Kernel's
LigerRopeFunction, or rope_backward for the *_bwd ops: Q and K ops, NEOX, rotary part
first; it takes its rows already gathered by position, (1, T, F) fp32, and turns a
(1, H, T, D) view of the (T, H, D) tensor in place; under --direction bwd LigerRopeFunction's
backward, which turns the upstream gradient in place). In-place ops and Liger run on each
provider's own copy of Q and K (and of the upstream gradients), so every provider's first
call is checked on fresh inputs. Under --direction bwd native and compile are the reference
and the vLLM-style function under autograd (compile: its compiled backward).
"""

import argparse
import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

from op_benchmarks.utils import harness  # noqa: E402  (sets TRITON_INTERPRET on CPU before aiter_lite loads)

import torch  # noqa: E402

from aiter_lite.ops.native.rope import rope as native  # noqa: E402
from aiter_lite.ops.triton.rope import rope as tri  # noqa: E402
from op_benchmarks.utils import rope as torch_rope  # noqa: E402

DEFAULT_MODELS = ["llama3-8B", "qwen2.5-7B", "llama3-70B", "llama3-405B", "deepseek-v3"]
DEFAULT_T = [1, 16, 64, 256, 1024, 4096, 16384, 32768]
MAX_POS = 32768  # rows of a positions-indexed table: a 32K context
AITER_HEADS = {"H": 128, "Q": 1, "D": 64}  # aiter's bench defaults, for flags given without --model
STYLES = {"neox": torch_rope.NEOX, "gptj": torch_rope.GPTJ}

# aiter op family -> its tensor arguments, in aiter's order; the op is family + _fwd, _fwd_inplace or _bwd.
FAMILIES = {
    "rope": ("x", "freqs"),
    "rope_thd": ("x", "cu_seqlens", "freqs"),
    "rope_cached": ("x", "cos", "sin"),
    "rope_cached_positions": ("x", "cos", "sin", "positions"),
    "rope_cached_positions_offsets": ("x", "cos", "sin", "positions", "offsets"),
    "rope_cached_thd_positions_2c": ("x", "y", "cos", "sin", "positions"),
    "rope_cached_thd_positions_offsets_2c": ("x", "y", "cos", "sin", "positions", "offsets"),
}


def _family(op: str) -> str:
    return op.rsplit("_fwd", 1)[0] if "_fwd" in op else op.removesuffix("_bwd")


def _autograd(op: str) -> bool:
    """Whether ``op`` is the backward through autograd of a forward op (``<op>_fwd_bwd``)."""
    return op.endswith("_fwd_bwd")


def select_op(args: argparse.Namespace) -> str:
    """The aiter op that aiter's flags name; unset flags take the serving case's values."""
    cached = True if args.cached is None else args.cached
    pos = cached if args.pos is None else args.pos
    offs = bool(args.offs)
    two = (args.l == "thd" and cached and pos) if args.two_inputs is None else args.two_inputs
    mode = "_bwd" if args.bwd else "_fwd" if args.inplace is False else "_fwd_inplace"
    if args.direction == "bwd":
        if args.bwd or args.inplace:
            raise SystemExit("--direction bwd: the gradient of the out-of-place forward op through autograd; "
                             "drop --bwd (the *_bwd op called directly) and --inplace")
        mode = "_fwd_bwd"
    if offs and not pos:
        raise SystemExit("--offs: offsets are added to positions; drop --pos false")
    if pos and not cached:
        raise SystemExit("--pos: positions index cached cos / sin tables; drop --cached false")
    if two:
        if not (cached and pos and args.l == "thd"):
            raise SystemExit("--two_inputs: aiter turns Q and K together only in THD with cached tables and "
                             "positions (rope_cached_thd_positions[_offsets]_2c_*); pass --two_inputs false")
        family = "rope_cached_thd_positions_offsets_2c" if offs else "rope_cached_thd_positions_2c"
    elif not cached:
        family = "rope_thd" if args.l == "thd" else "rope"
    elif not pos:
        if args.l == "thd":
            raise SystemExit("--pos false with cached tables: rope_cached_* is SBHD only; pass -l sbhd")
        family = "rope_cached"
    else:
        family = "rope_cached_positions_offsets" if offs else "rope_cached_positions"
    return family + mode


def head_layout(cfg: dict) -> tuple[int, int, int]:
    """(Q heads, K heads, head dim) of the tensors a model turns."""
    hq = cfg["num_attention_heads"]
    if "qk_rope_head_dim" in cfg:  # MLA: the rope part of every Q head, one shared K head
        return hq, 1, cfg["qk_rope_head_dim"]
    return hq, cfg["num_key_value_heads"], cfg.get("head_dim", cfg["hidden_size"] // hq)


def shapes(args: argparse.Namespace) -> list[tuple[str, int, tuple[int, int, int]]]:
    """(label, S, (HQ, HK, D)) from --shape, else the models (-H / -Q / -D replacing their
    values) or, with those flags and no --model, one layout with aiter's defaults for the rest."""
    if args.shape:
        return [("custom", s["S"], (s["Q"] * s["H"], s["H"], s["D"]))
                for s in (harness.parse_shape(text, ("S", "H", "Q", "D")) for text in args.shape)]
    given = {k: getattr(args, k) for k in AITER_HEADS if getattr(args, k) is not None}
    if given and not args.model:
        heads = [("custom", {**AITER_HEADS, **given})]
    else:
        heads = []
        models = harness.BWD_MODELS if args.direction == "bwd" else DEFAULT_MODELS
        for model, cfg in harness.load_models(args.model, models).items():
            hq, hk, d = head_layout(cfg)
            heads.append((model, {"H": hk, "Q": hq // hk, "D": d, **given}))
    return [(label, s, (h["Q"] * h["H"], h["H"], h["D"])) for label, h in heads for s in args.M or DEFAULT_T]


def rope_case(op: str, label: str, s: int, b: int, hq: int, hk: int, d: int, dtype: torch.dtype,
              args: argparse.Namespace) -> harness.Case:
    """B sequences of S tokens through ``op``: Q (HQ heads) and, for the Q and K ops, K (HK heads)."""
    names = FAMILIES[_family(op)]
    style = STYLES[args.rotate_style]
    reuse = True if args.reuse_freqs_front_part is None else args.reuse_freqs_front_part
    r = d // 2 if args.nope else d
    f = r // 2 if reuse else r
    t = b * s
    two, with_pos = "y" in names, "positions" in names
    if args.l == "sbhd":
        lead = (s, b)
    else:  # THD; the one-tensor cached ops are SBHD's, on (T, 1, H, D)
        lead = (t,) if two or "cu_seqlens" in names else (t, 1)
    rows = t if with_pos else s
    inplace = op.endswith("_inplace")
    nbytes = (2 * t * (hq + hk if two else hq) * (r if inplace else d) * dtype.itemsize
              + rows * f * 4 * (1 if "freqs" in names else 2)
              + 8 * t * sum(n in names for n in ("positions", "offsets"))
              + 4 * (b + 1) * ("cu_seqlens" in names))

    def make_inputs():
        dev = harness.DEVICE
        half = torch_rope.angles(MAX_POS if with_pos else s, r, dev)
        table = half if reuse else torch_rope.widen(half, style)
        if not two:
            table = table[:, None, None, :]  # aiter's SBHD / THD-freqs tables: (rows, 1, 1, F)
        lo, hi = (MAX_POS // 4, 3 * MAX_POS // 4) if "offsets" in names else (0, MAX_POS)
        make = {
            "x": lambda: torch.randn(*lead, hq, d, device=dev, dtype=dtype),
            "y": lambda: torch.randn(*lead, hk, d, device=dev, dtype=dtype),
            "freqs": lambda: table.contiguous(),
            "cos": lambda: torch.cos(table).contiguous(),
            "sin": lambda: torch.sin(table).contiguous(),
            "positions": lambda: torch.randint(lo, hi, lead, device=dev),
            "offsets": lambda: torch.randint(-(MAX_POS // 4), MAX_POS // 4, lead, device=dev),
            "cu_seqlens": lambda: torch.arange(0, t + 1, s, device=dev, dtype=torch.int32),
        }
        tensors = tuple(make[n]() for n in names)
        if not _autograd(op):
            return tensors
        # Q (and K) require grad; then a random upstream gradient for each of their outputs.
        diff = tensors[:2 if two else 1]
        for t in diff:
            t.requires_grad_()
        return (*tensors, *(torch.randn_like(t) for t in diff))

    dims = {"T": t, "B": b, **({"HQ": hq, "HK": hk} if two else {"H": hq}), "D": d, "R": r}
    extra = {"layout": args.l, "rotate_style": args.rotate_style, "reuse_freqs_front_part": reuse,
             "nope_first": bool(args.nope_first), "table_rows": MAX_POS if with_pos else s}
    return harness.Case(op=op, label=label, dims=dims, dtype=dtype, nbytes=nbytes, rows=t,
                        make_inputs=make_inputs, extra=extra)


def _flags(case: harness.Case) -> tuple:
    """rotate_style, reuse_freqs_front_part, nope_first: the trailing arguments of every op."""
    return STYLES[case.extra["rotate_style"]], case.extra["reuse_freqs_front_part"], case.extra["nope_first"]


def _own(case: harness.Case, inputs: tuple, always: bool = False) -> tuple:
    """``inputs`` with Q (and K) cloned where the op writes them in place."""
    n = 2 if "y" in FAMILIES[_family(case.op)] else 1
    if always or case.op.endswith("_inplace"):
        return (*(t.clone() for t in inputs[:n]), *inputs[n:])
    return inputs


def _split(case: harness.Case, inputs: tuple) -> tuple[tuple, tuple, tuple]:
    """An autograd op's inputs as (the op's tensors, Q (and K), their upstream gradients)."""
    names = FAMILIES[_family(case.op)]
    n = 2 if "y" in names else 1
    return inputs[:len(names)], inputs[:n], inputs[len(names):]


def _aiter(module):
    def provider(case, inputs):
        flags = _flags(case)
        if _autograd(case.op):
            tensors, wrt, grads = _split(case, inputs)
            return harness.backward_of(lambda: getattr(module, case.op.removesuffix("_bwd"))(*tensors, *flags), wrt,
                                      grads)
        fn, args = getattr(module, case.op), _own(case, inputs)
        return lambda: fn(*args, *flags)
    return provider


_compiled = []


def _compile(case, inputs):
    if not _compiled:
        _compiled.append(harness.compile_static(torch_rope.rope))
    style, reuse, nope_first = _flags(case)
    if _autograd(case.op):
        # AOTAutograd compiles the backward graph along with the forward.
        tensors, wrt, grads = _split(case, inputs)
        kwargs = dict(zip(FAMILIES[_family(case.op)], tensors))
        return harness.backward_of(lambda: _compiled[0](**kwargs, rotate_style=style, reuse_freqs_front_part=reuse,
                                                        nope_first=nope_first), wrt, grads)
    kwargs = dict(zip(FAMILIES[_family(case.op)], _own(case, inputs)))
    return lambda: _compiled[0](**kwargs, rotate_style=style, reuse_freqs_front_part=reuse, nope_first=nope_first,
                                inplace=case.op.endswith("_inplace"), backward=case.op.endswith("_bwd"))


def _liger(case, inputs):
    names = FAMILIES[_family(case.op)]
    style, _, nope_first = _flags(case)
    r = case.dims["R"]
    if "y" not in names or style != torch_rope.NEOX or (nope_first and r < case.dims["D"]):
        return None  # Liger turns Q and K together, NEOX halves, rotary part first
    try:
        from liger_kernel.ops.rope import LigerRopeFunction, rope_backward
    except ImportError:
        return None
    t = dict(zip(names, _own(case, inputs, always=True)))
    index = t["positions"] if "offsets" not in t else t["positions"] + t["offsets"]
    cos, sin = t["cos"][index][None], t["sin"][index][None]  # (1, T, F)
    q, k = t["x"], t["y"]
    if _autograd(case.op):
        # Its own leaves (the forward turns them in place) and upstream gradients (the backward
        # turns them in place into Q's and K's gradients; later timed calls turn them again,
        # which does not change the time).
        q, k = q.detach().requires_grad_(), k.detach().requires_grad_()
        dq, dk = (g.clone() for g in inputs[len(names):])
        return harness.backward_of(
            lambda: LigerRopeFunction.apply(q[None].transpose(1, 2), k[None].transpose(1, 2), cos, sin, None, 1, r),
            (q, k), (dq[None].transpose(1, 2), dk[None].transpose(1, 2)))
    q4, k4 = q[None].transpose(1, 2), k[None].transpose(1, 2)  # (1, H, T, D) views: Liger writes q, k
    backward = case.op.endswith("_bwd")

    def run():
        if backward:
            rope_backward(q4, k4, cos, sin, rotary_dim=r)
        else:
            LigerRopeFunction.apply(q4, k4, cos, sin, None, 1, r)
        return q, k

    return run


PROVIDERS = {"triton": _aiter(tri), "native": _aiter(native), "compile": _compile, "liger": _liger}


def make_parser() -> argparse.ArgumentParser:
    p = harness.make_parser(__doc__.splitlines()[0], ("S", "H", "Q", "D"))
    flag = {"type": harness.parse_bool, "nargs": "?", "const": True, "metavar": "true|false"}
    p.add_argument("-l", default="thd", choices=["thd", "sbhd"], help="layout of Q / K")
    p.add_argument("-B", type=int, default=1, help="batch: sequences of S tokens each (T = B * S)")
    p.add_argument("-S", "-T", dest="M", type=int, nargs="+",
                   help="sequence lengths (B = 1: token counts); -M is the same")
    p.add_argument("-H", type=int, help="K heads (replaces the models')")
    p.add_argument("-Q", type=int, help="Q heads per K head")
    p.add_argument("-D", type=int, help="head dim")
    p.add_argument("--rotate_style", default="neox", choices=list(STYLES))
    p.add_argument("--cached", **flag, help="cos / sin tables (default true); false: angle tables (freqs)")
    p.add_argument("--reuse_freqs_front_part", **flag, help="half-width tables (default true)")
    p.add_argument("--nope", **flag, help="rotate D / 2 channels, pass the rest through")
    p.add_argument("--nope_first", **flag, help="the pass-through channels come first")
    p.add_argument("--pos", **flag, help="positions index the tables (default: with cached tables)")
    p.add_argument("--offs", **flag, help="offsets added to the positions")
    p.add_argument("--two_inputs", **flag, help="Q and K in one call (default: THD with cached tables and positions)")
    p.add_argument("--inplace", **flag, help="write Q / K in place (default true)")
    p.add_argument("--bwd", **flag, help="the *_bwd op: the gradient through the rotation, out of place")
    harness.add_direction_arg(p)
    return p


def main(argv=None):
    args = make_parser().parse_args(argv)
    op = select_op(args)
    cases, seen = [], set()
    for dname in args.dtype:
        for label, s, (hq, hk, d) in shapes(args):
            case = rope_case(op, label, s, args.B, hq, hk, d, harness.DTYPES[dname], args)
            if (tuple(case.dims.items()), dname) not in seen:
                seen.add((tuple(case.dims.items()), dname))
                cases.append(case)
    hq, hk, d = head_layout(harness.load_models("llama3-8B", [])["llama3-8B"])
    tiny = [rope_case(op, "llama3-8B", 4, min(args.B, 2), hq, hk, d, torch.bfloat16, args)]
    return harness.run(args, "rope", cases, PROVIDERS, tiny)


if __name__ == "__main__":
    main()
