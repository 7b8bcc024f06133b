"""fp8 activation quantization module, a drop-in for vLLM's ``QuantFP8``.

``QuantFP8(static, group_shape, num_token_padding=None, column_major_scales=False)`` and
``forward(x, scale=None, scale_ub=None) -> (x_q, scale)``:

* static (``group_shape`` :attr:`GroupShape.PER_TENSOR`): ``x_q = x / scale`` with the
  caller's ``scale`` (a one-element float32 tensor), which is returned as given;
* dynamic per tensor: one scale ``max(amax / q_max, 1 / (q_max * 512))``, shape (1,);
* dynamic per token (:attr:`GroupShape.PER_TOKEN`): a scale per row (every dim of x but the
  last), shape (*x.shape[:-1], 1), its amax capped at ``scale_ub`` when given;
* dynamic per group (``GroupShape(1, group_size)``, a power of 2 up to 8192): a scale
  ``max(amax, 1e-10) / q_max`` per ``group_size`` columns of a row, shape
  (*x.shape[:-1], ceil(N / group_size)) (a last group may be partial); with
  ``column_major_scales`` (2-D x) the (M, G) scales are a view of a (G, M) tensor (stride 1
  along the rows), as block-scaled GEMMs read them.

``x_q`` has the dtype :func:`~aiter_lite.ops.triton.quant.get_fp8_e4m3_dtype` gives when the
module is built (``float8_e4m3fnuz`` on MI300-class GPUs, ``float8_e4m3fn`` elsewhere), values
``x * (1 / scale)`` saturated to its range. ``num_token_padding`` (per-tensor and per-token,
2-D x of M rows): ``x_q`` gets ``max(num_token_padding, M)`` rows, the rows past M zero (as
vLLM's ``forward_native``; its CUDA path leaves them unset); the scales keep M rows.

``forward_native`` and ``forward_triton`` take the same arguments; ``forward`` runs the one
picked when the module is built (``backend``, else AITER_QUANT_BACKEND, else AITER_BACKEND).
Both compute in fp32 and give the same scales; quantized values may differ by one fp8 step
where ``x * (1 / scale)`` lies on a rounding tie.
"""

from __future__ import annotations

from typing import ClassVar, NamedTuple

import torch

from aiter_lite.layers.base import BackendLayer
from aiter_lite.ops.native import quant as native_quant
from aiter_lite.ops.triton import quant as triton_quant
from aiter_lite.spec.quant import get_fp8_e4m3_dtype
from aiter_lite.utils.checks import check_bool, check_int

_FLOATS = (torch.float16, torch.bfloat16, torch.float32)
_MAX_GROUP = 8192


class _GroupShape(NamedTuple):
    row: int
    col: int


class GroupShape(_GroupShape):
    """``(row, col)``: the block of x that shares one scale; -1 spans the whole dim.

    ``PER_TENSOR = (-1, -1)``, ``PER_TOKEN = (1, -1)``, ``GroupShape(1, g)``: ``g`` columns of
    one row (vLLM's ``GroupShape``; a plain tuple compares equal).
    """

    __slots__ = ()
    PER_TENSOR: ClassVar[GroupShape]
    PER_TOKEN: ClassVar[GroupShape]

    def is_per_tensor(self) -> bool:
        return self.row == -1 and self.col == -1

    def is_per_token(self) -> bool:
        return self.row == 1 and self.col == -1

    def is_per_group(self) -> bool:
        return self.row == 1 and self.col >= 1


GroupShape.PER_TENSOR = GroupShape(-1, -1)
GroupShape.PER_TOKEN = GroupShape(1, -1)


def _group_shape(value) -> GroupShape:
    """``value`` (a GroupShape or a (row, col) pair of ints) as a supported GroupShape."""
    if not isinstance(value, (tuple, list)) or len(value) != 2 or any(
            isinstance(v, bool) or not isinstance(v, int) for v in value):
        raise TypeError(f"QuantFP8: group_shape must be a GroupShape or a (row, col) pair of ints, got "
                        f"{type(value).__name__} {value!r}")
    shape = GroupShape(*value)
    if shape.is_per_tensor() or shape.is_per_token():
        return shape
    g = shape.col
    if shape.row == 1 and 1 <= g <= _MAX_GROUP and not g & (g - 1):
        return shape
    raise ValueError(f"QuantFP8: group_shape must be GroupShape.PER_TENSOR (-1, -1), GroupShape.PER_TOKEN (1, -1) "
                     f"or (1, group_size) with group_size a power of 2 from 1 to {_MAX_GROUP}, got {tuple(value)}")


class QuantFP8(BackendLayer):
    """Quantize activations to fp8 e4m3: static per tensor, or dynamic per tensor, per token
    or per group of columns (vLLM's ``QuantFP8``). ``forward(x, scale=None, scale_ub=None)``
    returns ``(x_q, scale)``; see the module docstring for shapes and padding."""

    family = "quant"

    def __init__(self, static: bool, group_shape: GroupShape | tuple[int, int], num_token_padding: int | None = None,
                 column_major_scales: bool = False, backend: str | None = None) -> None:
        static = check_bool("QuantFP8", "static", static)
        group_shape = _group_shape(group_shape)
        per_group = group_shape.is_per_group()
        if static and not group_shape.is_per_tensor():
            raise ValueError(f"QuantFP8: static quantization takes one per-tensor scale; group_shape must be "
                             f"GroupShape.PER_TENSOR, got {tuple(group_shape)}")
        if num_token_padding is not None:
            num_token_padding = check_int("QuantFP8", "num_token_padding", num_token_padding, 1)
            if per_group:
                raise ValueError("QuantFP8: num_token_padding pads per-tensor and per-token outputs; it cannot go "
                                 f"with group_shape {tuple(group_shape)}")
        if not isinstance(column_major_scales, bool):
            raise TypeError(f"QuantFP8: column_major_scales must be a bool, got {type(column_major_scales).__name__}")
        if column_major_scales and not per_group:
            raise ValueError(f"QuantFP8: column_major_scales lays out per-group scales; group_shape "
                             f"{tuple(group_shape)} is not a group")
        super().__init__(backend)
        self.static = static
        self.group_shape = group_shape
        self.num_token_padding = num_token_padding
        self.column_major_scales = column_major_scales
        self.is_group_quant = per_group
        self.group_size = group_shape.col if per_group else None
        self.use_per_token_if_dynamic = group_shape.is_per_token()
        self.quant_dtype = get_fp8_e4m3_dtype()

    def forward(self, x: torch.Tensor, scale: torch.Tensor | None = None,
                scale_ub: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        if self._backend == "triton":
            return self.forward_triton(x, scale, scale_ub)
        return self.forward_native(x, scale, scale_ub)

    def forward_native(self, x: torch.Tensor, scale: torch.Tensor | None = None,
                       scale_ub: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        return self._quantize(native_quant, x, scale, scale_ub)

    def forward_triton(self, x: torch.Tensor, scale: torch.Tensor | None = None,
                       scale_ub: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        return self._quantize(triton_quant, x, scale, scale_ub)

    def _quantize(self, ops, x, scale, scale_ub) -> tuple[torch.Tensor, torch.Tensor]:
        self._check(x, scale, scale_ub)
        if self.is_group_quant:
            return ops.per_token_group_quant_fp8(x, self.group_size, dtype=self.quant_dtype,
                                                 column_major_scales=self.column_major_scales)
        rows = x.shape[0]
        pad = self.num_token_padding
        if pad is None or pad <= rows:
            q = out = torch.empty(x.shape, dtype=self.quant_dtype, device=x.device)
        else:
            q = torch.empty((pad, *x.shape[1:]), dtype=self.quant_dtype, device=x.device)
            q[rows:].zero_()
            out = q[:rows]
        _, scale = ops.scaled_fp8_quant(x, scale, scale_ub, self.use_per_token_if_dynamic, output=out)
        return q, scale

    def _check(self, x, scale, scale_ub) -> None:
        if not isinstance(x, torch.Tensor):
            raise TypeError(f"QuantFP8: x must be a torch.Tensor, got {type(x).__name__}")
        if x.dtype not in _FLOATS:
            raise TypeError(f"QuantFP8: x must be float16, bfloat16 or float32, got {x.dtype}")
        if x.dim() == 0:
            raise ValueError("QuantFP8: x must have at least one dim, got a 0-dim tensor")
        if (self.num_token_padding is not None or self.column_major_scales) and x.dim() != 2:
            what = "num_token_padding" if self.num_token_padding is not None else "column_major_scales"
            raise ValueError(f"QuantFP8: {what} needs a 2-D x (tokens, hidden), got shape {tuple(x.shape)}")
        if self.static:
            if scale is None:
                raise ValueError("QuantFP8: static quantization needs scale (a one-element float32 tensor), got None")
            _check_scalar("scale", scale, x)
        elif scale is not None:
            raise ValueError("QuantFP8: dynamic quantization computes its scales; scale must be None")
        if scale_ub is not None:
            if self.static or not self.use_per_token_if_dynamic:
                raise ValueError(f"QuantFP8: scale_ub bounds dynamic per-token scales; this layer is "
                                 f"{'static' if self.static else 'dynamic'} with group_shape {tuple(self.group_shape)}")
            _check_scalar("scale_ub", scale_ub, x)

    def extra_repr(self) -> str:
        text = f"static={self.static}, group_shape={tuple(self.group_shape)}"
        if self.num_token_padding is not None:
            text += f", num_token_padding={self.num_token_padding}"
        if self.column_major_scales:
            text += ", column_major_scales=True"
        return f"{text}, quant_dtype={self.quant_dtype}, backend={self.backend}"


def _check_scalar(name: str, value, x: torch.Tensor) -> None:
    if not isinstance(value, torch.Tensor):
        raise TypeError(f"QuantFP8: {name} must be a torch.Tensor, got {type(value).__name__}")
    if value.dtype != torch.float32:
        raise TypeError(f"QuantFP8: {name} must be float32, got {value.dtype}")
    if value.numel() != 1:
        raise ValueError(f"QuantFP8: {name} must have one element, got shape {tuple(value.shape)}")
    if value.device != x.device:
        raise ValueError(f"QuantFP8: {name} must be on x's device {x.device}, got {value.device}")
