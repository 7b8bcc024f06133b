"""``vllm.model_executor.layers.rotary_embedding`` on aiter_lite: ``RotaryEmbedding`` and
``get_rope(head_size, max_position, is_neox_style, rope_parameters, dtype)`` as current vLLM
calls them.

The module keeps vLLM's ``cos_sin_cache`` buffer ((max_position, rotary_dim) ``cat(cos,
sin)`` in ``dtype``); ``forward_native`` is vLLM's reference (new tensors), ``forward_cuda`` /
``forward_hip`` rotate ``query`` / ``key`` in place through ``ops.rotary_embedding`` with the
table in the query's dtype, as vLLM's kernel reads it. Query and key may be [tokens, heads *
head_size], [tokens, heads, head_size] or have leading dims matching ``positions``' (e.g.
[batch, seq, ...]).

The tables come from aiter_lite's rotary layers (angles in fp64, rounded once), so every
scaling type those compute is here: "default", "linear", "dynamic" (by "factor"), "yarn",
"llama3", "deepseek_yarn" / "deepseek_llama_scaling". Others vLLM has (multimodal
"mrope_section", "ntk", "xdrope", "longrope", "mllama4", "openpangu", dynamic by "alpha",
dual-chunk attention) raise a ValueError naming the type.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

from aiter_lite.layers import rotary_embedding as base_rope
from aiter_lite.vllm import _core_ops as ops
from aiter_lite.vllm.model_executor.custom_op import CustomOp

__all__ = ["RotaryEmbedding", "get_rope", "apply_rotary_emb_torch"]


def apply_rotary_emb_torch(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, is_neox_style: bool) -> torch.Tensor:
    """vLLM's reference rotation of x (..., rotary_dim) by cos / sin (tokens, rotary_dim / 2)."""
    cos = cos.unsqueeze(-2).to(x.dtype)
    sin = sin.unsqueeze(-2).to(x.dtype)
    if is_neox_style:
        x1, x2 = torch.chunk(x, 2, dim=-1)
    else:
        x1, x2 = x[..., ::2], x[..., 1::2]
    o1 = x1 * cos - x2 * sin
    o2 = x2 * cos + x1 * sin
    return torch.cat((o1, o2), dim=-1) if is_neox_style else torch.stack((o1, o2), dim=-1).flatten(-2)


@CustomOp.register("rotary_embedding")
class RotaryEmbedding(CustomOp):
    """vLLM's ``RotaryEmbedding(head_size, rotary_dim, max_position_embeddings, base,
    is_neox_style, dtype)``."""

    def __init__(self, head_size: int, rotary_dim: int, max_position_embeddings: int, base: float,
                 is_neox_style: bool, dtype: torch.dtype, *, rope_parameters: Mapping[str, Any] | None = None,
                 **custom_op_kwargs) -> None:
        super().__init__(**custom_op_kwargs)
        self.head_size = head_size
        self.rotary_dim = rotary_dim
        self.max_position_embeddings = max_position_embeddings
        self.base = base
        self.is_neox_style = is_neox_style
        self.dtype = dtype
        tables = base_rope.get_rope(head_size, rotary_dim, max_position_embeddings, base, is_neox_style,
                                    dict(rope_parameters or {}), dtype, backend="native")
        cache = torch.cat((tables.cos_cache, tables.sin_cache), dim=-1).to(dtype)
        self.cos_sin_cache: torch.Tensor
        self.register_buffer("cos_sin_cache", cache, persistent=False)

    def forward_native(self, positions: torch.Tensor, query: torch.Tensor, key: torch.Tensor | None = None,
                       offsets: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor | None]:
        """vLLM's reference: new tensors."""
        if offsets is not None:
            positions = positions + offsets
        positions = positions.flatten()
        n = positions.shape[0]
        cos, sin = self.cos_sin_cache.index_select(0, positions).chunk(2, dim=-1)

        def turn(x):
            shape = x.shape
            x = x.view(n, -1, self.head_size)
            rot = apply_rotary_emb_torch(x[..., :self.rotary_dim], cos, sin, self.is_neox_style)
            return torch.cat((rot, x[..., self.rotary_dim:]), dim=-1).reshape(shape)

        return turn(query), None if key is None else turn(key)

    def forward_cuda(self, positions: torch.Tensor, query: torch.Tensor, key: torch.Tensor | None = None,
                     offsets: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor | None]:
        """In place through ``ops.rotary_embedding``; returns (query, key)."""
        if self.cos_sin_cache.device != query.device or self.cos_sin_cache.dtype != query.dtype:
            self.cos_sin_cache = self.cos_sin_cache.to(query.device, dtype=query.dtype)
        if offsets is not None:
            positions = positions + offsets
        ops.rotary_embedding(positions, query, key, self.head_size, self.cos_sin_cache, self.is_neox_style)
        return query, key

    def extra_repr(self) -> str:
        return (f"head_size={self.head_size}, rotary_dim={self.rotary_dim}, "
                f"max_position_embeddings={self.max_position_embeddings}, base={self.base}, "
                f"is_neox_style={self.is_neox_style}")


_ROPE_DICT: dict[tuple, RotaryEmbedding] = {}


def _frozen(value):
    if isinstance(value, (list, tuple)):
        return tuple(_frozen(v) for v in value)
    if isinstance(value, Mapping):
        return tuple(sorted((k, _frozen(v)) for k, v in value.items()))
    return value


def get_rope(head_size: int, max_position: int, is_neox_style: bool = True,
             rope_parameters: dict[str, Any] | None = None, dtype: torch.dtype | None = None,
             dual_chunk_attention_config: dict[str, Any] | None = None) -> RotaryEmbedding:
    """vLLM's ``get_rope``: ``rope_parameters`` holds "rope_theta" (10000), "rope_type"
    ("default") with its keys, and "partial_rotary_factor" (1.0); equal arguments return the
    same module."""
    if dual_chunk_attention_config is not None:
        raise ValueError("get_rope: dual-chunk attention rope (dual_chunk_attention_config) is not supported")
    if rope_parameters is not None and not isinstance(rope_parameters, Mapping):
        raise TypeError(f"get_rope: rope_parameters must be a dict or None, got {type(rope_parameters).__name__}")
    dtype = torch.get_default_dtype() if dtype is None else dtype
    params = dict(rope_parameters or {})
    base = params.get("rope_theta", 10000)
    partial = params.get("partial_rotary_factor", 1.0)
    if isinstance(partial, bool) or not isinstance(partial, (int, float)) or not 0.0 < partial <= 1.0:
        raise ValueError(f"get_rope: partial_rotary_factor must be in (0, 1], got {partial!r}")
    if not isinstance(head_size, int) or isinstance(head_size, bool) or head_size < 2:
        raise ValueError(f"get_rope: head_size must be an int >= 2, got {head_size!r}")
    rotary_dim = int(head_size * partial)
    key = (head_size, rotary_dim, max_position, is_neox_style, _frozen(params), dtype)
    if key not in _ROPE_DICT:
        scaling = {k: v for k, v in params.items() if k not in ("rope_theta", "partial_rotary_factor")}
        _ROPE_DICT[key] = RotaryEmbedding(head_size, rotary_dim, max_position, base, is_neox_style, dtype,
                                          rope_parameters=scaling)
    return _ROPE_DICT[key]
