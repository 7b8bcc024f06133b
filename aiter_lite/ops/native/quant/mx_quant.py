"""aiter's MX / NV block quantization in plain PyTorch (fp32 math): the reference of
``aiter_lite.ops.triton.quant.mx_quant``, same names, signatures and layouts (its module
doc has the formats and rules), and the decoders that turn packed values and scales back
into floats (``mxfp4_dequant``, ``mxfp8_dequant``, ``nvfp4_dequant``, ``unshuffle_scale``).

The rules, as integer arithmetic on fp32 bits: a block's amax is the largest ``|x|`` (NaN
above inf); its e8m0 exponent s (``scaling_mode``) clamped to [-127, 127], 127 for inf;
values ``x * 2^-s`` rounded to e2m1 (to nearest even, saturating at 6) or converted to fp8
(saturating); a NaN block's scale 0xFF, its values code 0 (e2m1) or NaN (fp8). NVFP4: the
block scale ``global_scale * (amax * (1/6))`` saturated and rounded to e4m3, values times
``1 / (scale * (1 / global_scale))`` (0 for a 0 scale), as vLLM's reference.
"""

from __future__ import annotations

import math

import torch

from aiter_lite.ops.native.activation import ACTIVATIONS
from aiter_lite.ops.native.quant.fused_fp8_quant import _norms, _rms
from aiter_lite.spec.quant import get_fp8_e4m3_dtype, quant_range

__all__ = ["dynamic_mxfp4_quant", "dynamic_mxfp8_quant", "dynamic_nvfp4_quant", "act_mul_and_mxfp4_quant",
           "fused_rms_mxfp4_quant", "fused_flatten_mxfp4_quant", "fused_rms_mxfp8_quant", "fused_flatten_mxfp8_quant",
           "e2m1_to_float", "e8m0_to_float", "mxfp4_dequant", "mxfp8_dequant", "nvfp4_dequant", "shuffle_scale",
           "unshuffle_scale"]

MX_BLOCK = 32
NV_BLOCK = 16
E2M1_MAX = 6.0
E2M1_VALUES = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0)
_INF_BITS = 0x7F800000


# ---------------------------------------------------------------------------
# the rules


def _blocks(y: torch.Tensor, group: int) -> torch.Tensor:
    """(..., N) as (..., ceil(N / group), group), the last block padded with zeros."""
    n = y.shape[-1]
    pad = -n % group
    if pad:
        y = torch.nn.functional.pad(y, (0, pad))
    return y.unflatten(-1, (y.shape[-1] // group, group))


def _pow2(k: torch.Tensor) -> torch.Tensor:
    """``2.0 ** k`` (fp32, exact) for int32 k in [-126, 127]."""
    return ((k + 127) << 23).view(torch.float32)


def _e8m0_exponent(amax_bits: torch.Tensor, q_max: float, scaling: str) -> torch.Tensor:
    """The exponent s (int32, [-127, 127]) of a block scale 2^s from a NaN-free amax's bits."""
    if scaling == "rceil":
        v = (amax_bits.view(torch.float32) / torch.full((), q_max, device=amax_bits.device)).view(torch.int32)
        e, emax = (v >> 23) + ((v & 0x7FFFFF) != 0).int(), 0
    else:
        emax = math.floor(math.log2(q_max))
        e = {"even": lambda b: (b + 0x200000) >> 23, "floor": lambda b: b >> 23,
             "ceil": lambda b: (b >> 23) + ((b & 0x7FFFFF) != 0).int()}[scaling](amax_bits)
    return torch.where(e >= 255, 127, (e - 127 - emax).clamp(-127, 127))


def _e2m1(v: torch.Tensor) -> torch.Tensor:
    """fp32 as e2m1 codes (int32, sign in bit 3): nearest even, saturated to +-6; NaN is 0."""
    a = v.abs()
    bits = torch.where(a < E2M1_MAX, a, 0.0).view(torch.int32)
    normal = ((bits + 0x1FFFFF + ((bits >> 22) & 1)) >> 22) - 252
    sub = torch.round(torch.where(a < 1.0, a, 0.0) * 2).int()
    code = torch.where(a >= E2M1_MAX, 7, torch.where(a < 1.0, sub, normal))
    code = code | ((v.view(torch.int32) >> 28) & 8)
    return torch.where(v.isnan(), 0, code)


def _pack(codes: torch.Tensor) -> torch.Tensor:
    """e2m1 codes (..., N), N even, two a byte: column 2k low, 2k + 1 high."""
    return (codes[..., 0::2] | (codes[..., 1::2] << 4)).to(torch.uint8)


def _mx(y: torch.Tensor, fmt: str, scaling: str = "even", q_dtype: torch.dtype | None = None):
    """fp32 rows (M, N) as MX blocks of 32: (packed e2m1 (M, N // 2) uint8 or fp8 (M, N), e8m0 (M, G) uint8)."""
    n = y.shape[-1]
    q_max = E2M1_MAX if fmt == "mxfp4" else quant_range(q_dtype)[1]
    b = _blocks(y, MX_BLOCK)
    bits = b.abs().view(torch.int32).amax(-1)
    nan = bits > _INF_BITS
    s = _e8m0_exponent(bits.clamp(max=_INF_BITS), q_max, scaling)
    v = b * _pow2((-s).clamp(min=-126))[..., None] * torch.where(s > 126, 0.5, 1.0)[..., None]
    scale = torch.where(nan, 255, s + 127).to(torch.uint8)
    if fmt == "mxfp8":
        v = torch.where(nan[..., None], float("nan"), v)
        return v.flatten(-2)[..., :n].clamp(-q_max, q_max).to(q_dtype), scale
    return _pack(torch.where(nan[..., None], 0, _e2m1(v)).flatten(-2)[..., :n]), scale


def _nv(y: torch.Tensor, global_scale: torch.Tensor | None, s_dtype: torch.dtype):
    """fp32 rows (M, N) as NVFP4 blocks of 16: (packed e2m1 (M, N // 2), e4m3 scales (M, G))."""
    n = y.shape[-1]
    b = _blocks(y, NV_BLOCK)
    sf = b.abs().amax(-1) * torch.tensor(1.0 / 6.0, dtype=torch.float32, device=y.device)
    g = None if global_scale is None else global_scale.float().reshape(())
    if g is not None:
        sf = g * sf
    s_max = quant_range(s_dtype)[1]
    scale = sf.clamp(-s_max, s_max).to(s_dtype)
    sd = scale.float()
    if g is not None:
        sd = sd * torch.where(g == 0, 0.0, 1.0 / g)
    inv = torch.where(sd == 0, 0.0, 1.0 / sd)
    return _pack(_e2m1(b * inv[..., None]).flatten(-2)[..., :n]), scale


def _column_major(s: torch.Tensor) -> torch.Tensor:
    """(M, G) scales as aiter returns them: the (G, M) buffer's transpose."""
    buf = torch.empty((s.shape[1], s.shape[0]), dtype=s.dtype, device=s.device)
    buf.copy_(s.t())
    return buf.t()


def _padded_rows_cols(m: int, g: int) -> tuple[int, int]:
    return -(-m // 256) * 256, -(-g // 8) * 8


def shuffle_scale(scale: torch.Tensor, shuffle: bool = True) -> torch.Tensor:
    """(M, G) e8m0 scales in aiter's padded buffer (M, G rounded up to 256 and 8; padding
    127), laid out as aiter's ``e8m0_shuffle`` (``shuffle_scale``) with ``shuffle``."""
    m, g = scale.shape
    sm, sn = _padded_rows_cols(m, g)
    buf = torch.full((sm, sn), 127, dtype=torch.uint8, device=scale.device)
    buf[:m, :g] = scale
    if not shuffle:
        return buf
    return buf.view(sm // 32, 2, 16, sn // 8, 2, 4).permute(0, 3, 5, 2, 4, 1).contiguous().view(sm, sn)


def unshuffle_scale(buf: torch.Tensor, m: int, g: int) -> torch.Tensor:
    """The (m, g) row-major scales of a buffer :func:`shuffle_scale` (or a kernel with
    ``shuffle``) laid out."""
    sm, sn = buf.shape
    return buf.reshape(sm // 32, sn // 8, 4, 16, 2, 2).permute(0, 5, 3, 1, 4, 2).reshape(sm, sn)[:m, :g]


# ---------------------------------------------------------------------------
# the ops


def dynamic_mxfp4_quant(x, scaling_mode="even"):
    q, s = _mx(x.float(), "mxfp4", scaling_mode)
    return q, _column_major(s)


def dynamic_mxfp8_quant(x, scale=None, quant_dtype=torch.float8_e4m3fn):
    lead, k = tuple(x.shape[:-1]), x.shape[-1]
    q, s = _mx(x.reshape(math.prod(lead), k).float(), "mxfp8", q_dtype=quant_dtype)
    if scale is not None:
        scale.copy_(s)
        if tuple(scale.shape[:-1]) == lead:
            return q.view(*lead, k), scale
        s = scale
    return q.view(*lead, k), s.view(*lead, s.shape[-1])


def dynamic_nvfp4_quant(x, global_scale=None):
    q, s = _nv(x.float(), global_scale, get_fp8_e4m3_dtype(x.device))
    return q, _column_major(s)


def act_mul_and_mxfp4_quant(x, activation, scaling_mode="even", shuffle=False, scale_shuffle_padding=False):
    n = x.shape[-1] // 2
    xf = x.float()
    q, s = _mx(ACTIVATIONS[activation](xf[:, :n]) * xf[:, n:], "mxfp4", scaling_mode)
    return q, shuffle_scale(s, shuffle) if shuffle or scale_shuffle_padding else s


def fused_rms_mxfp4_quant(x1, x1_weight, x1_epsilon, x2=None, x2_weight=None, x2_epsilon=0.0, res1=None,
                          shuffle=False, scale_shuffle_padding=False, output_unquantized_inp1=False, inargs="auto"):
    y, out1, out2, out_res1 = _norms(x1, x1_weight, x1_epsilon, x2, x2_weight, x2_epsilon, res1,
                                     output_unquantized_inp1)
    q, s = _mx(y, "mxfp4")
    if shuffle or scale_shuffle_padding:
        s = shuffle_scale(s, bool(shuffle))
    return (q, s), out1, out2, out_res1


def fused_flatten_mxfp4_quant(x):
    m, n1, n2 = x.shape
    q, s = _mx(x.reshape(m, n1 * n2).float(), "mxfp4")
    return q, _column_major(s)


def fused_rms_mxfp8_quant(x, weight, eps, y=None, scale=None):
    q_dtype = get_fp8_e4m3_dtype(x.device) if y is None else y.dtype
    q, s = _mx(_rms(x.float(), weight, eps), "mxfp8", q_dtype=q_dtype)
    if y is not None:
        q = y.copy_(q)
    if scale is not None:
        s = scale.copy_(s)
    return q, s


def fused_flatten_mxfp8_quant(x, quant_dtype=torch.float8_e4m3fn):
    m, n1, n2 = x.shape
    return _mx(x.reshape(m, n1 * n2).float(), "mxfp8", q_dtype=quant_dtype)


# ---------------------------------------------------------------------------
# decoders


def e2m1_to_float(x_fp4: torch.Tensor) -> torch.Tensor:
    """Packed e2m1 (..., n) uint8 as fp32 (..., 2n): the low nibble first."""
    x = x_fp4.view(torch.uint8)
    c = torch.stack((x & 0xF, x >> 4), -1).flatten(-2).int()  # no host table: CUDA-graph capturable
    m = c & 7
    v = torch.where(m < 2, m * 0.5, (2 + (m & 1)) * torch.exp2(((m >> 1) - 2).float()))
    return torch.where(c >= 8, -v, v).float()


def e8m0_to_float(scale: torch.Tensor) -> torch.Tensor:
    """e8m0 bytes as fp32 ``2^(b - 127)`` (exact, 2^-127 a denormal); 0xFF is NaN."""
    b = scale.view(torch.uint8).double()
    return torch.where(b == 255, float("nan"), torch.exp2(b - 127)).float()


def _per_column(scale: torch.Tensor, n: int, group: int) -> torch.Tensor:
    return scale.float().repeat_interleave(group, -1)[..., :n]


def mxfp4_dequant(x_fp4: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """MXFP4 values (M, N // 2) and their (M, ceil(N / 32)) e8m0 scales (any strides, not
    shuffled) as fp32 (M, N)."""
    v = e2m1_to_float(x_fp4)
    return v * _per_column(e8m0_to_float(scale), v.shape[-1], MX_BLOCK)


def mxfp8_dequant(y: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """MXFP8 values (..., K) and their (..., ceil(K / 32)) e8m0 scales as fp32."""
    return y.float() * _per_column(e8m0_to_float(scale), y.shape[-1], MX_BLOCK)


def nvfp4_dequant(x_fp4: torch.Tensor, scale: torch.Tensor, global_scale: torch.Tensor | None = None) -> torch.Tensor:
    """NVFP4 values (M, N // 2), their (M, ceil(N / 16)) e4m3 scales and the global scale
    (None: 1) as fp32 (M, N): ``code * scale / global_scale``."""
    v = e2m1_to_float(x_fp4)
    out = v * _per_column(scale, v.shape[-1], NV_BLOCK)
    return out if global_scale is None else out / global_scale.float().reshape(())
