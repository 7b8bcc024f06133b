"""Benchmark aiter_lite.vllm's ops (vLLM's signatures) against the same kernels under aiter's names.

    python op_benchmarks/bench_vllm.py --providers triton,aiter,native,compile       # M = 1..16384
    python op_benchmarks/bench_vllm.py --op rms_norm rotary_embedding -M 1 16 --cudagraph --providers triton,aiter
    python op_benchmarks/bench_vllm.py --host -M 1 --providers triton,aiter          # and each call's host time

Providers: triton (the vLLM form: ``aiter_lite.vllm.ops.<op>``, out-parameters allocated once),
aiter (the same computation through this project's aiter-form op: rms_norm, fused_add_rms_norm,
rope_cached_thd_positions_2c_fwd_inplace, topk_softmax, topk_sigmoid, biased_grouped_topk; not
in the default set), native (the fp32 reference in torch), compile (torch.compile of it).
The vLLM form adds no kernel: its time should match aiter's; ``--host`` also prints the host
time of one eager call of each (calls back to back, nothing waiting on the GPU).
Shapes are (M, N): M tokens; N the hidden size (norms), heads x head_size of the model's query
(rotary: key with the model's KV heads; cos_sin_cache in the activation dtype), or the experts
(routing: deepseek-v3's 256 in 8 groups, 4 kept, top-8; 64 for the ungrouped routers).
Bytes moved (e = element size):
    rms_norm                read x, weight; write out                          (2 M N + N) e
    fused_add_rms_norm      read x, residual, weight; write x, residual         (4 M N + N) e
    rotary_embedding        read and write q and k, read their table rows       2 M (QH + KH) D e + M D e
    topk_softmax / sigmoid  read logits; write fp32 weights, int32 ids, indices  M N e + 12 M K
    grouped_topk            read scores; write fp32 weights, int32 ids           M N 4 + 8 M K
"""

import pathlib
import statistics
import sys
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

from op_benchmarks.utils import harness  # noqa: E402  (sets TRITON_INTERPRET on CPU before aiter_lite loads)

import torch  # noqa: E402

from aiter_lite.ops.triton import moe_routing as tri_route  # noqa: E402
from aiter_lite.ops.triton.normalization import rmsnorm as tri_rms  # noqa: E402
from aiter_lite.ops.triton.rope import rope as tri_rope  # noqa: E402
from aiter_lite.vllm import ops  # noqa: E402

OPS = ("rms_norm", "fused_add_rms_norm", "rotary_embedding", "topk_softmax", "topk_sigmoid", "grouped_topk")
EPS = 1e-6
TOPK, GROUPS, KEEP = 8, 8, 4
DEFAULT_MODELS = ["llama3-8B", "deepseek-v3"]
DEFAULT_M = [1, 16, 128, 1024, 4096, 16384]


def _route_agrees(result, reference):
    w, ids = result[0].float(), result[1].long()
    rw, rids = reference[0].float(), reference[1].long()
    a, b = ids.sort(-1), rids.sort(-1)
    return bool(torch.equal(a.values, b.values)
                and torch.allclose(w.gather(1, a.indices), rw.gather(1, b.indices), atol=1e-4, rtol=1e-4))


def _case(op, label, dims, dtype):
    m, n = dims["M"], dims["N"]
    e = dtype.itemsize
    dev = harness.DEVICE
    hd, qh, kh = dims.get("D", 128), dims.get("QH", 1), dims.get("KH", 1)

    def make_inputs():
        if op in ("rms_norm", "fused_add_rms_norm"):
            return (torch.randn(m, n, device=dev, dtype=dtype), torch.randn(m, n, device=dev, dtype=dtype),
                    torch.randn(n, device=dev, dtype=dtype))
        if op == "rotary_embedding":
            f = torch.arange(4096, dtype=torch.float64)[:, None] / 10000 ** (torch.arange(0, hd, 2) / hd)[None, :]
            cache = torch.cat((f.cos(), f.sin()), -1).to(dtype).to(dev)
            return (torch.randint(0, 4096, (m,), device=dev), torch.randn(m, qh * hd, device=dev, dtype=dtype),
                    torch.randn(m, kh * hd, device=dev, dtype=dtype), cache)
        logits = torch.randn(m, n, device=dev, dtype=dtype if op != "grouped_topk" else torch.float32)
        return logits, torch.randn(n, device=dev) * 0.1

    nbytes = {"rms_norm": (2 * m * n + n) * e, "fused_add_rms_norm": (4 * m * n + n) * e,
              "rotary_embedding": 2 * m * (qh + kh) * hd * e + m * hd * e,
              "topk_softmax": m * n * e + 12 * m * TOPK, "topk_sigmoid": m * n * e + 12 * m * TOPK,
              "grouped_topk": m * n * 4 + 8 * m * TOPK}[op]
    return harness.Case(op=op, label=label, dims=dims, dtype=dtype, rows=m, nbytes=nbytes, make_inputs=make_inputs,
                        agrees=_route_agrees if op.startswith(("topk", "grouped")) else None)


def _route_outputs(logits):
    """The routing ops' outputs, allocated once a case: fp32 weights, int32 ids and indices."""
    w = torch.empty(logits.shape[0], TOPK, device=logits.device)
    ids = torch.empty(logits.shape[0], TOPK, device=logits.device, dtype=torch.int32)
    return w, ids, torch.empty_like(ids)


def _vllm(case, inputs):
    op = case.op
    if op == "rms_norm":
        x, _, w = inputs
        out = torch.empty_like(x)
        return lambda: (ops.rms_norm(out, x, w, EPS), out)[1]
    if op == "fused_add_rms_norm":
        x, r, w = (t.clone() for t in inputs)
        return lambda: (ops.fused_add_rms_norm(x, r, w, EPS), (x, r))[1]
    if op == "rotary_embedding":
        pos, q, k, cache = inputs
        q, k = q.clone(), k.clone()
        return lambda: (ops.rotary_embedding(pos, q, k, case.dims["D"], cache, True), (q, k))[1]
    logits, bias = inputs
    w, ids, tei = _route_outputs(logits)
    if op == "topk_softmax":
        return lambda: (ops.topk_softmax(w, ids, tei, logits, True), (w, ids))[1]
    if op == "topk_sigmoid":
        return lambda: (ops.topk_sigmoid(w, ids, tei, logits, True, bias), (w, ids))[1]
    return lambda: ops.grouped_topk(logits, GROUPS, KEEP, TOPK, True, 2.5, bias, 1)


def _aiter(case, inputs):
    op = case.op
    if op == "rms_norm":
        x, _, w = inputs
        return lambda: tri_rms.rms_norm(x, w, EPS, casting_mode="llama")
    if op == "fused_add_rms_norm":
        x, r, w = (t.clone() for t in inputs)
        return lambda: (tri_rms.fused_add_rms_norm(x, r, w, EPS, casting_mode="llama"), (x, r))[1]
    if op == "rotary_embedding":
        pos, q, k, cache = inputs
        d = case.dims["D"]
        q, k = q.clone().view(-1, q.shape[1] // d, d), k.clone().view(-1, k.shape[1] // d, d)
        cos, sin = cache[:, :d // 2], cache[:, d // 2:]
        flat = (q.view(q.shape[0], -1), k.view(k.shape[0], -1))
        return lambda: (tri_rope.rope_cached_thd_positions_2c_fwd_inplace(q, k, cos, sin, pos, 0, True, False), flat)[1]
    logits, bias = inputs
    w, ids, tei = _route_outputs(logits)
    if op == "topk_softmax":
        return lambda: (tri_route.topk_softmax(w, ids, tei, logits, True), (w, ids))[1]
    if op == "topk_sigmoid":  # aiter's topk_sigmoid has no bias and no renormalization: the biased grouped form
        return lambda: (tri_route.biased_grouped_topk(logits, bias, w, ids, 1, 1, True), (w, ids))[1]
    return lambda: (tri_route.biased_grouped_topk(logits, bias, w, ids, GROUPS, KEEP, True, 2.5), (w, ids))[1]


def _native_fn(op, d):
    if op == "rms_norm":
        def f(x, r, w):
            xf = x.float()
            return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + EPS)).to(x.dtype) * w
    elif op == "fused_add_rms_norm":
        def f(x, r, w):
            s = (x.float() + r.float()).to(x.dtype)
            sf = s.float()
            return (sf * torch.rsqrt(sf.pow(2).mean(-1, keepdim=True) + EPS)).to(x.dtype) * w, s
    elif op == "rotary_embedding":
        def f(pos, q, k, cache):
            cos, sin = cache[pos].float().chunk(2, -1)

            def turn(x):
                x = x.float().view(x.shape[0], -1, d)
                a, b = x[..., :d // 2], x[..., d // 2:]
                c, s = cos[:, None], sin[:, None]
                return torch.cat((a * c - b * s, b * c + a * s), -1).flatten(1)
            return turn(q).to(q.dtype), turn(k).to(k.dtype)
    elif op == "grouped_topk":
        def f(logits, bias):
            s = logits.float().sigmoid()
            key = s + bias
            t, n = s.shape
            g = key.view(t, GROUPS, -1).topk(2, -1).values.sum(-1)
            keep = torch.zeros_like(g).scatter_(1, g.topk(KEEP, -1).indices, 1).bool()
            key = key.masked_fill(~keep.repeat_interleave(n // GROUPS, 1), float("-inf"))
            ids = key.topk(TOPK, -1).indices
            w = s.gather(1, ids)
            return w / w.sum(-1, keepdim=True) * 2.5, ids
    else:
        sigmoid = op == "topk_sigmoid"

        def f(logits, bias):
            p = logits.float().sigmoid() if sigmoid else logits.float().softmax(-1)
            ids = (p + bias if sigmoid else p).topk(TOPK, -1).indices
            w = p.gather(1, ids)
            return w / w.sum(-1, keepdim=True), ids
    return f


def _native(case, inputs):
    f = _native_fn(case.op, case.dims.get("D", 128))
    return lambda: f(*inputs)


_compiled = {}


def _compile(case, inputs):
    key = (case.op, case.dims.get("D", 128))
    if key not in _compiled:
        _compiled[key] = harness.compile_static(_native_fn(*key))
    f = _compiled[key]
    return lambda: f(*inputs)


PROVIDERS = {"triton": _vllm, "aiter": _aiter, "native": _native, "compile": _compile}


def _host(cases, providers):
    """Host time of one eager call per provider (µs), the median of 5 rounds."""
    print("\nhost time of one eager call, us (calls back to back)")
    for case in cases:
        inputs = case.make_inputs()
        times = _host_times([PROVIDERS[name](case, inputs) for name in providers])
        print(f"  {case.op:20s} {case.label:12s} M={case.dims['M']:<6d} " +
              "  ".join(f"{k} {v:6.1f}" for k, v in zip(providers, times)))


def _more_pairs(m: int) -> list:
    """The other vLLM-form ops at m tokens (llama3-8B / DeepSeek-V3 widths) beside the aiter-form
    call of the same kernel (None where this project has no other form): (name, vLLM, aiter)."""
    from aiter_lite.ops.triton import activation as act
    from aiter_lite.ops.triton.fusions import fused_kv_cache as kvc
    from aiter_lite.ops.triton.quant import act_quant, fused_fp8_quant, norm_quant, quant
    from aiter_lite.spec.quant import get_fp8_e4m3_dtype

    dev, bf = harness.DEVICE, torch.bfloat16
    fp8 = get_fp8_e4m3_dtype(dev)
    x, g, out = (torch.randn(m, 14336 * k, device=dev, dtype=bf) for k in (1, 2, 1))
    h, w, r = torch.randn(m, 4096, device=dev, dtype=bf), torch.randn(4096, device=dev, dtype=bf), \
        torch.randn(m, 4096, device=dev, dtype=bf)
    h7, w7 = torch.randn(m, 7168, device=dev, dtype=bf), torch.randn(7168, device=dev, dtype=bf)
    q8, s1 = torch.empty(m, 4096, device=dev, dtype=fp8), torch.tensor([0.02], device=dev)
    qi, sm, zm = torch.empty(m, 4096, device=dev, dtype=torch.int8), torch.empty(m, 1, device=dev), \
        torch.empty(m, 1, device=dev, dtype=torch.int32)
    azp = torch.tensor([3], device=dev, dtype=torch.int32)
    k, v = torch.randn(m, 8, 128, device=dev, dtype=bf), torch.randn(m, 8, 128, device=dev, dtype=bf)
    kc, vc = torch.zeros(64, 16, 8, 128, device=dev, dtype=bf), torch.zeros(64, 16, 8, 128, device=dev, dtype=bf)
    kcp, vcp = torch.zeros(64, 8, 16, 16, 8, device=dev, dtype=bf), torch.zeros(64, 8, 128, 16, device=dev, dtype=bf)
    slots = torch.randperm(1024, device=dev)[:m]
    mla = torch.zeros(64, 16, 576, device=dev, dtype=torch.uint8)
    kv_c, k_pe = torch.randn(m, 512, device=dev, dtype=bf), torch.randn(m, 64, device=dev, dtype=bf)
    c8, c16 = torch.zeros(4, 16, 8, 128, device=dev, dtype=torch.uint8), torch.empty(4, 16, 8, 128, device=dev,
                                                                                     dtype=bf)
    return [
        ("silu_and_mul", lambda: ops.silu_and_mul(out, g), lambda: act.act_and_mul_rounded(out, g, "silu")),
        ("mul_and_silu", lambda: ops.mul_and_silu(out, g),
         lambda: act.act_and_mul_rounded(out, g, "silu", False)),
        ("gelu_and_mul", lambda: ops.gelu_and_mul(out, g), lambda: act.act_and_mul_rounded(out, g, "gelu")),
        ("gelu_tanh_and_mul", lambda: ops.gelu_tanh_and_mul(out, g),
         lambda: act.act_and_mul_rounded(out, g, "gelu_tanh")),
        ("fatrelu_and_mul", lambda: ops.fatrelu_and_mul(out, g, 0.1), lambda: act.fatrelu_and_mul(out, g, 0.1)),
        ("swigluoai_and_mul", lambda: ops.swigluoai_and_mul(out, g), lambda: act.swigluoai_and_mul(out, g)),
        ("gelu_new", lambda: ops.gelu_new(out, x), lambda: act.gelu_new(x)),
        ("gelu_fast", lambda: ops.gelu_fast(out, x), lambda: act.gelu_fast(x)),
        ("gelu_quick", lambda: ops.gelu_quick(out, x), lambda: act.gelu_quick(x)),
        ("reshape_and_cache_flash", lambda: ops.reshape_and_cache_flash(k, v, kc, vc, slots, "auto", s1, s1),
         lambda: kvc.kv_cache_write(k, v, kc, vc, slots)),
        ("reshape_and_cache", lambda: ops.reshape_and_cache(k, v, kcp, vcp, slots, "auto", s1, s1),
         lambda: kvc.kv_cache_write(k, v, kcp, vcp, slots, None, None, False)),
        ("concat_and_cache_mla", lambda: ops.concat_and_cache_mla(kv_c, k_pe, mla, slots, "fp8", s1), None),
        ("convert_fp8", lambda: ops.convert_fp8(c16, c8, 0.5, "fp8"),
         lambda: kvc.convert_kv_cache(c16, c8.view(fp8), 0.5)),
        ("scaled_fp8_quant static", lambda: ops.scaled_fp8_quant(h, s1),
         lambda: quant.static_per_tensor_quant_fp8_i8(torch.empty_like(q8), h, s1)),
        ("scaled_fp8_quant per token", lambda: ops.scaled_fp8_quant(h, None, None, None, True),
         lambda: quant.dynamic_per_token_quant_fp8_i8(torch.empty_like(q8), h, torch.empty(m, 1, device=dev))),
        ("scaled_int8_quant static azp", lambda: ops.scaled_int8_quant(h, s1, azp, False),
         lambda: quant.static_per_tensor_int8_azp_quant(torch.empty_like(qi), h, s1, azp)),
        ("scaled_int8_quant dynamic azp", lambda: ops.scaled_int8_quant(h, None, None, False),
         lambda: quant.dynamic_per_token_int8_azp_quant(torch.empty_like(qi), h, torch.empty_like(sm),
                                                         torch.empty_like(zm))),
        ("per_token_group_quant_fp8", lambda: ops.per_token_group_quant_fp8(h, 128),
         lambda: quant.per_token_group_quant_fp8(h, 128)),
        ("rms_norm_dynamic_per_token_quant", lambda: ops.rms_norm_dynamic_per_token_quant(h, w, EPS, fp8, None, r),
         lambda: norm_quant.rms_norm_dynamic_per_token_quant(torch.empty_like(q8), h, w, torch.empty(m, 1, device=dev),
                                                             EPS, None, r)),
        ("rms_norm_per_block_quant", lambda: ops.rms_norm_per_block_quant(h7, w7, EPS, fp8, [1, 128]),
         lambda: fused_fp8_quant.fused_rms_fp8_group_quant(h7, w7, EPS, group_size=128, dtype_quant=fp8)),
        ("silu_and_mul_per_block_quant", lambda: ops.silu_and_mul_per_block_quant(g[:, :8192], 128, fp8),
         lambda: act_quant.act_mul_and_fp8_group_quant(g[:, :8192], "silu", 128, fp8, False)),
    ]


def _host_times(fns, calls=200, rounds=5):
    """Host time of one eager call of each function (µs), the median of ``rounds``."""
    res = []
    for fn in fns:
        if fn is None:
            res.append(None)
            continue
        for _ in range(20):
            fn()
        ts = []
        for _ in range(rounds):
            t0 = time.perf_counter()
            for _ in range(calls):
                fn()
            ts.append((time.perf_counter() - t0) / calls * 1e6)
            if harness.ON_GPU:
                torch.cuda.synchronize()
        res.append(statistics.median(ts))
    return res


def _host_more(m: int):
    print(f"\nhost time of one eager call, us, M={m}: the vLLM form and the aiter form of the same kernel")
    rows = []
    for name, vllm_fn, aiter_fn in _more_pairs(m):
        tv, ta = _host_times((vllm_fn, aiter_fn), *((200, 5) if harness.ON_GPU else (2, 1)))
        rows.append((name, tv, ta))
        print(f"  {name:34s} vllm {tv:6.1f}   aiter " + ("     -" if ta is None else f"{ta:6.1f}   vllm - aiter "
                                                            f"{tv - ta:+5.1f}"))
    return rows


def main(argv=None):
    p = harness.make_parser(__doc__.splitlines()[0], ("M", "N"))
    p.add_argument("--op", nargs="+", choices=OPS, default=list(OPS))
    p.add_argument("--host", action="store_true", help="also print each provider's host time of one eager call")
    args = p.parse_args(argv)
    if args.shape:
        raise SystemExit("bench_vllm: --shape is not used here; give --model and -M")
    models = harness.load_models(args.model, DEFAULT_MODELS)
    ms = args.M or DEFAULT_M
    dtype = torch.bfloat16
    cases = []
    for op in args.op:
        for label, cfg in models.items():
            hd = cfg.get("head_dim", cfg["hidden_size"] // cfg["num_attention_heads"])
            for m in ms:
                if op in ("rms_norm", "fused_add_rms_norm"):
                    dims = {"M": m, "N": cfg["hidden_size"]}
                elif op == "rotary_embedding":
                    if "kv_lora_rank" in cfg:
                        continue  # MLA's rotary part is its own op
                    dims = {"M": m, "N": cfg["num_attention_heads"] * hd, "QH": cfg["num_attention_heads"],
                            "KH": cfg["num_key_value_heads"], "D": hd}
                elif "num_experts" not in cfg:
                    continue
                else:
                    dims = {"M": m, "N": cfg["num_experts"] if op == "grouped_topk" else 64}
                cases.append(_case(op, label, dims, dtype))
    tiny = [_case(op, "tiny", {"M": 3, "N": 64, "QH": 2, "KH": 1, "D": 32} if op == "rotary_embedding"
                  else {"M": 3, "N": 64}, dtype) for op in args.op]
    df = harness.run(args, "vllm", cases, PROVIDERS, tiny)
    if args.host:
        _host(cases if harness.ON_GPU else tiny,
              [q for q in (args.providers or "triton,aiter").split(",") if q in ("triton", "aiter")])
        _host_more(ms[0] if harness.ON_GPU else 3)
    return df


if __name__ == "__main__":
    main()
