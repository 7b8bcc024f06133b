"""vLLM's ``QuantFP8`` layer (``vllm.model_executor.layers.quantization.input_quant_fp8``) on
this project's quant kernels: static or dynamic fp8 quantization per tensor, per token, per
channel or per group (``GroupShape``, vLLM's ``quant_utils`` type, defined here).
``forward_native`` is vLLM's plain-torch reference; ``forward_cuda`` / ``forward_hip`` call
:func:`aiter_lite.vllm._quant_ops.scaled_fp8_quant` or ``per_token_group_quant_fp8``."""

from __future__ import annotations

from typing import ClassVar, NamedTuple

import torch
import torch.nn.functional as F

from aiter_lite.ops.triton.quant.dtypes import get_fp8_e4m3_dtype, quant_range
from aiter_lite.vllm import _quant_ops as ops
from aiter_lite.vllm.model_executor.custom_op import CustomOp

__all__ = ["GroupShape", "QuantFP8", "group_broadcast"]


class _GroupShape(NamedTuple):
    row: int
    col: int


class GroupShape(_GroupShape):
    """vLLM's quantization group (rows, columns); -1 spans the whole dim."""

    PER_TENSOR: ClassVar[GroupShape]
    PER_TOKEN: ClassVar[GroupShape]
    PER_CHANNEL: ClassVar[GroupShape]

    def is_per_tensor(self) -> bool:
        return self.row == -1 and self.col == -1

    def is_per_token(self) -> bool:
        return self.row == 1 and self.col == -1

    def is_per_channel(self) -> bool:
        return self.row == -1 and self.col == 1

    def is_per_group(self) -> bool:
        return self.row == 1 and self.col >= 1


GroupShape.PER_TENSOR = GroupShape(-1, -1)
GroupShape.PER_TOKEN = GroupShape(1, -1)
GroupShape.PER_CHANNEL = GroupShape(-1, 1)


def group_broadcast(t: torch.Tensor, shape) -> torch.Tensor:
    """vLLM's: ``t`` expanded to ``shape``, each dim of t's size s < d repeated d / s times
    (a dim of size 1 broadcast; missing leading dims are size 1)."""
    t = t.reshape((1,) * (len(shape) - t.dim()) + tuple(t.shape))
    for i, s in enumerate(shape):
        if t.shape[i] != s and t.shape[i] != 1:
            t = t.unsqueeze(i + 1).expand(*t.shape[: i + 1], s // t.shape[i], *t.shape[i + 1:]).flatten(i, i + 1)
    return t


@CustomOp.register("quant_fp8")
class QuantFP8(CustomOp):
    """vLLM's ``QuantFP8``: ``forward(x, scale=None, scale_ub=None) -> (x_q, scale)``, e4m3 of
    the device (e4m3fnuz on MI300)."""

    def __init__(self, static: bool, group_shape: GroupShape, num_token_padding: int | None = None,
                 column_major_scales: bool = False, use_ue8m0: bool | None = None, **custom_op_kwargs) -> None:
        super().__init__(**custom_op_kwargs)
        if not isinstance(static, bool):
            raise TypeError(f"QuantFP8: static must be a bool, got {type(static).__name__}")
        if (not isinstance(group_shape, tuple) or len(group_shape) != 2
                or not all(isinstance(g, int) and not isinstance(g, bool) for g in group_shape)):
            raise TypeError(f"QuantFP8: group_shape must be a GroupShape (row, col), got {group_shape!r}")
        group_shape = GroupShape(*group_shape)
        self.static = static
        self.group_shape = group_shape
        self.num_token_padding = num_token_padding
        self.column_major_scales = column_major_scales
        self.use_ue8m0 = use_ue8m0
        self.use_per_token_if_dynamic = group_shape == GroupShape.PER_TOKEN
        self.is_group_quant = group_shape.is_per_group()
        if self.is_group_quant:
            self.group_size = group_shape.col
        elif not static and group_shape not in (GroupShape.PER_TOKEN, GroupShape.PER_TENSOR):
            raise ValueError(f"QuantFP8: dynamic quantization that is not per group takes per-token or per-tensor "
                             f"scales, got group_shape {tuple(group_shape)}")

    def _check_call(self, scale, scale_ub) -> None:
        if (scale is not None) != self.static:
            raise ValueError(f"QuantFP8: a {'static' if self.static else 'dynamic'} layer "
                             f"{'needs' if self.static else 'takes no'} scale")
        if scale_ub is not None and (self.static or self.group_shape != GroupShape.PER_TOKEN
                                     or scale_ub.numel() != 1):
            raise ValueError("QuantFP8: scale_ub (one element) bounds dynamic per-token scales only")

    def forward_cuda(self, x: torch.Tensor, scale: torch.Tensor | None = None,
                     scale_ub: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        if self.is_group_quant and not self.static:
            if scale is not None:
                raise ValueError("QuantFP8: dynamic group quantization takes no scale")
            return ops.per_token_group_quant_fp8(x, group_size=self.group_size,
                                                 column_major_scales=self.column_major_scales,
                                                 dtype=get_fp8_e4m3_dtype(x.device), use_ue8m0=self.use_ue8m0)
        self._check_call(scale, scale_ub)
        return ops.scaled_fp8_quant(
            x, scale, num_token_padding=self.num_token_padding, scale_ub=scale_ub,
            use_per_token_if_dynamic=self.use_per_token_if_dynamic,
            group_shape=(self.group_shape.row, self.group_shape.col) if self.static else None,
        )

    def forward_hip(self, x: torch.Tensor, scale: torch.Tensor | None = None,
                    scale_ub: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        return self.forward_cuda(x, scale, scale_ub)

    def forward_native(self, x: torch.Tensor, scale: torch.Tensor | None = None,
                       scale_ub: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        fp8 = get_fp8_e4m3_dtype(x.device)
        fp8_min, fp8_max = quant_range(fp8)
        if self.is_group_quant and not self.static:
            if scale is not None:
                raise ValueError("QuantFP8: dynamic group quantization takes no scale")
            return self._quantize_group_native(x, fp8)
        self._check_call(scale, scale_ub)
        if scale is None:
            if self.group_shape == GroupShape.PER_TOKEN:
                x_max = x.abs().max(dim=-1)[0].unsqueeze(-1).to(torch.float32)
                if scale_ub is not None:
                    x_max = x_max.clamp(max=scale_ub)
            else:
                x_max = x.abs().max().unsqueeze(-1).to(torch.float32)
            scale = (x_max / fp8_max).clamp(min=1.0 / (fp8_max * 512.0))
        out = x.to(torch.float32) * group_broadcast(scale.to(torch.float32), x.shape[-2:]).reciprocal()
        out = out.clamp(fp8_min, fp8_max).to(fp8)
        if self.num_token_padding is not None:
            out = F.pad(out, (0, 0, 0, max(self.num_token_padding - out.size(0), 0)), "constant", 0.0)
        return out, scale

    def _quantize_group_native(self, x: torch.Tensor, fp8: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
        fp8_min, fp8_max = quant_range(fp8)
        orig_shape = x.shape
        hidden = x.shape[-1]
        n_groups = (hidden + self.group_size - 1) // self.group_size
        padded = n_groups * self.group_size
        if padded != hidden:
            x = F.pad(x, (0, padded - hidden), mode="constant", value=0.0)
        xg = x.view(-1, n_groups, self.group_size)
        scales = xg.abs().max(dim=-1, keepdim=True)[0].float() / fp8_max
        if self.use_ue8m0:
            scales = torch.exp2(torch.ceil(torch.log2(scales)))
        scales = scales.clamp(min=1.0 / (fp8_max * 512.0))
        xq = (xg / scales).clamp(fp8_min, fp8_max).to(fp8).view(-1, padded)[..., :hidden].reshape(orig_shape)
        scales = scales.squeeze(-1).reshape(orig_shape[:-1] + (n_groups,))
        if self.column_major_scales:
            scales = scales.transpose(-2, -1).contiguous().transpose(-1, -2)
        return xq, scales

    def extra_repr(self) -> str:
        return f"static={self.static}, group_shape={tuple(self.group_shape)}"
