"""Rotary position embedding modules, drop-ins for vLLM's ``rotary_embedding`` layers.

``forward(positions, query, key=None, offsets=None)`` rotates ``query`` and ``key``
([num_tokens, num_heads * head_size] or [num_tokens, num_heads, head_size], rows may be
strided) in place and returns them, as vLLM's CUDA path does. The first ``rotary_dim``
channels of every head turn by the angle ``position * inv_freq[i]`` of their pair: NeoX pairs
(i, i + rotary_dim / 2), GPT-J pairs (2i, 2i + 1); the other channels keep their bits.
``forward_native`` and ``forward_triton`` take the same arguments; ``forward`` runs the one
picked when the module is built.

The cos / sin tables are built once, when the module is built: the angles in fp64, rounded
once to fp32, whatever ``dtype`` says (math is fp32 on every backend; ``dtype`` is recorded
for the repr only). Each table is (rows, rotary_dim // 2): frequency ``i`` serves channel
pair ``i``. The backend (AITER_ROPE_BACKEND, aiter's AITER_ROPE_TRITON_BACKEND /
AITER_ROPE_NATIVE_BACKEND, else AITER_BACKEND) is read once, when the module is built.

A position (+ offset) outside the table raises ``ValueError`` on the native backend, and on
the Triton backend where the positions are on the CPU or AITER_ROPE_CHECK_POSITIONS=1;
otherwise the Triton kernel writes NaN into that token's rotary channels.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import torch

from aiter_lite import envs
from aiter_lite.layers.base import BackendLayer
from aiter_lite.ops.native.rope import rope as native_rope
from aiter_lite.ops.triton.rope import rope as triton_rope
from aiter_lite.spec.rope import RotateStyle
from aiter_lite.utils.checks import check_bool, check_int, check_real, check_triton_device

_FLOATS = (torch.float16, torch.bfloat16, torch.float32)
_INDICES = (torch.int32, torch.int64)


def _check_int(owner: str, name: str, value, minimum: int = 1) -> int:
    return check_int(owner, name, value, minimum)


def _check_float(owner: str, name: str, value, *, positive: bool = True) -> float:
    return check_real(owner, name, value, positive=positive)


# YaRN helpers, as in vLLM: which frequencies are interpolated, and the attention scale.

def yarn_find_correction_dim(num_rotations: float, dim: int, base: float = 10000,
                             max_position_embeddings: int = 2048) -> float:
    """The (fractional) frequency index whose wavelength makes ``num_rotations`` turns over
    ``max_position_embeddings`` positions."""
    return dim * math.log(max_position_embeddings / (num_rotations * 2 * math.pi)) / (2 * math.log(base))


def yarn_find_correction_range(low_rot: float, high_rot: float, dim: int, base: float = 10000,
                               max_position_embeddings: int = 2048, truncate: bool = True) -> tuple[float, float]:
    """Frequency indices [low, high] over which YaRN ramps from extrapolation to interpolation,
    clamped to [0, dim - 1]; ``truncate`` rounds them outward to integers."""
    low = yarn_find_correction_dim(low_rot, dim, base, max_position_embeddings)
    high = yarn_find_correction_dim(high_rot, dim, base, max_position_embeddings)
    if truncate:
        low, high = math.floor(low), math.ceil(high)
    return max(low, 0), min(high, dim - 1)


def yarn_linear_ramp_mask(low: float, high: float, dim: int, dtype: torch.dtype = torch.float64) -> torch.Tensor:
    """(dim,) ramp: 0 up to index ``low``, 1 from ``high`` on, linear between."""
    if low == high:
        high += 0.001
    return ((torch.arange(dim, dtype=dtype) - low) / (high - low)).clamp(0, 1)


def yarn_get_mscale(scale: float = 1, mscale: float = 1) -> float:
    """YaRN's attention scale ``0.1 * mscale * ln(scale) + 1`` (1 where ``scale <= 1``)."""
    if scale <= 1:
        return 1.0
    return 0.1 * mscale * math.log(scale) + 1.0


class RotaryEmbedding(BackendLayer):
    """Rotary position embedding with cached cos / sin tables (vLLM's RotaryEmbedding).

    ``inv_freq[i] = base ** (-2i / rotary_dim)`` for ``i < rotary_dim // 2``; row ``p`` of the
    tables holds ``cos(p * inv_freq)`` and ``sin(p * inv_freq)`` for ``p < max_position_embeddings``.
    Buffers ``cos_cache`` and ``sin_cache`` (not in the state dict) move with the module.
    """

    family = "rope"

    def __init__(self, head_size: int, rotary_dim: int, max_position_embeddings: int, base: float,
                 is_neox_style: bool, dtype: torch.dtype | None, backend: str | None = None) -> None:
        super().__init__(backend)
        name = type(self).__name__
        _check_int(name, "head_size", head_size)
        _check_int(name, "rotary_dim", rotary_dim, 2)
        if rotary_dim % 2 or rotary_dim > head_size:
            raise ValueError(f"{name}: rotary_dim must be even and at most head_size {head_size}, got {rotary_dim}")
        _check_int(name, "max_position_embeddings", max_position_embeddings)
        _check_float(name, "base", base)
        is_neox_style = check_bool(name, "is_neox_style", is_neox_style)
        if dtype is not None and not isinstance(dtype, torch.dtype):
            raise TypeError(f"{name}: dtype must be a torch.dtype or None, got {type(dtype).__name__} {dtype!r}")
        self.head_size = head_size
        self.rotary_dim = rotary_dim
        self.max_position_embeddings = max_position_embeddings
        self.base = base
        self.is_neox_style = is_neox_style
        self.dtype = torch.get_default_dtype() if dtype is None else dtype
        self._rotate_style = RotateStyle.NEOX if is_neox_style else RotateStyle.GPTJ

        cos, sin = self._compute_cos_sin_cache().chunk(2, dim=-1)
        device = torch.get_default_device()
        self.cos_cache: torch.Tensor
        self.sin_cache: torch.Tensor
        self.register_buffer("cos_cache", cos.to(device, torch.float32).contiguous(), persistent=False)
        self.register_buffer("sin_cache", sin.to(device, torch.float32).contiguous(), persistent=False)

    def _apply(self, fn, recurse=True):
        """``.to(device)`` / ``.cuda()`` move the tables; a module-wide ``.half()`` or ``.to(dtype)``
        leaves them fp32."""
        tables = {name: self._buffers[name] for name in ("cos_cache", "sin_cache")}
        super()._apply(fn, recurse)
        for name, table in tables.items():
            moved = self._buffers[name]
            if moved.dtype != table.dtype:
                self._buffers[name] = table.to(moved.device)
        return self

    def _compute_inv_freq(self, base: float) -> torch.Tensor:
        """(rotary_dim // 2,) fp64 inverse frequencies ``base ** (-2i / rotary_dim)``."""
        return 1.0 / base ** (torch.arange(0, self.rotary_dim, 2, dtype=torch.float64) / self.rotary_dim)

    def _cos_sin(self, positions: torch.Tensor, inv_freq: torch.Tensor, mscale: float = 1.0) -> torch.Tensor:
        """(rows, rotary_dim) ``mscale * cat(cos, sin)`` of the angles ``positions x inv_freq``, fp64."""
        angles = torch.outer(positions.double(), inv_freq.double())
        return torch.cat((angles.cos(), angles.sin()), dim=-1) * mscale

    def _compute_cos_sin_cache(self) -> torch.Tensor:
        """(rows, rotary_dim) ``cat(cos, sin)``, as vLLM lays out ``cos_sin_cache``."""
        positions = torch.arange(self.max_position_embeddings, dtype=torch.float64)
        return self._cos_sin(positions, self._compute_inv_freq(self.base))

    @property
    def cos_sin_cache(self) -> torch.Tensor:
        """vLLM's (rows, rotary_dim) table ``cat(cos, sin)`` (a new tensor)."""
        return torch.cat((self.cos_cache, self.sin_cache), dim=-1)

    def forward(self, positions: torch.Tensor, query: torch.Tensor, key: torch.Tensor | None = None,
                offsets: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Rotate ``query`` (and ``key``) in place at ``positions`` (+ ``offsets``); returns them."""
        if self._backend == "triton":
            return self.forward_triton(positions, query, key, offsets)
        return self.forward_native(positions, query, key, offsets)

    def forward_native(self, positions: torch.Tensor, query: torch.Tensor, key: torch.Tensor | None = None,
                       offsets: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor | None]:
        """``forward`` through the plain-PyTorch ops; a position past the table raises."""
        return self._rotate(native_rope, positions, query, key, offsets, check_range=True)

    def forward_triton(self, positions: torch.Tensor, query: torch.Tensor, key: torch.Tensor | None = None,
                       offsets: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor | None]:
        """``forward`` through the Triton ops."""
        return self._rotate(triton_rope, positions, query, key, offsets, check_range=False)

    def _rotate(self, ops, positions, query, key, offsets, *, check_range: bool):
        positions, offsets = self._check_positions(positions, offsets, query)
        if ops is triton_rope:  # the caller's names: the op would call query x
            check_triton_device(type(self).__name__, "query", query)
        t = positions.numel()
        q = self._heads("query", query, t, None)
        k = None if key is None else self._heads("key", key, t, query)
        if t == 0:
            return query, key
        if self.cos_cache.device != query.device:
            self.to(query.device)
        if check_range and not torch.compiler.is_compiling():  # a host read: eager only
            self._check_range(positions, offsets)
        cos, sin, style = self.cos_cache, self.sin_cache, self._rotate_style
        if k is None:
            x, p = q.unsqueeze(1), positions.view(t, 1)
            if offsets is None:
                ops.rope_cached_positions_fwd_inplace(x, cos, sin, p, style, True, False)
            else:
                ops.rope_cached_positions_offsets_fwd_inplace(x, cos, sin, p, offsets.view(t, 1), style, True, False)
        elif offsets is None:
            ops.rope_cached_thd_positions_2c_fwd_inplace(q, k, cos, sin, positions, style, True, False)
        else:
            ops.rope_cached_thd_positions_offsets_2c_fwd_inplace(q, k, cos, sin, positions, offsets, style, True,
                                                                  False)
        return query, key

    def _check_positions(self, positions, offsets, query):
        """``positions`` (and ``offsets``) flattened to (T,), checked against ``query``."""
        name = type(self).__name__
        if not isinstance(query, torch.Tensor):
            raise TypeError(f"{name}: query must be a torch.Tensor, got {type(query).__name__}")
        flat = []
        for arg, value in (("positions", positions), ("offsets", offsets)):
            if value is None:
                flat.append(None)
                continue
            if not isinstance(value, torch.Tensor):
                raise TypeError(f"{name}: {arg} must be a torch.Tensor, got {type(value).__name__}")
            if value.dtype not in _INDICES:
                raise TypeError(f"{name}: {arg} must be int32 or int64, got {value.dtype}")
            if value.device != query.device:
                raise ValueError(f"{name}: {arg} must be on the query's device {query.device}, got {value.device}")
            flat.append(value.reshape(-1))
        if offsets is not None and flat[1].numel() != flat[0].numel():
            raise ValueError(f"{name}: offsets must have as many elements as positions ({flat[0].numel()}), "
                             f"got shape {tuple(offsets.shape)}")
        return flat[0], flat[1]

    def _heads(self, arg: str, x, t: int, query) -> torch.Tensor:
        """``x`` as a (T, heads, head_size) view (no copy), after checking its layout."""
        name = type(self).__name__
        if not isinstance(x, torch.Tensor):
            raise TypeError(f"{name}: {arg} must be a torch.Tensor, got {type(x).__name__}")
        if x.dtype not in _FLOATS:
            raise TypeError(f"{name}: {arg} must be float16, bfloat16 or float32, got {x.dtype}")
        if query is not None and x.dtype != query.dtype:
            raise TypeError(f"{name}: key must have the query's dtype {query.dtype}, got {x.dtype}")
        if query is not None and x.device != query.device:
            raise ValueError(f"{name}: key must be on the query's device {query.device}, got {x.device}")
        shape, hs = tuple(x.shape), self.head_size
        if x.dim() < 2 or (x.dim() >= 3 and shape[-1] % hs):
            raise ValueError(f"{name}: {arg} must be [num_tokens, num_heads * {hs}] or [num_tokens, num_heads, "
                             f"{hs}] (head_size {hs}; leading dims as positions' allowed), got shape {shape}")
        if shape[-1] % hs:
            raise ValueError(f"{name}: {arg} last dim must be a multiple of head_size {hs}, got shape {shape}")

        def count(dims):
            n = 1
            for d in dims:
                n *= d
            return n

        # the tokens: [num_tokens, ...] or [batch, seq, ...] as positions has them; then heads x
        # head_size in one dim or two
        two = shape[-1] == hs and x.dim() >= 3 and count(shape[:-2]) == t
        lead = shape[:-2] if two else shape[:-1]
        tokens = count(lead)
        heads = shape[-2] if two else shape[-1] // hs
        if heads == 0:
            raise ValueError(f"{name}: {arg} must hold at least one head, got shape {shape}")
        if tokens != t:
            raise ValueError(f"{name}: {arg} has {tokens} tokens but positions has {t} elements (its leading dims "
                             f"{lead} are the tokens)")
        if x.stride(-1) != 1 and x.numel() > 0:
            raise ValueError(f"{name}: {arg} must have unit stride in the last dim, got strides {x.stride()}")
        try:
            return x.view(t, heads, hs)
        except RuntimeError:
            raise ValueError(f"{name}: {arg} of shape {shape} and strides {x.stride()} cannot be viewed as (tokens, "
                             f"heads, {hs}) without a copy (it is rotated in place)") from None

    def _check_range(self, positions: torch.Tensor, offsets: torch.Tensor | None) -> None:
        """Every table row read must exist (the native reference would index out of bounds)."""
        rows = self.cos_cache.shape[0]
        index = positions.long() if offsets is None else positions.long() + offsets.long()
        lo, hi = int(index.min()), int(index.max())
        if lo < 0 or hi >= rows:
            what = "positions + offsets" if offsets is not None else "positions"
            raise ValueError(f"{type(self).__name__}: {what} must lie in [0, {rows}) (the table's rows), "
                             f"got values from {lo} to {hi}")

    def extra_repr(self) -> str:
        return (f"head_size={self.head_size}, rotary_dim={self.rotary_dim}, "
                f"max_position_embeddings={self.max_position_embeddings}, base={self.base}, "
                f"is_neox_style={self.is_neox_style}, dtype={self.dtype}, backend={self.backend}")


class LinearScalingRotaryEmbedding(RotaryEmbedding):
    """Linear (position interpolation) scaling: position ``p`` turns by ``(p / factor) * inv_freq``.

    As in vLLM, several factors stack their tables (``max_position_embeddings * factor`` rows
    each, in order); ``scaling_factor_to_offset`` gives each one's first row, to pass as ``offsets``.
    """

    def __init__(self, head_size: int, rotary_dim: int, max_position_embeddings: int, base: float,
                 is_neox_style: bool, scaling_factors: float | Sequence[float], dtype: torch.dtype | None,
                 backend: str | None = None) -> None:
        factors = list(scaling_factors) if isinstance(scaling_factors, (list, tuple)) else [scaling_factors]
        if not factors:
            raise ValueError(f"{type(self).__name__}: scaling_factors must hold at least one factor, got []")
        self.scaling_factors = [_check_float(type(self).__name__, "scaling_factors", f) for f in factors]
        super().__init__(head_size, rotary_dim, max_position_embeddings, base, is_neox_style, dtype, backend)

    def _compute_cos_sin_cache(self) -> torch.Tensor:
        inv_freq = self._compute_inv_freq(self.base)
        tables, self._scaling_factor_to_offset = [], {}
        offset = 0
        for factor in self.scaling_factors:
            rows = math.ceil(self.max_position_embeddings * factor)
            self._scaling_factor_to_offset[factor] = offset
            tables.append(self._cos_sin(torch.arange(rows, dtype=torch.float64) / factor, inv_freq))
            offset += rows
        return torch.cat(tables, dim=0)

    @property
    def scaling_factor_to_offset(self) -> dict[float, int]:
        return self._scaling_factor_to_offset

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, scaling_factors={self.scaling_factors}"


class DynamicNTKScalingRotaryEmbedding(RotaryEmbedding):
    """NTK-aware scaling, vLLM's "dynamic" form: a larger base for a table of
    ``max_position_embeddings * factor`` rows,
    ``base * (factor**2 - (factor - 1)) ** (rotary_dim / (rotary_dim - 2))``.
    """

    def __init__(self, head_size: int, rotary_dim: int, max_position_embeddings: int, base: float,
                 is_neox_style: bool, scaling_factor: float, dtype: torch.dtype | None,
                 backend: str | None = None) -> None:
        self.scaling_factor = _check_float(type(self).__name__, "scaling_factor", scaling_factor)
        if rotary_dim == 2:
            raise ValueError(f"{type(self).__name__}: rotary_dim must be at least 4 (the base grows by the power "
                             f"rotary_dim / (rotary_dim - 2)), got 2")
        super().__init__(head_size, rotary_dim, max_position_embeddings, base, is_neox_style, dtype, backend)

    def _compute_cos_sin_cache(self) -> torch.Tensor:
        factor = self.scaling_factor
        max_len = self.max_position_embeddings * factor
        base = self.base * (factor * max_len / self.max_position_embeddings - (factor - 1)) ** (
            self.rotary_dim / (self.rotary_dim - 2))
        positions = torch.arange(math.ceil(max_len), dtype=torch.float64)
        return self._cos_sin(positions, self._compute_inv_freq(base))

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, scaling_factor={self.scaling_factor}"


class YaRNScalingRotaryEmbedding(RotaryEmbedding):
    """YaRN (Peng et al.): high frequencies extrapolate, low ones interpolate by ``factor``, with a
    linear ramp between (``beta_fast`` / ``beta_slow`` rotations over the original context); cos and
    sin scale by ``mscale = yarn_get_mscale(factor) * attn_factor``.

    ``max_position_embeddings`` is the original context; the tables hold
    ``max(ceil(max_position_embeddings * factor), max_position or 0)`` rows.
    """

    def __init__(self, head_size: int, rotary_dim: int, max_position_embeddings: int, base: float,
                 is_neox_style: bool, scaling_factor: float, dtype: torch.dtype | None, *,
                 extrapolation_factor: float = 1, attn_factor: float = 1, beta_fast: float = 32,
                 beta_slow: float = 1, truncate: bool = True, max_position: int | None = None,
                 backend: str | None = None) -> None:
        name = type(self).__name__
        self.scaling_factor = _check_float(name, "scaling_factor", scaling_factor)
        self.extrapolation_factor = _check_float(name, "extrapolation_factor", extrapolation_factor, positive=False)
        self.attn_factor = _check_float(name, "attn_factor", attn_factor, positive=False)
        self.beta_fast = _check_float(name, "beta_fast", beta_fast)
        self.beta_slow = _check_float(name, "beta_slow", beta_slow)
        self.truncate = bool(truncate)
        self.max_position = None if max_position is None else _check_int(name, "max_position", max_position)
        self.mscale = self._mscale()
        super().__init__(head_size, rotary_dim, max_position_embeddings, base, is_neox_style, dtype, backend)

    def _mscale(self) -> float:
        return yarn_get_mscale(self.scaling_factor) * self.attn_factor

    def _rows(self) -> int:
        return max(math.ceil(self.max_position_embeddings * self.scaling_factor), self.max_position or 0)

    def _compute_inv_freq(self, scaling_factor: float) -> torch.Tensor:
        pos_freqs = self.base ** (torch.arange(0, self.rotary_dim, 2, dtype=torch.float64) / self.rotary_dim)
        low, high = yarn_find_correction_range(self.beta_fast, self.beta_slow, self.rotary_dim, self.base,
                                               self.max_position_embeddings, self.truncate)
        extrapolate = (1 - yarn_linear_ramp_mask(low, high, self.rotary_dim // 2)) * self.extrapolation_factor
        return (1 - extrapolate) / (scaling_factor * pos_freqs) + extrapolate / pos_freqs

    def _compute_cos_sin_cache(self) -> torch.Tensor:
        positions = torch.arange(self._rows(), dtype=torch.float64)
        return self._cos_sin(positions, self._compute_inv_freq(self.scaling_factor), self.mscale)

    def extra_repr(self) -> str:
        return (f"{super().extra_repr()}, scaling_factor={self.scaling_factor}, beta_fast={self.beta_fast}, "
                f"beta_slow={self.beta_slow}, mscale={self.mscale:.6g}")


class DeepseekScalingRotaryEmbedding(YaRNScalingRotaryEmbedding):
    """DeepSeek's YaRN: the same frequencies, with
    ``mscale = yarn_get_mscale(factor, mscale) / yarn_get_mscale(factor, mscale_all_dim) * attn_factor``
    and ``ceil(max_position_embeddings * factor)`` rows.
    """

    def __init__(self, head_size: int, rotary_dim: int, max_position_embeddings: int, base: float,
                 is_neox_style: bool, scaling_factor: float, dtype: torch.dtype | None, *,
                 extrapolation_factor: float = 1, attn_factor: float = 1, beta_fast: float = 32,
                 beta_slow: float = 1, mscale: float = 1, mscale_all_dim: float = 0,
                 backend: str | None = None) -> None:
        name = type(self).__name__
        self.mscale_factor = _check_float(name, "mscale", mscale, positive=False)
        self.mscale_all_dim = _check_float(name, "mscale_all_dim", mscale_all_dim, positive=False)
        super().__init__(head_size, rotary_dim, max_position_embeddings, base, is_neox_style, scaling_factor, dtype,
                         extrapolation_factor=extrapolation_factor, attn_factor=attn_factor, beta_fast=beta_fast,
                         beta_slow=beta_slow, backend=backend)

    def _mscale(self) -> float:
        return (yarn_get_mscale(self.scaling_factor, self.mscale_factor)
                / yarn_get_mscale(self.scaling_factor, self.mscale_all_dim) * self.attn_factor)


class Llama3RotaryEmbedding(RotaryEmbedding):
    """Llama 3.1 scaling: wavelengths below ``orig_max_position / high_freq_factor`` keep their
    frequency, those above ``orig_max_position / low_freq_factor`` divide it by ``factor``, and the
    band between blends the two linearly in ``orig_max_position / wavelength``.
    """

    def __init__(self, head_size: int, rotary_dim: int, max_position_embeddings: int, base: float,
                 is_neox_style: bool, dtype: torch.dtype | None, scaling_factor: float, low_freq_factor: float,
                 high_freq_factor: float, orig_max_position: int, backend: str | None = None) -> None:
        name = type(self).__name__
        self.scaling_factor = _check_float(name, "scaling_factor", scaling_factor)
        self.low_freq_factor = _check_float(name, "low_freq_factor", low_freq_factor)
        self.high_freq_factor = _check_float(name, "high_freq_factor", high_freq_factor)
        self.orig_max_position = _check_int(name, "orig_max_position", orig_max_position)
        super().__init__(head_size, rotary_dim, max_position_embeddings, base, is_neox_style, dtype, backend)

    def _compute_inv_freq(self, base: float) -> torch.Tensor:
        inv_freq = super()._compute_inv_freq(base)
        low, high = self.low_freq_factor, self.high_freq_factor
        wave_len = 2 * math.pi / inv_freq
        smooth = (self.orig_max_position / wave_len - low) / (high - low) if low != high else torch.zeros_like(inv_freq)
        scaled = inv_freq / self.scaling_factor
        blended = (1 - smooth) * scaled + smooth * inv_freq
        return torch.where(wave_len < self.orig_max_position / high, inv_freq,
                           torch.where(wave_len > self.orig_max_position / low, scaled, blended))

    def extra_repr(self) -> str:
        return (f"{super().extra_repr()}, scaling_factor={self.scaling_factor}, low_freq_factor={self.low_freq_factor}, "
                f"high_freq_factor={self.high_freq_factor}, orig_max_position={self.orig_max_position}")


ROPE_SCALING_TYPES = ("default", "linear", "dynamic", "yarn", "llama3", "deepseek_yarn", "deepseek_llama_scaling")
_YARN_KEYS = ("extrapolation_factor", "attn_factor", "beta_fast", "beta_slow", "truncate")
_DEEPSEEK_KEYS = ("extrapolation_factor", "attn_factor", "beta_fast", "beta_slow", "mscale", "mscale_all_dim")
_ROPE_CACHE: dict[tuple, RotaryEmbedding] = {}


class _Unhashable(Exception):
    pass


def _hashable(value: Any):
    """``value`` frozen into a hashable key: mappings as their items sorted by key (keys
    ordered by their repr where they do not compare), lists and tuples as tuples, sets as
    frozensets, array-likes through ``tolist()``; nested values likewise. Raises
    :class:`_Unhashable` where a value cannot be frozen (the module is then not shared)."""
    if isinstance(value, Mapping):
        items = [(_hashable(k), _hashable(v)) for k, v in value.items()]
        try:
            items.sort()
        except TypeError:
            items.sort(key=lambda kv: (type(kv[0]).__name__, repr(kv[0])))
        return ("__mapping__", tuple(items))
    if isinstance(value, (list, tuple)):
        return tuple(_hashable(v) for v in value)
    if isinstance(value, (set, frozenset)):
        return frozenset(_hashable(v) for v in value)
    if not isinstance(value, torch.Tensor) and callable(getattr(value, "tolist", None)):  # numpy arrays, scalars
        return _hashable(value.tolist())
    try:
        hash(value)
    except TypeError:
        raise _Unhashable from None
    return value


def get_rope(head_size: int, rotary_dim: int | None = None, max_position: int | None = None,
             base: float | Mapping[str, Any] | None = None, is_neox_style: bool | torch.dtype | None = True,
             rope_scaling: Mapping[str, Any] | None = None, dtype: torch.dtype | None = None,
             partial_rotary_factor: float = 1.0, *, backend: str | None = None,
             rope_parameters: Mapping[str, Any] | None = None) -> RotaryEmbedding:
    """The rotary embedding a model config asks for (vLLM's ``get_rope``), in either of vLLM's
    forms:

    * ``get_rope(head_size, rotary_dim, max_position, base, is_neox_style, rope_scaling, dtype,
      partial_rotary_factor)``: ``rope_scaling`` is the config's dict, its type under
      "rope_type" (or "type"), one of :data:`ROPE_SCALING_TYPES`, and that type's keys (other
      keys are ignored, as in vLLM); ``partial_rotary_factor`` (0, 1] scales ``rotary_dim``;
    * current vLLM's ``get_rope(head_size, max_position, is_neox_style, rope_parameters,
      dtype)`` (positional, or ``rope_parameters=`` by keyword): "rope_theta" (10000) is the
      base, "partial_rotary_factor" (1.0) gives rotary_dim = head_size x factor, "rope_type"
      and its keys the scaling.

    Equal arguments (and the same backend and default device) return the same module, so the
    layers of a model share one table.
    """
    if isinstance(base, Mapping) or rope_parameters is not None:
        if isinstance(base, Mapping):  # positional: (head_size, max_position, is_neox_style, rope_parameters, dtype)
            if rope_parameters is not None:
                raise TypeError("get_rope: rope_parameters given twice (positionally and by keyword)")
            if isinstance(is_neox_style, torch.dtype):  # the fifth: dtype
                dtype = is_neox_style
            max_position, is_neox_style, rope_parameters = rotary_dim, max_position, base
        elif max_position is None:  # (head_size, max_position, ..., rope_parameters=...)
            max_position = rotary_dim
        if not isinstance(rope_parameters, Mapping):
            raise TypeError(f"get_rope: rope_parameters must be a dict, got {type(rope_parameters).__name__}")
        params = dict(rope_parameters)
        partial = params.pop("partial_rotary_factor", 1.0)
        theta = params.pop("rope_theta", 10000)
        _check_int("get_rope", "head_size", head_size)
        partial = check_real("get_rope", "partial_rotary_factor", partial)
        if not 0.0 < partial <= 1.0:
            raise ValueError(f"get_rope: partial_rotary_factor must be in (0, 1], got {partial}")
        return get_rope(head_size, int(head_size * partial), max_position, theta,
                        True if is_neox_style is None else is_neox_style, params, dtype, backend=backend)
    if rotary_dim is None or max_position is None or base is None:
        raise TypeError("get_rope: needs (head_size, rotary_dim, max_position, base, ...) or vLLM's (head_size, "
                        "max_position, is_neox_style, rope_parameters, dtype)")
    # Checked before the cache key is built: a bad argument raises its own error, never an unhashable one.
    _check_int("get_rope", "head_size", head_size)
    _check_int("get_rope", "rotary_dim", rotary_dim, 2)
    _check_int("get_rope", "max_position", max_position)
    _check_float("get_rope", "base", base)
    is_neox_style = check_bool("get_rope", "is_neox_style", is_neox_style)
    if dtype is not None and not isinstance(dtype, torch.dtype):
        raise TypeError(f"get_rope: dtype must be a torch.dtype or None, got {type(dtype).__name__} {dtype!r}")
    partial_rotary_factor = check_real("get_rope", "partial_rotary_factor", partial_rotary_factor)
    if not 0.0 < partial_rotary_factor <= 1.0:
        raise ValueError(f"get_rope: partial_rotary_factor must be in (0, 1], got {partial_rotary_factor}")
    if rope_scaling is not None and not isinstance(rope_scaling, Mapping):
        raise TypeError(f"get_rope: rope_scaling must be a dict or None, got {type(rope_scaling).__name__}")
    if partial_rotary_factor < 1.0:
        rotary_dim = int(rotary_dim * partial_rotary_factor)
    dtype = torch.get_default_dtype() if dtype is None else dtype
    backend = envs.layer_backend("get_rope", "rope", backend)
    scaling = dict(rope_scaling or {})
    kind = scaling.get("rope_type", scaling.get("type", "default"))
    if not isinstance(kind, str) or kind not in ROPE_SCALING_TYPES:
        raise ValueError(f"get_rope: unknown rope_scaling type {kind!r}; known types: {', '.join(ROPE_SCALING_TYPES)}")

    try:
        cache_key = (head_size, rotary_dim, max_position, base, is_neox_style, _hashable(scaling), dtype, backend,
                     torch.get_default_device())
    except _Unhashable:  # a value that cannot be frozen (an unknown key's, most likely): a module of its own
        cache_key = None
    if cache_key in _ROPE_CACHE:
        return _ROPE_CACHE[cache_key]

    def need(key: str):
        if key not in scaling:
            raise ValueError(f"get_rope: rope_scaling type {kind!r} needs the key {key!r}; got keys {sorted(scaling)}")
        return scaling[key]

    def pick(keys):
        return {k: scaling[k] for k in keys if k in scaling}

    args = (head_size, rotary_dim, max_position, base, is_neox_style)
    if kind == "default":
        if "mrope_section" in scaling:
            raise ValueError("get_rope: multimodal rope (rope_scaling 'mrope_section') is not supported")
        rope = RotaryEmbedding(*args, dtype, backend)
    elif kind == "linear":
        rope = LinearScalingRotaryEmbedding(*args, need("factor"), dtype, backend)
    elif kind == "dynamic":
        if "alpha" in scaling:
            raise ValueError("get_rope: dynamic NTK scaling by 'alpha' is not supported; give 'factor'")
        rope = DynamicNTKScalingRotaryEmbedding(*args, need("factor"), dtype, backend)
    elif kind == "llama3":
        rope = Llama3RotaryEmbedding(*args, dtype, need("factor"), need("low_freq_factor"), need("high_freq_factor"),
                                     need("original_max_position_embeddings"), backend)
    else:
        original = need("original_max_position_embeddings")
        factor = need("factor")
        if kind == "yarn":
            rope = YaRNScalingRotaryEmbedding(head_size, rotary_dim, original, base, is_neox_style, factor, dtype,
                                              max_position=max_position, backend=backend, **pick(_YARN_KEYS))
        else:
            rope = DeepseekScalingRotaryEmbedding(head_size, rotary_dim, original, base, is_neox_style, factor,
                                                  dtype, backend=backend, **pick(_DEEPSEEK_KEYS))
    if cache_key is not None:
        _ROPE_CACHE[cache_key] = rope
    return rope
