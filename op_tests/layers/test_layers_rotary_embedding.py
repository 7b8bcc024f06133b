"""RotaryEmbedding and get_rope: every scaling type against an fp64 formula written here
(per-frequency Python math for the frequencies and mscale, the rotation as a complex
product), in place on strided q / k views, on both backends (which agree with each other),
the env switch (aiter's AITER_ROPE_TRITON_BACKEND / AITER_ROPE_NATIVE_BACKEND included), and
every bad argument."""

import math

import pytest
import torch

from aiter_lite.layers import (
    DeepseekScalingRotaryEmbedding,
    DynamicNTKScalingRotaryEmbedding,
    LinearScalingRotaryEmbedding,
    Llama3RotaryEmbedding,
    RotaryEmbedding,
    YaRNScalingRotaryEmbedding,
    get_rope,
)
from op_tests.utils import DEVICE, DTYPES, assert_close

BACKENDS = ["native", "triton"]

# rope_scaling dicts (with the max_position and base a model would pass) chosen so that every
# branch of each formula is taken: YaRN / DeepSeek ramps over a few frequencies, Llama 3 keeps,
# blends and divides, DeepSeek's mscale ratio is not 1.
CASES = {
    "default": (48, 10000.0, None),
    "linear": (32, 10000.0, {"rope_type": "linear", "factor": 2.5}),
    "dynamic": (32, 10000.0, {"type": "dynamic", "factor": 2.0}),
    "yarn": (20000, 10000.0, {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 4096,
                              "beta_fast": 32, "beta_slow": 1, "attn_factor": 0.9, "extrapolation_factor": 1.0}),
    "llama3": (64, 500000.0, {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                              "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}),
    "deepseek_yarn": (16384, 10000.0, {"type": "deepseek_yarn", "factor": 4.0,
                                       "original_max_position_embeddings": 4096, "beta_fast": 32, "beta_slow": 1,
                                       "mscale": 0.707, "mscale_all_dim": 0.5, "attn_factor": 1.1}),
}
CLASSES = {"default": RotaryEmbedding, "linear": LinearScalingRotaryEmbedding,
           "dynamic": DynamicNTKScalingRotaryEmbedding, "yarn": YaRNScalingRotaryEmbedding,
           "llama3": Llama3RotaryEmbedding, "deepseek_yarn": DeepseekScalingRotaryEmbedding}


def _yarn_mscale(factor, m=1.0):
    return 0.1 * m * math.log(factor) + 1.0 if factor > 1 else 1.0


def ref_spec(kind, rd, max_pos, base, s):
    """(inverse frequencies as Python floats, position scale, mscale, table rows) of one case."""
    half = rd // 2
    inv = [base ** (-2.0 * i / rd) for i in range(half)]
    if kind == "default":
        return inv, 1.0, 1.0, max_pos
    f = s["factor"]
    if kind == "linear":
        return inv, 1.0 / f, 1.0, math.ceil(max_pos * f)
    if kind == "dynamic":
        ntk_base = base * (f * f - f + 1) ** (rd / (rd - 2))
        return [ntk_base ** (-2.0 * i / rd) for i in range(half)], 1.0, 1.0, math.ceil(max_pos * f)
    orig = s["original_max_position_embeddings"]
    if kind == "llama3":
        lo, hi = s["low_freq_factor"], s["high_freq_factor"]
        out = []
        for w in inv:
            wavelen = 2 * math.pi / w
            if wavelen < orig / hi:
                out.append(w)
            elif wavelen > orig / lo:
                out.append(w / f)
            else:
                smooth = (orig / wavelen - lo) / (hi - lo)
                out.append((1 - smooth) * w / f + smooth * w)
        return out, 1.0, 1.0, max_pos

    def corr_dim(rotations):
        return rd * math.log(orig / (rotations * 2 * math.pi)) / (2 * math.log(base))

    lo = max(math.floor(corr_dim(s.get("beta_fast", 32))), 0)
    hi = min(math.ceil(corr_dim(s.get("beta_slow", 1))), rd - 1)
    hi = hi + 0.001 if lo == hi else hi
    out = []
    for i, w in enumerate(inv):
        extrapolate = (1 - min(max((i - lo) / (hi - lo), 0.0), 1.0)) * s.get("extrapolation_factor", 1.0)
        out.append(w / f * (1 - extrapolate) + w * extrapolate)
    if kind == "yarn":
        return out, 1.0, _yarn_mscale(f) * s.get("attn_factor", 1.0), max(math.ceil(orig * f), max_pos)
    mscale = _yarn_mscale(f, s.get("mscale", 1.0)) / _yarn_mscale(f, s.get("mscale_all_dim", 0.0))
    return out, 1.0, mscale * s.get("attn_factor", 1.0), math.ceil(orig * f)


def ref_rope(x, positions, rd, neox, spec):
    """fp64 (T, H, D) result: each channel pair (a, b) of the first ``rd`` channels becomes
    ``(a + ib) * mscale * exp(i * position * scale * inv_freq)``."""
    inv, pscale, mscale, _ = spec
    y = x.double().clone()
    theta = torch.tensor([[float(p) * pscale * w for w in inv] for p in positions], dtype=torch.float64)
    theta = theta.reshape(len(positions), len(inv))
    turn = (mscale * torch.polar(torch.ones_like(theta), theta)).to(y.device)[:, None, :]
    lo, hi = (slice(0, rd // 2), slice(rd // 2, rd)) if neox else (slice(0, rd, 2), slice(1, rd, 2))
    z = torch.complex(y[..., lo], y[..., hi]) * turn
    y[..., lo], y[..., hi] = z.real, z.imag
    return y


def bits(t):
    return t.contiguous().view({2: torch.int16, 4: torch.int32}[t.element_size()])


def make_rope(kind, head_size, rd, neox, backend, dtype=torch.float32):
    max_pos, base, scaling = CASES[kind]
    rope = get_rope(head_size, rd, max_pos, base, neox, scaling, dtype, backend=backend).to(DEVICE)
    return rope, ref_spec(kind, rd, max_pos, base, scaling or {})


@pytest.mark.parametrize("kind", CASES)
def test_tables_match_formula(kind):
    rope, spec = make_rope(kind, 64, 64, True, "native", torch.bfloat16)
    inv, pscale, mscale, rows = spec
    assert type(rope) is CLASSES[kind]
    angles = torch.outer(torch.arange(rows, dtype=torch.float64) * pscale, torch.tensor(inv, dtype=torch.float64))
    for table, want in ((rope.cos_cache, angles.cos()), (rope.sin_cache, angles.sin())):
        assert table.dtype == torch.float32 and table.shape == (rows, 32), (table.dtype, table.shape)
        assert_close(table, mscale * want, atol=2e-7, rtol=0)
    assert torch.equal(rope.cos_sin_cache, torch.cat([rope.cos_cache, rope.sin_cache], dim=-1))


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("neox", [True, False], ids=["neox", "gptj"])
@pytest.mark.parametrize("kind", CASES)
def test_scaling_types(kind, neox, backend):
    dtype = DTYPES[(list(CASES).index(kind) + neox) % len(DTYPES)]
    rope, spec = make_rope(kind, 64, 64, neox, backend, dtype)
    t, qh, kh = 5, 4, 2
    positions = torch.randint(0, spec[3], (t,), device=DEVICE)
    positions[0] = spec[3] - 1  # the last row
    q = torch.randn(t, qh * 64, device=DEVICE).to(dtype)
    k = torch.randn(t, kh, 64, device=DEVICE).to(dtype)
    want_q = ref_rope(q.view(t, qh, 64), positions.tolist(), 64, neox, spec).view(t, -1)
    want_k = ref_rope(k, positions.tolist(), 64, neox, spec)
    out_q, out_k = rope(positions, q, k)
    assert out_q is q and out_k is k
    assert_close(q, want_q, name="query")
    assert_close(k, want_k, name="key")


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_dtypes(dtype, backend):
    rope, spec = make_rope("default", 128, 128, True, backend, dtype)
    positions = torch.randint(0, spec[3], (7,), device=DEVICE, dtype=torch.int32)
    q = torch.randn(7, 2, 128, device=DEVICE).to(dtype) * 3
    k = torch.randn(7, 128, device=DEVICE).to(dtype)
    want_q = ref_rope(q, positions.tolist(), 128, True, spec)
    want_k = ref_rope(k.view(7, 1, 128), positions.tolist(), 128, True, spec).view(7, 128)
    rope(positions, q, k)
    assert_close(q, want_q, name="query")
    assert_close(k, want_k, name="key")
    assert rope.cos_cache.dtype == torch.float32 and f"dtype={dtype}" in repr(rope)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("layout", ["flat", "heads", "qkv"])
@pytest.mark.parametrize("head_size,rd", [(128, 64), (80, 40), (64, 16)])
def test_partial_rotary_layouts(head_size, rd, layout, backend):
    """The first rd channels of each head rotate, the rest keep their bits (NaN included);
    q / k slices of a fused qkv row leave v and the row padding untouched."""
    t, qh, kh, neox = 5, 3, 1, rd != 40
    rope, spec = make_rope("default", head_size, rd, neox, backend, torch.bfloat16)
    qkv = torch.randn(t, (qh + 2 * kh) * head_size + 3, device=DEVICE).to(torch.bfloat16)
    for j in range(qh + kh):
        qkv[:, j * head_size + rd: (j + 1) * head_size:7] = float("nan")
    q, k = qkv[:, :qh * head_size], qkv[:, qh * head_size:(qh + kh) * head_size]
    if layout == "heads":
        q, k = q.view(t, qh, head_size), k.view(t, kh, head_size)
    elif layout == "flat":
        q, k = q.clone(), k.clone()
    before = qkv.clone()
    positions = torch.randint(0, spec[3], (t,), device=DEVICE)
    want_q = ref_rope(q.reshape(t, qh, head_size), positions.tolist(), rd, neox, spec)
    want_k = ref_rope(k.reshape(t, kh, head_size), positions.tolist(), rd, neox, spec)
    out_q, out_k = rope(positions, q, k)
    assert out_q is q and out_k is k
    q3, k3 = q.view(t, qh, head_size), k.view(t, kh, head_size)
    assert_close(q3[..., :rd], want_q[..., :rd], name="query rotary part")
    assert_close(k3[..., :rd], want_k[..., :rd], name="key rotary part")
    old = before[:, :(qh + kh) * head_size].view(t, qh + kh, head_size)[..., rd:]
    assert torch.equal(bits(torch.cat([q3, k3], dim=1)[..., rd:]), bits(old)), "a pass-through channel changed"
    if layout != "flat":
        assert torch.equal(bits(qkv[:, (qh + kh) * head_size:]), bits(before[:, (qh + kh) * head_size:])), \
            "v or the row padding changed"


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("with_offsets", [False, True], ids=["positions", "offsets"])
@pytest.mark.parametrize("with_key", [True, False], ids=["qk", "q_only"])
@pytest.mark.parametrize("t", [0, 1, 5])
def test_tokens_offsets_and_key(t, with_key, with_offsets, backend):
    rope, spec = make_rope("linear", 64, 32, False, backend, torch.float16)
    rows = spec[3]
    positions = torch.randint(0, rows // 2, (1, t), device=DEVICE)  # any shape with T elements
    offsets = torch.randint(0, rows // 2, (1, t), device=DEVICE, dtype=torch.int32) if with_offsets else None
    index = (positions + offsets if with_offsets else positions).flatten().tolist()
    q = torch.randn(t, 2, 64, device=DEVICE).to(torch.float16)
    k = torch.randn(t, 64, device=DEVICE).to(torch.float16) if with_key else None
    want_q = ref_rope(q, index, 32, False, spec)
    want_k = ref_rope(k.view(t, 1, 64), index, 32, False, spec).view(t, 64) if with_key else None
    out_q, out_k = rope(positions, q, k, offsets)
    assert out_q is q and out_k is k
    assert_close(q, want_q, name="query")
    if with_key:
        assert_close(k, want_k, name="key")


def test_linear_scaling_factors_stack():
    """vLLM's LoRA layout: one table per factor, reached through scaling_factor_to_offset."""
    rope = LinearScalingRotaryEmbedding(32, 32, 16, 10000, True, [1.0, 2.0, 4.0], None, backend="native").to(DEVICE)
    assert rope.scaling_factor_to_offset == {1.0: 0, 2.0: 16, 4.0: 48}
    assert rope.cos_cache.shape == (16 + 32 + 64, 16)
    positions = torch.tensor([3, 30, 63], device=DEVICE)
    offsets = torch.full_like(positions, rope.scaling_factor_to_offset[4.0])
    q = torch.randn(3, 32, device=DEVICE)
    spec = ref_spec("linear", 32, 16, 10000.0, {"factor": 4.0})
    want = ref_rope(q.view(3, 1, 32), positions.tolist(), 32, True, spec).view(3, 32)
    rope(positions, q, None, offsets)
    assert_close(q, want)


def test_get_rope_arguments():
    a = get_rope(128, 128, 64, 10000, True, None, torch.float16, 0.25, backend="native")
    assert type(a) is RotaryEmbedding and a.rotary_dim == 32 and a.cos_cache.shape == (64, 16)
    assert get_rope(128, 128, 64, 10000, True, None, torch.float16, 0.25, backend="native") is a  # shared
    scaling = {"rope_type": "yarn", "factor": 2, "original_max_position_embeddings": 32, "beta_fast": 8,
               "truncate": False, "unrelated_key": [1, 2]}
    yarn = get_rope(64, 64, 100, 10000, False, scaling, backend="native")
    assert type(yarn) is YaRNScalingRotaryEmbedding and yarn.cos_cache.shape == (100, 32)
    assert yarn.truncate is False and yarn.beta_fast == 8 and not yarn.is_neox_style
    assert get_rope(64, 64, 100, 10000, False, {"rope_type": "default"}, backend="native").cos_cache.shape == (100, 32)


@pytest.mark.parametrize("env,expected", [
    ({"AITER_ROPE_BACKEND": "native"}, "native"),
    ({"AITER_ROPE_BACKEND": "triton"}, "triton"),
    ({"AITER_ROPE_NATIVE_BACKEND": "1"}, "native"),
    ({"AITER_ROPE_TRITON_BACKEND": "1"}, "triton"),
    ({"AITER_BACKEND": "native"}, "native"),
    ({"AITER_BACKEND": "triton", "AITER_ROPE_NATIVE_BACKEND": "1"}, "native"),
    ({"AITER_ROPE_BACKEND": "triton", "AITER_ROPE_NATIVE_BACKEND": "1"}, "triton"),
])
def test_env_picks_backend(monkeypatch, env, expected):
    for var in ("AITER_BACKEND", "AITER_ROPE_BACKEND", "AITER_ROPE_TRITON_BACKEND", "AITER_ROPE_NATIVE_BACKEND"):
        monkeypatch.delenv(var, raising=False)
    for var, value in env.items():
        monkeypatch.setenv(var, value)
    rope = RotaryEmbedding(64, 64, 8, 10000, True, None).to(DEVICE)
    assert rope.backend == expected
    positions, q = torch.arange(3, device=DEVICE), torch.randn(3, 64, device=DEVICE)
    q1, q2 = q.clone(), q.clone()
    rope(positions, q1)
    getattr(rope, f"forward_{expected}")(positions, q2)
    assert torch.equal(q1, q2)
    assert get_rope(64, 64, 8, 10000, True, {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                             "high_freq_factor": 4.0,
                                             "original_max_position_embeddings": 8}).backend == expected
    assert RotaryEmbedding(64, 64, 8, 10000, True, None, backend="native").backend == "native"


def test_module_state():
    rope = DeepseekScalingRotaryEmbedding(32, 32, 8, 10000, True, 4.0, torch.bfloat16, mscale=1.0,
                                          mscale_all_dim=1.0, backend="native")
    assert rope.state_dict() == {} and sorted(dict(rope.named_buffers())) == ["cos_cache", "sin_cache"]
    assert list(rope.parameters()) == [] and rope.mscale == 1.0
    rope.to(device=DEVICE, dtype=torch.float16)  # a model-wide cast leaves the tables fp32
    assert rope.cos_cache.device == DEVICE and rope.sin_cache.dtype == torch.float32
    text = repr(rope)
    assert "DeepseekScalingRotaryEmbedding(head_size=32, rotary_dim=32" in text and "backend=native" in text


def test_bad_arguments(monkeypatch):
    def rope(**kw):
        args = {"head_size": 64, "rotary_dim": 64, "max_position_embeddings": 16, "base": 10000,
                "is_neox_style": True, "dtype": None, "backend": "native"}
        return RotaryEmbedding(**{**args, **kw})

    for kw, exc, match in [
        ({"rotary_dim": 63}, ValueError, "rotary_dim must be even and at most head_size 64, got 63"),
        ({"rotary_dim": 128}, ValueError, "rotary_dim must be even and at most head_size 64, got 128"),
        ({"rotary_dim": 64.0}, TypeError, "rotary_dim must be an int, got float 64.0"),
        ({"head_size": 0}, ValueError, "head_size must be >= 1, got 0"),
        ({"max_position_embeddings": 0}, ValueError, "max_position_embeddings must be >= 1, got 0"),
        ({"base": 0}, ValueError, "base must be positive and finite, got 0"),
        ({"base": "1e4"}, TypeError, "base must be a real number, got str"),
        ({"is_neox_style": 2}, TypeError, "is_neox_style must be a bool, got 2"),
        ({"dtype": "bf16"}, TypeError, "dtype must be a torch.dtype or None, got str"),
        ({"backend": "cuda"}, ValueError, "RotaryEmbedding: backend must be one of"),
    ]:
        with pytest.raises(exc, match=match):
            rope(**kw)
    monkeypatch.setenv("AITER_ROPE_BACKEND", "cuda")
    with pytest.raises(ValueError, match="AITER_ROPE_BACKEND='cuda' is not valid"):
        RotaryEmbedding(64, 64, 16, 10000, True, None)
    monkeypatch.delenv("AITER_ROPE_BACKEND")
    with pytest.raises(ValueError, match="rotary_dim must be at least 4"):
        DynamicNTKScalingRotaryEmbedding(8, 2, 16, 10000, True, 2.0, None, backend="native")
    with pytest.raises(ValueError, match="scaling_factor must be positive and finite, got -2"):
        YaRNScalingRotaryEmbedding(8, 8, 16, 10000, True, -2, None, backend="native")

    for kw, exc, match in [
        ({"rope_scaling": {"rope_type": "su"}}, ValueError,
         "unknown rope_scaling type 'su'; known types: default, linear, dynamic, yarn, llama3, deepseek_yarn"),
        ({"rope_scaling": {"type": "linear"}}, ValueError, "type 'linear' needs the key 'factor'"),
        ({"rope_scaling": {"type": "yarn", "factor": 2}}, ValueError, "needs the key 'original_max_position_"),
        ({"rope_scaling": {"type": "dynamic", "alpha": 2}}, ValueError, "'alpha' is not supported"),
        ({"rope_scaling": {"type": "default", "mrope_section": [8, 12, 12]}}, ValueError, "mrope_section"),
        ({"rope_scaling": [("type", "linear")]}, TypeError, "rope_scaling must be a dict or None, got list"),
        ({"partial_rotary_factor": 0.0}, ValueError, r"partial_rotary_factor must be in \(0, 1\], got 0.0"),
        ({"partial_rotary_factor": 1.5}, ValueError, r"partial_rotary_factor must be in \(0, 1\], got 1.5"),
    ]:
        with pytest.raises(exc, match=match):
            get_rope(64, 64, 16, 10000, **kw, backend="native")

    layer = rope().to(DEVICE)
    pos = torch.arange(3, device=DEVICE)
    q, k = torch.randn(3, 128, device=DEVICE), torch.randn(3, 64, device=DEVICE)
    for args, exc, match in [
        ((pos, torch.randn(3, 100, device=DEVICE)), ValueError,
         r"query last dim must be a multiple of head_size 64, got shape \(3, 100\)"),
        ((pos, q, torch.randn(3, 0, device=DEVICE)), ValueError, r"key must hold at least one head, got shape \(3, 0\)"),
        ((pos, torch.randn(3, 2, 32, device=DEVICE)), ValueError,
         r"query must be \[num_tokens, num_heads \* 64\] or \[num_tokens, num_heads, 64\].*got shape \(3, 2, 32\)"),
        ((pos, torch.randn(384, device=DEVICE)), ValueError, r"got shape \(384,\)"),
        ((pos[:2], q), ValueError, "query has 3 tokens but positions has 2 elements"),
        ((pos, q, k[:2]), ValueError, "key has 2 tokens but positions has 3 elements"),
        ((pos, q, k.half()), TypeError, "key must have the query's dtype torch.float32, got torch.float16"),
        ((pos, q.double()), TypeError, "query must be float16, bfloat16 or float32, got torch.float64"),
        ((pos.float(), q), TypeError, "positions must be int32 or int64, got torch.float32"),
        ((pos, q, k, pos[:2]), ValueError, r"offsets must have as many elements as positions \(3\), got shape \(2,\)"),
        ((pos, q, k, pos.to(torch.int16)), TypeError, "offsets must be int32 or int64, got torch.int16"),
        (([0, 1, 2], q), TypeError, "positions must be a torch.Tensor, got list"),
        ((pos, torch.randn(128, 3, device=DEVICE).t()), ValueError, "query must have unit stride in the last dim"),
        ((pos + 14, q, k), ValueError, r"positions must lie in \[0, 16\) \(the table's rows\), got values from 14 to 16"),
        ((pos, q, k, pos - 1), ValueError, r"positions \+ offsets must lie in \[0, 16\).*from -1 to 3"),
    ]:
        with pytest.raises(exc, match=match):
            layer(*args)
    monkeypatch.setenv("AITER_ROPE_CHECK_POSITIONS", "1")  # the Triton ops check GPU positions only when asked
    triton_layer = rope(backend="triton").to(DEVICE)
    with pytest.raises(ValueError, match=r"must lie in \[0, 16\)"):
        triton_layer(pos + 14, q, k)


def _rotate_both(rope, positions, q, k, offsets=None):
    """(query, key) after forward_native and after forward_triton, each on its own copies."""
    outs = []
    for fn in (rope.forward_native, rope.forward_triton):
        qi, ki = q.clone(), None if k is None else k.clone()
        out_q, out_k = fn(positions, qi, ki, offsets)
        assert out_q is qi and out_k is ki, "forward rotates in place and returns its inputs"
        outs.append((qi, ki))
    return outs


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("neox", [True, False], ids=["neox", "gptj"])
@pytest.mark.parametrize("kind", ["default", "dynamic", "yarn", "llama3"])
def test_native_matches_triton(kind, neox, dtype):
    rope, spec = make_rope(kind, 80, 48, neox, "native", dtype)
    t = 5
    positions = torch.randint(0, spec[3], (t,), device=DEVICE)
    q = torch.randn(t, 3 * 80, device=DEVICE).to(dtype)
    k = torch.randn(t, 1, 80, device=DEVICE).to(dtype)
    (q_n, k_n), (q_t, k_t) = _rotate_both(rope, positions, q, k)
    assert_close(q_t, q_n, name="query")
    assert_close(k_t, k_n, name="key")


@pytest.mark.parametrize("with_offsets", [False, True], ids=["positions", "offsets"])
@pytest.mark.parametrize("with_key", [True, False], ids=["qk", "q_only"])
@pytest.mark.parametrize("t", [0, 1, 7])
def test_native_matches_triton_tokens(t, with_key, with_offsets):
    rope, spec = make_rope("linear", 64, 64, True, "triton", torch.bfloat16)
    rows = spec[3]
    positions = torch.randint(0, rows // 2, (t,), device=DEVICE, dtype=torch.int32)
    offsets = torch.randint(0, rows // 2, (t,), device=DEVICE) if with_offsets else None
    qkv = torch.randn(t, 4 * 64 + 5, device=DEVICE).to(torch.bfloat16)  # strided q / k rows of a fused qkv
    q, k = qkv[:, :2 * 64], qkv[:, 2 * 64:3 * 64] if with_key else None
    (q_n, k_n), (q_t, k_t) = _rotate_both(rope, positions, q, k, offsets)
    assert_close(q_t, q_n, name="query")
    if with_key:
        assert_close(k_t, k_n, name="key")


@pytest.mark.parametrize("backend", BACKENDS)
def test_forward_is_the_picked_path(backend):
    rope, spec = make_rope("deepseek_yarn", 64, 64, False, backend, torch.float16)
    positions = torch.randint(0, spec[3], (4,), device=DEVICE)
    q, k = torch.randn(4, 2, 64, device=DEVICE).half(), torch.randn(4, 64, device=DEVICE).half()
    q1, k1, q2, k2 = q.clone(), k.clone(), q.clone(), k.clone()
    rope(positions, q1, k1)
    getattr(rope, f"forward_{backend}")(positions, q2, k2)
    assert torch.equal(bits(q1), bits(q2)) and torch.equal(bits(k1), bits(k2))


@pytest.mark.parametrize("backend", ["native", "triton"])
def test_batch_seq_leading_dims(backend):
    # vLLM accepts query / key with positions' leading dims: [batch, seq, heads * head_size]
    rope = RotaryEmbedding(32, 32, 64, 10000, True, None, backend=backend).to(DEVICE)
    pos = torch.randint(0, 64, (2, 3), device=DEVICE)
    q, k = torch.randn(2, 3, 4 * 32, device=DEVICE), torch.randn(2, 3, 1, 32, device=DEVICE)
    want_q, want_k = q.clone().view(6, 128), k.clone().view(6, 1, 32)
    rope(pos.view(6), want_q, want_k)
    got_q, got_k = rope(pos, q, k)
    assert got_q is q and got_k is k
    assert_close(q.view(6, 128), want_q, name="query")
    assert_close(k.view(6, 1, 32), want_k, name="key")


def test_get_rope_takes_vllms_rope_parameters():
    # current vLLM: get_rope(head_size, max_position, is_neox_style, rope_parameters, dtype)
    params = {"rope_theta": 500000.0, "rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
              "high_freq_factor": 4.0, "original_max_position_embeddings": 64, "partial_rotary_factor": 0.5}
    new = get_rope(64, 256, False, params, torch.bfloat16, backend="native")
    old = get_rope(64, 32, 256, 500000.0, False, {k: v for k, v in params.items()
                                                   if k not in ("rope_theta", "partial_rotary_factor")},
                   torch.bfloat16, backend="native")
    assert new is old and new.rotary_dim == 32 and not new.is_neox_style
    assert get_rope(64, max_position=256, is_neox_style=False, rope_parameters=params, dtype=torch.bfloat16,
                    backend="native") is old
    with pytest.raises(ValueError, match="get_rope: partial_rotary_factor must be in"):
        get_rope(64, 256, True, {"partial_rotary_factor": 1.5})
