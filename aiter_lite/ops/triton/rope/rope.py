"""Rotary position embedding on the Triton backend, with aiter's names and argument orders.

Every name is a short call into :func:`_rope` (checks, views, launch config) and one
kernel, ``_rope_kernel``. Semantics are those of ``aiter_lite.ops.native.rope`` (the
rules both follow are ``aiter_lite.spec.rope``'s):

* the rotary part is ``R = F * (2 if reuse_freqs_front_part else 1)`` channels for a
  table ``F`` wide (any even ``R`` up to the head dim), ``x[..., :R]`` or, with
  ``nope_first``, ``x[..., d - R:]``; the other channels are copied (out of place) or
  left untouched (in place);
* forward ``y = x * cos + rotate(x) * sin`` (NEOX halves or GPTJ pairs), backward its
  exact transpose; math in fp32 from the tables' own precision, one rounding to the
  output dtype;
* ``transpose_output`` (SBHD and 2-D, out of place): the (s, b, ...) result is laid out
  in (b, s, ...) memory, so ``out.transpose(0, 1)`` is contiguous;
* token counts, sequence lengths and batch are runtime values: one build per layout,
  dtype and head geometry, not per shape.

Positions, offsets and sequence lengths are indices into the tables. A token whose row
falls outside the table gets NaN in its rotary channels (the kernel never reads out of
bounds); with the indices on the CPU, or with ``AITER_ROPE_CHECK_POSITIONS=1``, the
wrapper checks them first and raises ``ValueError`` (the check waits for the GPU).
"""

from __future__ import annotations

import functools
import operator
from dataclasses import dataclass, replace

import torch

from aiter_lite import envs
from aiter_lite.ops.triton._triton_kernels.rope.rope import RowMode, _rope_kernel
from aiter_lite.spec.device import INTERPRETER, DeviceProfile, device_profile
from aiter_lite.spec.rope import RotateStyle, check_rotate_style, rotary_width
from aiter_lite.utils.checks import (
    check_bool,
    check_float_tensor,
    check_int,
    check_same_device,
    check_triton_device,
    host_check_wanted,
)
from aiter_lite.utils.fast_launch import launch
from aiter_lite.utils.launch import cdiv, halve_until_filled, next_power_of_2
from aiter_lite.utils.launcher import launcher
from aiter_lite.utils.logger import debug_on, log_call
from aiter_lite.utils.registry import public_op

__all__ = [
    "RotateStyle", "RoPE", "RoPETHD", "RoPECached", "RoPE2D", "RopeLaunchConfig", "rope_launch_config",
    "rope_fwd", "rope_fwd_inplace", "rope_bwd",
    "rope_thd_fwd", "rope_thd_fwd_inplace", "rope_thd_bwd",
    "rope_cached_fwd", "rope_cached_fwd_inplace", "rope_cached_bwd",
    "rope_cached_positions_fwd", "rope_cached_positions_fwd_inplace", "rope_cached_positions_bwd",
    "rope_cached_positions_offsets_fwd", "rope_cached_positions_offsets_fwd_inplace",
    "rope_cached_positions_offsets_bwd",
    "rope_cached_thd_positions_2c_fwd", "rope_cached_thd_positions_2c_fwd_inplace",
    "rope_cached_thd_positions_2c_bwd",
    "rope_cached_thd_positions_offsets_2c_fwd", "rope_cached_thd_positions_offsets_2c_fwd_inplace",
    "rope_cached_thd_positions_offsets_2c_bwd",
    "rope_fwd_2d", "rope_fwd_2d_inplace", "rope_bwd_2d", "rope_fwd_3d",
]

# ---------------------------------------------------------------------------
# launch configuration


@dataclass(frozen=True)
class RopeLaunchConfig:
    BLOCK_T: int  # tokens per program
    BLOCK_H: int  # heads per program (of one tensor)
    num_warps: int


# Measured on an H200 (bf16, Q and K in place; sweeps of fixed configs):
# * small programs win: one or two tokens of 8 heads (d = 128) or 16 heads (d = 64) with 2
#   warps; llama3-8B (32 / 8 heads) at T = 32768 170.5 us (95% of copy) against 173.5 for 4
#   tokens x 8 heads x 4 warps; DeepSeek-V3's 128 / 1 heads of 64, 262.8 us (98%) against
#   292.8 for 64 tokens of one head (the smaller head count setting the block).
# * the grid runs over head blocks first (neighbouring programs read neighbouring memory):
#   189.4 -> 173.5 us at llama3-8B T = 32768 against token blocks first.
# * H100, CUDA-graph replays of the ops called directly: a token's 16 heads of 128 with 4
#   warps, against 8 heads with 2 warps: out of place (forward and backward, positions, Q
#   and K together) 31.8 / 236.1 us against 38.3 / 280.0 at llama3-8B T = 4096 / 32768
#   (54.1 / 413.5 against 65.8 / 504.5 at 64 / 8 heads); in place within 0.3%. Through
#   autograd (bench_rope --direction bwd --cudagraph) the backward measured 31.5 / 117.2
#   us at T = 4096 / 16384 before and 31.3 / 117.7 after: there the 8-head tile was not
#   the slow one the direct sweep found (not yet explained).
_TILE_HEAD = 2048  # elements of one token's heads in a program
# Computing sin / cos in the kernel (freqs given), 16 heads of 128 with 4 warps spill 8 B
# on sm_100 / sm_120 (libdevice's trig): such launches keep 8 heads.
_TILE_HEAD_ANGLES = 1024
_TILE = {64: 2048}  # elements a program moves, by power-of-2 head dim (default 1024)


@functools.lru_cache(maxsize=1024)
def rope_launch_config(n_tokens: int, n_heads: int, n_heads2: int, head_dim: int,
                       profile: DeviceProfile = INTERPRETER, angles: bool = False) -> RopeLaunchConfig:
    """Tokens and heads per program for ``n_tokens`` tokens of ``n_heads`` (and, Q and K
    together, ``n_heads2``) heads ``head_dim`` wide.

    A program takes up to ``_TILE_HEAD`` elements of one token's heads (``angles``: the
    kernel computes sin and cos from freqs, ``_TILE_HEAD_ANGLES``) and fills the rest of
    its tile with tokens; tokens per program halve until the grid has two programs per
    SM (decode).
    """
    block_d = next_power_of_2(head_dim)
    heads = max(n_heads, n_heads2, 1)
    block_h = min(next_power_of_2(heads), 16, max(1, (_TILE_HEAD_ANGLES if angles else _TILE_HEAD) // block_d))
    tile = _TILE.get(block_d, 1024)
    block_t = min(max(1, tile // (block_h * block_d)), next_power_of_2(max(n_tokens, 1)))
    head_blocks = cdiv(n_heads, block_h) + cdiv(n_heads2, block_h)
    block_t = halve_until_filled(block_t, lambda t: cdiv(n_tokens, t) * head_blocks, profile)
    warps = 4 if block_t * block_h * block_d > 2048 or block_h * block_d >= 2048 else 2
    return RopeLaunchConfig(block_t, block_h, warps)


# ---------------------------------------------------------------------------
# argument checks


def _check_x(op: str, name: str, x, rank: int, layout: str) -> None:
    check_float_tensor(op, name, x)
    if x.dim() != rank:
        raise ValueError(f"{op}: {name} must be {rank}-D {layout}, got shape {tuple(x.shape)}")
    check_triton_device(op, name, x)


@dataclass(frozen=True)
class _Table:
    """A (rows, F) view of a table: the caller's tensors, their row and column strides."""

    cos: torch.Tensor
    sin: torch.Tensor
    rows: int
    width: int
    stride_r: int
    stride_f: int


def _table(op: str, names: tuple[str, str | None], cos, sin, x: torch.Tensor, x_name: str = "x") -> _Table:
    """cos / sin laid out (rows, 1, 1, F), (1, rows, 1, F) or (rows, F): unit dims besides rows
    and F are ignored; each on ``x``'s device (``x_name``: the caller's name for it).

    ``names`` are the caller's names of the two tables; ``names[1]`` None means raw angles
    (``cos`` holds them, ``sin`` is None): the angle ops' internal form, never a public
    cached op's, which must be given both tables (a None ``sin`` raises TypeError)."""
    angles = names[1] is None
    if angles and sin is not None:
        raise ValueError(f"{op}: internal error: raw angles take no second table")
    tensors = [(names[0], cos)] + ([] if angles else [(names[1], sin)])
    for name, t in tensors:
        check_float_tensor(op, name, t)
        check_same_device(op, name, t, x_name, x)
        if t.dim() < 1 or sum(n != 1 for n in t.shape[:-1]) > 1:
            raise ValueError(f"{op}: {name} must be (rows, F) with any unit dims between, got shape "
                             f"{tuple(t.shape)}")
    if sin is not None and tuple(sin.shape) != tuple(cos.shape):
        raise ValueError(f"{op}: {names[1]} must have {names[0]}'s shape {tuple(cos.shape)}, got {tuple(sin.shape)}")
    if sin is not None and sin.stride() != cos.stride():  # the kernel reads both with one pair of strides
        cos, sin = cos.contiguous(), sin.contiguous()
    shape = cos.shape
    if len(shape) == 2:  # (rows, F), the serving layout
        return _Table(cos, sin, shape[0], shape[1], cos.stride(0), cos.stride(1))
    lead = [i for i, n in enumerate(shape[:-1]) if n != 1]
    rows = shape[lead[0]] if lead else 1
    stride_r = cos.stride(lead[0]) if lead else 0
    return _Table(cos, sin, rows, shape[-1], stride_r, cos.stride(-1))


def _check_indices(op: str, name: str, t, shape: tuple, x: torch.Tensor, x_name: str = "x") -> None:
    """An int32 / int64 index tensor of ``shape`` on ``x``'s device (any strides: the kernels
    read it with its own, or the wrapper makes it contiguous)."""
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{op}: {name} must be a torch.Tensor, got {type(t).__name__}")
    if t.dtype not in (torch.int32, torch.int64):
        raise TypeError(f"{op}: {name} must be int32 or int64, got {t.dtype}")
    if tuple(t.shape) != shape:
        raise ValueError(f"{op}: {name} must have shape {shape} for {x_name} of shape {tuple(x.shape)}, "
                         f"got {tuple(t.shape)}")
    check_same_device(op, name, t, x_name, x)


def _check_positions(op: str, positions, offsets, shape: tuple, x: torch.Tensor, n_rows: int,
                     has_offsets: bool = False) -> None:
    """positions (and, ``has_offsets``, offsets: a tensor, never None) of ``shape`` on x's
    device; their rows checked against the table's ``n_rows`` on the host when they are
    there already, or when asked to."""
    _check_indices(op, "positions", positions, shape, x)
    if has_offsets:
        _check_indices(op, "offsets", offsets, shape, x)
    if not host_check_wanted(positions, offsets, switch=envs.rope_check_positions) or positions.numel() == 0:
        return
    rows = positions.long() + (0 if offsets is None else offsets.long())
    lo, hi = int(rows.min()), int(rows.max())
    if lo < 0 or hi >= n_rows:
        what = "positions" + (" + offsets" if offsets is not None else "")
        raise ValueError(f"{op}: {what} must lie in [0, {n_rows}) (cos has {n_rows} rows), "
                         f"got values from {lo} to {hi}")


def _check_transpose(op: str, transpose_output, allowed: bool) -> bool:
    transpose_output = check_bool(op, "transpose_output", transpose_output)
    if transpose_output and not allowed:
        raise ValueError(f"{op}: transpose_output=True needs an out-of-place op with (s, b) leading dims; "
                         f"this op writes in place or has no batch dim")
    return transpose_output


# ---------------------------------------------------------------------------
# launches


def _max_offset(t: torch.Tensor) -> int:
    """One past the largest element offset of ``t`` from its first element."""
    if t.numel() == 0:
        return 0
    return sum(map(operator.mul, t.shape, map(abs, t.stride()))) - sum(map(abs, t.stride())) + 1


def _strides4(t: torch.Tensor) -> tuple:
    """(outer, inner, heads, d) strides: a (t, h, d) tensor has one inner index."""
    s = t.stride()
    return s if len(s) == 4 else (s[0], 0, s[1], s[2])


@launcher(mutates=("out", "out2"))
def _launch_rope(x: torch.Tensor, out: torch.Tensor, x2: torch.Tensor | None, out2: torch.Tensor | None,
                 cos: torch.Tensor, sin: torch.Tensor | None, cos2: torch.Tensor | None, sin2: torch.Tensor | None,
                 pos: torch.Tensor | None, off: torch.Tensor | None, cu: torch.Tensor | None,
                 geometry: list[int], flags: list[bool], config: RopeLaunchConfig | None = None) -> None:
    """One kernel launch over (outer, inner, heads, d) views of x (and x2): SBHD and 2-D
    tensors as they are, (t, h, d) ones with a unit inner dim.

    geometry: row_mode (a RowMode), half, n_rows, n_rows2, stride_r, stride_f, stride_r2, stride_f2, img_width,
    parts.
    flags: is_freqs, is_neox, reuse, backward, nope_first.
    """
    row_mode, half, n_rows, n_rows2, stride_r, stride_f, stride_r2, stride_f2, img_width, parts = geometry
    is_freqs, is_neox, reuse, backward, nope_first = flags
    n_inner = x.shape[1] if x.dim() == 4 else 1
    n_tokens, n_heads, d = x.shape[0] * n_inner, x.shape[-2], x.shape[-1]
    n_heads2 = 0 if x2 is None else x2.shape[-2]
    if n_tokens == 0 or n_heads + n_heads2 == 0:
        return
    if x2 is None:
        x2, out2 = x, out
    cfg = config or rope_launch_config(n_tokens, n_heads, n_heads2, d, device_profile(x.device), is_freqs)
    rest = d - parts * 2 * half
    pos_strides = (0, 0)
    if pos is not None:
        if off is not None and off.stride() != pos.stride():  # read with the positions' strides
            pos, off = pos.contiguous(), off.contiguous()
        pos_strides = pos.stride() if pos.dim() == 2 else (pos.stride(0), 0)
    elif cu is not None:  # VARLEN reads cu_seqlens with the positions' outer stride
        pos_strides = (cu.stride(0), 0)
    n_seqs = 0 if cu is None else cu.numel() - 1
    tensors = (x, x2) if out is x else (x, out, x2, out2)
    int64 = max(map(_max_offset, tensors)) >= 2**31 or max(n_rows * abs(stride_r), n_rows2 * abs(stride_r2)) >= 2**31
    grid = (cdiv(n_tokens, cfg.BLOCK_T) * (cdiv(n_heads, cfg.BLOCK_H) + cdiv(n_heads2, cfg.BLOCK_H)),)
    launch(
        _rope_kernel, grid,
        x, out, x2, out2, cos, cos if sin is None else sin,
        cos if cos2 is None else cos2, cos if sin2 is None else sin2, pos, off, cu,
        *_strides4(x), *_strides4(out), *_strides4(x2), *_strides4(out2),
        stride_r, stride_f, stride_r2, stride_f2, *pos_strides,
        n_inner, n_tokens, n_heads, n_heads2, n_rows, n_rows2, n_seqs, max(1, n_seqs.bit_length()), img_width, d,
        ROW_MODE=row_mode, HAS_OFFSETS=off is not None, IS_FREQS=is_freqs, IS_NEOX=is_neox, REUSE=reuse,
        BACKWARD=backward, NOPE_FIRST=nope_first, COPY_REST=out is not x and rest > 0,
        HALF=half, BLOCK_HALF=next_power_of_2(half), BLOCK_REST=next_power_of_2(max(rest, 1)),
        BLOCK_T=cfg.BLOCK_T, BLOCK_H=cfg.BLOCK_H, INT64=int64, num_warps=cfg.num_warps,
    )


@launcher(mutates=("x", "x2"))
def _launch_rope_inplace(x: torch.Tensor, x2: torch.Tensor | None, cos: torch.Tensor, sin: torch.Tensor | None,
                         cos2: torch.Tensor | None, sin2: torch.Tensor | None, pos: torch.Tensor | None,
                         off: torch.Tensor | None, cu: torch.Tensor | None, geometry: list[int],
                         flags: list[bool], config: RopeLaunchConfig | None = None) -> None:
    """:func:`_launch_rope` writing x (and x2) in place: a registered op of its own, since
    one op cannot declare an argument both read and written under two names."""
    _launch_rope(x, x, x2, x2, cos, sin, cos2, sin2, pos, off, cu, geometry, flags, config)


def _new_out(x: torch.Tensor, transpose_output: bool = False) -> torch.Tensor:
    """An output like x; with ``transpose_output`` its (s, b) dims laid out (b, s)."""
    if not transpose_output:
        return torch.empty(x.shape, dtype=x.dtype, device=x.device)
    return torch.empty((x.shape[1], x.shape[0], *x.shape[2:]), dtype=x.dtype, device=x.device).transpose(0, 1)


def _rope(op: str, x, tab: _Table, rotate_style, reuse, nope_first, *, row_mode: RowMode, is_freqs: bool = False,
          backward: bool = False, inplace: bool = False, transpose_output: bool = False, x2=None,
          pos=None, off=None, cu=None, tab2: _Table | None = None, img_width: int = 1, table_name: str = "cos"):
    """Checked flags and widths, then one launch; returns out (and out2). ``table_name``: the
    caller's name of ``tab``'s first table (in width errors)."""
    style = check_rotate_style(op, rotate_style)
    reuse = check_bool(op, "reuse_freqs_front_part", reuse)
    nope_first = check_bool(op, "nope_first", nope_first)
    d = x.shape[-1]
    parts = 2 if tab2 is not None else 1
    r = rotary_width(op, d, tab.width, reuse, table=table_name, x="x")
    if parts * r > d:
        raise ValueError(f"{op}: two rotary parts of {r} channels (height and width) do not fit x's head dim {d}")
    if x2 is not None and x2.shape[-1] != d:
        raise ValueError(f"{op}: y must have x's head dim {d}, got shape {tuple(x2.shape)}")
    if x2 is not None and x2.dtype != x.dtype:
        raise TypeError(f"{op}: y must have x's dtype {x.dtype}, got {x2.dtype}")
    if debug_on():
        log_call(op, x=x, y=x2, cos=tab.cos, sin=tab.sin, positions=pos, offsets=off, cu_seqlens=cu,
                 rotate_style=style, reuse_freqs_front_part=reuse, nope_first=nope_first,
                 transpose_output=transpose_output)
    tables = (tab.cos, tab.sin, None if tab2 is None else tab2.cos, None if tab2 is None else tab2.sin)
    if torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in (x, x2, *tables)):
        return _differentiable(op, x, x2, tables, inplace, dict(
            tab=tab, rotate_style=style, reuse=reuse, nope_first=nope_first, row_mode=row_mode, is_freqs=is_freqs,
            backward=backward, transpose_output=transpose_output, pos=pos, off=off, cu=cu, tab2=tab2,
            img_width=img_width, table_name=table_name))
    t2 = tab2 or tab
    geometry = [int(row_mode), r // 2, tab.rows, t2.rows, tab.stride_r, tab.stride_f, t2.stride_r, t2.stride_f,
                img_width, parts]
    flags = [is_freqs, style == RotateStyle.NEOX, reuse, backward, nope_first]
    if inplace:
        _launch_rope_inplace(x, x2, *tables, pos, off, cu, geometry, flags)
        return x if x2 is None else (x, x2)
    out = _new_out(x, transpose_output)
    out2 = None if x2 is None else _new_out(x2)
    _launch_rope(x, out, x2, out2, *tables, pos, off, cu, geometry, flags)
    return out if x2 is None else (out, out2)


_SAVED = object()  # in _RopeFunction's ctx.kw: a tensor argument, saved for the backward


class _RopeFunction(torch.autograd.Function):
    """Any rotation ``_rope`` makes (``kw``: its arguments but x, y and inplace),
    differentiable in x (and y): the backward is the inverse rotation of the gradients
    (the same tables, positions and rows; ``backward`` flipped)."""

    @staticmethod
    def forward(ctx, x, x2, op, kw):
        # kw's tensors (tables, positions, offsets, cu_seqlens) saved, not kept on ctx:
        # autograd releases them when the backward has run (ctx lives until the graph does)
        tensors, ctx.kw = [], {}
        for k, v in kw.items():
            if isinstance(v, _Table):
                tensors += [v.cos, v.sin]
                v = replace(v, cos=None, sin=None)
            elif isinstance(v, torch.Tensor):
                tensors.append(v)
                v = _SAVED
            ctx.kw[k] = v
        ctx.save_for_backward(*tensors)
        ctx.op = op
        ctx.shapes = (x.shape, x.dtype, None if x2 is None else x2.shape)
        return _rope(op, x, x2=x2, inplace=False, **kw)

    @staticmethod
    def backward(ctx, dy, dy2=None):
        shape, dtype, shape2 = ctx.shapes
        if dy is None:  # only y's result was used
            dy = torch.zeros(shape, dtype=dtype, device=dy2.device)
        if shape2 is not None and dy2 is None:
            dy2 = torch.zeros(shape2, dtype=dtype, device=dy.device)
        saved = iter(ctx.saved_tensors)
        kw = {}
        for k, v in ctx.kw.items():
            if isinstance(v, _Table):
                v = replace(v, cos=next(saved), sin=next(saved))
            elif v is _SAVED:
                v = next(saved)
            kw[k] = v
        kw.update(backward=not kw["backward"], transpose_output=False)
        dx = _rope(ctx.op, dy.contiguous(), x2=None if dy2 is None else dy2.contiguous(), inplace=False, **kw)
        dx, dx2 = dx if isinstance(dx, tuple) else (dx, None)
        return dx, dx2, None, None


def _differentiable(op, x, x2, tables, inplace, kw):
    """``_rope`` while autograd records: through _RopeFunction, the in-place forms as recorded
    copies into x (and y). Table gradients are the RoPE / RoPECached / RoPETHD / RoPE2D
    classes' (aiter's): a table that requires grad here is refused."""
    names = ("freqs", None, None, None) if kw["is_freqs"] else ("cos", "sin", "cos_width", "sin_width")
    for name, t in zip(names, tables):
        if t is not None and t.requires_grad:
            raise ValueError(f"{op}: {name} requires grad; {op} differentiates x (and y) only; for a table's "
                             f"gradient use the autograd classes RoPE, RoPECached, RoPETHD or RoPE2D, or detach {name}")
    out = _RopeFunction.apply(x, x2, op, kw)
    if not inplace:
        return out
    if x2 is None:
        return x.copy_(out)
    return x.copy_(out[0]), x2.copy_(out[1])


# ---------------------------------------------------------------------------
# SBHD, raw angles: x (s, b, h, d), freqs (>= s, 1, 1, F); token (i, b) uses row i.


def _sbhd_freqs(op, x, freqs, rotate_style, reuse, nope_first, transpose_output, *, inplace=False, backward=False):
    _check_x(op, "x", x, 4, "(s, b, h, d)")
    tab = _table(op, ("freqs", None), freqs, None, x)
    if tab.rows < x.shape[0]:
        raise ValueError(f"{op}: freqs has {tab.rows} rows, fewer than x's sequence length {x.shape[0]}")
    transpose_output = _check_transpose(op, transpose_output, not inplace)
    return _rope(op, x, tab, rotate_style, reuse, nope_first, row_mode=RowMode.OUTER, is_freqs=True,
                 backward=backward, inplace=inplace, transpose_output=transpose_output, table_name="freqs")


@public_op(unless=envs.rope_check_positions)
def rope_fwd(x: torch.Tensor, freqs: torch.Tensor, rotate_style: int, reuse_freqs_front_part: bool, nope_first: bool,
             transpose_output: bool = False) -> torch.Tensor:
    return _sbhd_freqs("rope_fwd", x, freqs, rotate_style, reuse_freqs_front_part, nope_first, transpose_output)


@public_op(mutates=("x",), unless=envs.rope_check_positions)
def rope_fwd_inplace(x: torch.Tensor, freqs: torch.Tensor, rotate_style: int, reuse_freqs_front_part: bool,
                     nope_first: bool, transpose_output: bool = False) -> torch.Tensor:
    return _sbhd_freqs("rope_fwd_inplace", x, freqs, rotate_style, reuse_freqs_front_part, nope_first,
                       transpose_output, inplace=True)


@public_op(unless=envs.rope_check_positions)
def rope_bwd(x: torch.Tensor, freqs: torch.Tensor, rotate_style: int, reuse_freqs_front_part: bool, nope_first: bool,
             transpose_output: bool = False) -> torch.Tensor:
    return _sbhd_freqs("rope_bwd", x, freqs, rotate_style, reuse_freqs_front_part, nope_first, transpose_output,
                       backward=True)


# ---------------------------------------------------------------------------
# THD varlen, raw angles: x (t, h, d), cu_seqlens (B + 1,); a token uses the row of its
# position inside its sequence; tokens past cu_seqlens[-1] pass through unrotated.


def _thd(op, x, cu_seqlens, freqs, rotate_style, reuse, nope_first, transpose_output, *, inplace=False,
         backward=False):
    _check_x(op, "x", x, 3, "(t, h, d)")
    if not isinstance(cu_seqlens, torch.Tensor):
        raise TypeError(f"{op}: cu_seqlens must be a torch.Tensor, got {type(cu_seqlens).__name__}")
    if cu_seqlens.dtype not in (torch.int32, torch.int64):
        raise TypeError(f"{op}: cu_seqlens must be int32 or int64, got {cu_seqlens.dtype}")
    if cu_seqlens.dim() != 1 or cu_seqlens.numel() < 1:
        raise ValueError(f"{op}: cu_seqlens must be 1-D (batch + 1,), got shape {tuple(cu_seqlens.shape)}")
    check_same_device(op, "cu_seqlens", cu_seqlens, "x", x)
    tab = _table(op, ("freqs", None), freqs, None, x)
    _check_transpose(op, transpose_output, False)
    if host_check_wanted(cu_seqlens, switch=envs.rope_check_positions):
        cu = cu_seqlens.long()
        lens = cu.diff()
        if int(cu[0]) < 0 or (lens.numel() and int(lens.min()) < 0) or int(cu[-1]) > x.shape[0]:
            raise ValueError(f"{op}: cu_seqlens must start at 0 or more, never decrease and end at most at "
                             f"x's {x.shape[0]} tokens, got {cu.tolist()}")
        if lens.numel() and int(lens.max()) > tab.rows:
            raise ValueError(f"{op}: cu_seqlens' longest sequence has {int(lens.max())} tokens, more than freqs' "
                             f"{tab.rows} rows")
    return _rope(op, x, tab, rotate_style, reuse, nope_first, row_mode=RowMode.VARLEN, is_freqs=True,
                 backward=backward, inplace=inplace, cu=cu_seqlens, table_name="freqs")


@public_op(unless=envs.rope_check_positions)
def rope_thd_fwd(x: torch.Tensor, cu_seqlens: torch.Tensor, freqs: torch.Tensor, rotate_style: int,
                 reuse_freqs_front_part: bool, nope_first: bool, transpose_output: bool = False) -> torch.Tensor:
    return _thd("rope_thd_fwd", x, cu_seqlens, freqs, rotate_style, reuse_freqs_front_part, nope_first,
                transpose_output)


@public_op(mutates=("x",), unless=envs.rope_check_positions)
def rope_thd_fwd_inplace(x: torch.Tensor, cu_seqlens: torch.Tensor, freqs: torch.Tensor, rotate_style: int,
                         reuse_freqs_front_part: bool, nope_first: bool,
                         transpose_output: bool = False) -> torch.Tensor:
    return _thd("rope_thd_fwd_inplace", x, cu_seqlens, freqs, rotate_style, reuse_freqs_front_part, nope_first,
                transpose_output, inplace=True)


@public_op(unless=envs.rope_check_positions)
def rope_thd_bwd(x: torch.Tensor, cu_seqlens: torch.Tensor, freqs: torch.Tensor, rotate_style: int,
                 reuse_freqs_front_part: bool, nope_first: bool, transpose_output: bool = False) -> torch.Tensor:
    return _thd("rope_thd_bwd", x, cu_seqlens, freqs, rotate_style, reuse_freqs_front_part, nope_first,
                transpose_output, backward=True)


# ---------------------------------------------------------------------------
# SBHD, cached cos / sin (rows, 1, 1, F): token (i, b) uses row i, or positions[i, b]
# (+ offsets[i, b]).


def _sbhd_cached(op, x, cos, sin, positions, offsets, rotate_style, reuse, nope_first, transpose_output, *,
                 inplace=False, backward=False, has_positions=False, has_offsets=False):
    _check_x(op, "x", x, 4, "(s, b, h, d)")
    tab = _table(op, ("cos", "sin"), cos, sin, x)
    transpose_output = _check_transpose(op, transpose_output, not inplace)
    if has_positions:
        _check_positions(op, positions, offsets, tuple(x.shape[:2]), x, tab.rows, has_offsets)
    elif tab.rows < x.shape[0]:
        raise ValueError(f"{op}: cos has {tab.rows} rows, fewer than x's sequence length {x.shape[0]}")
    return _rope(op, x, tab, rotate_style, reuse, nope_first, row_mode=RowMode.POSITIONS if has_positions else RowMode.OUTER,
                 backward=backward, inplace=inplace, transpose_output=transpose_output, pos=positions, off=offsets)


@public_op(unless=envs.rope_check_positions)
def rope_cached_fwd(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, rotate_style: int,
                    reuse_freqs_front_part: bool, nope_first: bool, transpose_output: bool = False) -> torch.Tensor:
    return _sbhd_cached("rope_cached_fwd", x, cos, sin, None, None, rotate_style, reuse_freqs_front_part,
                        nope_first, transpose_output)


@public_op(mutates=("x",), unless=envs.rope_check_positions)
def rope_cached_fwd_inplace(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, rotate_style: int,
                            reuse_freqs_front_part: bool, nope_first: bool,
                            transpose_output: bool = False) -> torch.Tensor:
    return _sbhd_cached("rope_cached_fwd_inplace", x, cos, sin, None, None, rotate_style, reuse_freqs_front_part,
                        nope_first, transpose_output, inplace=True)


@public_op(unless=envs.rope_check_positions)
def rope_cached_bwd(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, rotate_style: int,
                    reuse_freqs_front_part: bool, nope_first: bool, transpose_output: bool = False) -> torch.Tensor:
    return _sbhd_cached("rope_cached_bwd", x, cos, sin, None, None, rotate_style, reuse_freqs_front_part,
                        nope_first, transpose_output, backward=True)


@public_op(unless=envs.rope_check_positions)
def rope_cached_positions_fwd(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, positions: torch.Tensor,
                              rotate_style: int, reuse_freqs_front_part: bool, nope_first: bool,
                              transpose_output: bool = False) -> torch.Tensor:
    return _sbhd_cached("rope_cached_positions_fwd", x, cos, sin, positions, None, rotate_style,
                        reuse_freqs_front_part, nope_first, transpose_output, has_positions=True)


@public_op(mutates=("x",), unless=envs.rope_check_positions)
def rope_cached_positions_fwd_inplace(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, positions: torch.Tensor,
                                      rotate_style: int, reuse_freqs_front_part: bool, nope_first: bool,
                                      transpose_output: bool = False) -> torch.Tensor:
    return _sbhd_cached("rope_cached_positions_fwd_inplace", x, cos, sin, positions, None, rotate_style,
                        reuse_freqs_front_part, nope_first, transpose_output, inplace=True, has_positions=True)


@public_op(unless=envs.rope_check_positions)
def rope_cached_positions_bwd(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, positions: torch.Tensor,
                              rotate_style: int, reuse_freqs_front_part: bool, nope_first: bool,
                              transpose_output: bool = False) -> torch.Tensor:
    return _sbhd_cached("rope_cached_positions_bwd", x, cos, sin, positions, None, rotate_style,
                        reuse_freqs_front_part, nope_first, transpose_output, backward=True, has_positions=True)


@public_op(unless=envs.rope_check_positions)
def rope_cached_positions_offsets_fwd(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, positions: torch.Tensor,
                                      offsets: torch.Tensor, rotate_style: int, reuse_freqs_front_part: bool,
                                      nope_first: bool, transpose_output: bool = False) -> torch.Tensor:
    return _sbhd_cached("rope_cached_positions_offsets_fwd", x, cos, sin, positions, offsets, rotate_style,
                        reuse_freqs_front_part, nope_first, transpose_output, has_positions=True,
                        has_offsets=True)


@public_op(mutates=("x",), unless=envs.rope_check_positions)
def rope_cached_positions_offsets_fwd_inplace(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
                                              positions: torch.Tensor, offsets: torch.Tensor, rotate_style: int,
                                              reuse_freqs_front_part: bool, nope_first: bool,
                                              transpose_output: bool = False) -> torch.Tensor:
    return _sbhd_cached("rope_cached_positions_offsets_fwd_inplace", x, cos, sin, positions, offsets,
                        rotate_style, reuse_freqs_front_part, nope_first, transpose_output, inplace=True,
                        has_positions=True, has_offsets=True)


@public_op(unless=envs.rope_check_positions)
def rope_cached_positions_offsets_bwd(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, positions: torch.Tensor,
                                      offsets: torch.Tensor, rotate_style: int, reuse_freqs_front_part: bool,
                                      nope_first: bool, transpose_output: bool = False) -> torch.Tensor:
    return _sbhd_cached("rope_cached_positions_offsets_bwd", x, cos, sin, positions, offsets, rotate_style,
                        reuse_freqs_front_part, nope_first, transpose_output, backward=True, has_positions=True,
                        has_offsets=True)


# ---------------------------------------------------------------------------
# "2c": Q x (t, qh, d) and K y (t, kh, d) in one launch, cached cos / sin (rows, F),
# token t at row positions[t] (+ offsets[t]). Any head counts (GQA: qh a multiple of kh).


def _two(op, x, y, cos, sin, positions, offsets, rotate_style, reuse, nope_first, transpose_output, *,
         inplace=False, backward=False, has_offsets=False):
    _check_x(op, "x", x, 3, "(t, qh, d)")
    _check_x(op, "y", y, 3, "(t, kh, d)")
    if y.shape[0] != x.shape[0]:
        raise ValueError(f"{op}: y must have x's {x.shape[0]} tokens, got shape {tuple(y.shape)}")
    check_same_device(op, "y", y, "x", x)
    tab = _table(op, ("cos", "sin"), cos, sin, x)
    _check_transpose(op, transpose_output, False)
    _check_positions(op, positions, offsets, (x.shape[0],), x, tab.rows, has_offsets)
    return _rope(op, x, tab, rotate_style, reuse, nope_first, row_mode=RowMode.POSITIONS, backward=backward,
                 inplace=inplace, x2=y, pos=positions, off=offsets)


@public_op(unless=envs.rope_check_positions)
def rope_cached_thd_positions_2c_fwd(x: torch.Tensor, y: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
                                     positions: torch.Tensor, rotate_style: int, reuse_freqs_front_part: bool,
                                     nope_first: bool,
                                     transpose_output: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    return _two("rope_cached_thd_positions_2c_fwd", x, y, cos, sin, positions, None, rotate_style,
                reuse_freqs_front_part, nope_first, transpose_output)


@public_op(mutates=("x", "y"), unless=envs.rope_check_positions)
def rope_cached_thd_positions_2c_fwd_inplace(x: torch.Tensor, y: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
                                             positions: torch.Tensor, rotate_style: int,
                                             reuse_freqs_front_part: bool, nope_first: bool,
                                             transpose_output: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    return _two("rope_cached_thd_positions_2c_fwd_inplace", x, y, cos, sin, positions, None, rotate_style,
                reuse_freqs_front_part, nope_first, transpose_output, inplace=True)


@public_op(unless=envs.rope_check_positions)
def rope_cached_thd_positions_2c_bwd(x: torch.Tensor, y: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
                                     positions: torch.Tensor, rotate_style: int, reuse_freqs_front_part: bool,
                                     nope_first: bool,
                                     transpose_output: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    return _two("rope_cached_thd_positions_2c_bwd", x, y, cos, sin, positions, None, rotate_style,
                reuse_freqs_front_part, nope_first, transpose_output, backward=True)


@public_op(unless=envs.rope_check_positions)
def rope_cached_thd_positions_offsets_2c_fwd(x: torch.Tensor, y: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
                                             positions: torch.Tensor, offsets: torch.Tensor, rotate_style: int,
                                             reuse_freqs_front_part: bool, nope_first: bool,
                                             transpose_output: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    return _two("rope_cached_thd_positions_offsets_2c_fwd", x, y, cos, sin, positions, offsets, rotate_style,
                reuse_freqs_front_part, nope_first, transpose_output, has_offsets=True)


@public_op(mutates=("x", "y"), unless=envs.rope_check_positions)
def rope_cached_thd_positions_offsets_2c_fwd_inplace(x: torch.Tensor, y: torch.Tensor, cos: torch.Tensor,
                                                     sin: torch.Tensor, positions: torch.Tensor,
                                                     offsets: torch.Tensor, rotate_style: int,
                                                     reuse_freqs_front_part: bool, nope_first: bool,
                                                     transpose_output: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    return _two("rope_cached_thd_positions_offsets_2c_fwd_inplace", x, y, cos, sin, positions, offsets,
                rotate_style, reuse_freqs_front_part, nope_first, transpose_output, inplace=True, has_offsets=True)


@public_op(unless=envs.rope_check_positions)
def rope_cached_thd_positions_offsets_2c_bwd(x: torch.Tensor, y: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
                                             positions: torch.Tensor, offsets: torch.Tensor, rotate_style: int,
                                             reuse_freqs_front_part: bool, nope_first: bool,
                                             transpose_output: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    return _two("rope_cached_thd_positions_offsets_2c_bwd", x, y, cos, sin, positions, offsets, rotate_style,
                reuse_freqs_front_part, nope_first, transpose_output, backward=True, has_offsets=True)


# ---------------------------------------------------------------------------
# 2-D image: x (b, img_height * img_width, h, d), tokens in row-major order; the first
# rotary part turns by the height table at the token's row, the next by the width table
# at its column (tables (1, rows, 1, F) or (rows, F)).


def _image_size(op: str, name: str, value) -> int:
    """A positive int, or a one-element integer tensor holding one (read on the host: on the
    CPU or a GPU, whatever x's device)."""
    if isinstance(value, torch.Tensor) and value.numel() == 1 and not value.is_floating_point():
        if value.device.type not in ("cpu", "cuda"):
            raise ValueError(f"{op}: {name} is a tensor on the {value.device.type} device, whose value cannot be "
                             f"read; pass an int or a one-element tensor on the CPU or a GPU")
        value = int(value.item())
    return check_int(op, name, value, 1)


def _2d(op, x, cos_h, sin_h, cos_w, sin_w, img_height, img_width, rotate_style, reuse, nope_first,
        transpose_output, *, inplace=False, backward=False):
    _check_x(op, "x", x, 4, "(b, img_height * img_width, h, d)")
    img_height, img_width = _image_size(op, "img_height", img_height), _image_size(op, "img_width", img_width)
    if x.shape[1] != img_height * img_width:
        raise ValueError(f"{op}: x has {x.shape[1]} tokens per image, expected img_height * img_width = "
                         f"{img_height} * {img_width} = {img_height * img_width}")
    tab_h = _table(op, ("cos_h", "sin_h"), cos_h, sin_h, x)
    tab_w = _table(op, ("cos_w", "sin_w"), cos_w, sin_w, x)
    if tab_w.width != tab_h.width:
        raise ValueError(f"{op}: cos_w must be as wide as cos_h ({tab_h.width}), got {tab_w.width}")
    if tab_h.rows < img_height or tab_w.rows < img_width:
        raise ValueError(f"{op}: cos_h has {tab_h.rows} rows and cos_w {tab_w.rows}; "
                         f"need at least img_height = {img_height} and img_width = {img_width}")
    transpose_output = _check_transpose(op, transpose_output, not inplace)
    return _rope(op, x, tab_h, rotate_style, reuse, nope_first, row_mode=RowMode.IMAGE, backward=backward,
                 inplace=inplace, transpose_output=transpose_output, tab2=tab_w, img_width=img_width,
                 table_name="cos_h")


@public_op(unless=envs.rope_check_positions)
def rope_fwd_2d(x: torch.Tensor, cos_h: torch.Tensor, sin_h: torch.Tensor, cos_w: torch.Tensor, sin_w: torch.Tensor,
                img_height: int, img_width: int, rotate_style: int, reuse_freqs_front_part: bool, nope_first: bool,
                transpose_output: bool = False) -> torch.Tensor:
    return _2d("rope_fwd_2d", x, cos_h, sin_h, cos_w, sin_w, img_height, img_width, rotate_style,
               reuse_freqs_front_part, nope_first, transpose_output)


@public_op(mutates=("x",), unless=envs.rope_check_positions)
def rope_fwd_2d_inplace(x: torch.Tensor, cos_h: torch.Tensor, sin_h: torch.Tensor, cos_w: torch.Tensor,
                        sin_w: torch.Tensor, img_height: int, img_width: int, rotate_style: int,
                        reuse_freqs_front_part: bool, nope_first: bool,
                        transpose_output: bool = False) -> torch.Tensor:
    return _2d("rope_fwd_2d_inplace", x, cos_h, sin_h, cos_w, sin_w, img_height, img_width, rotate_style,
               reuse_freqs_front_part, nope_first, transpose_output, inplace=True)


@public_op(unless=envs.rope_check_positions)
def rope_bwd_2d(x: torch.Tensor, cos_h: torch.Tensor, sin_h: torch.Tensor, cos_w: torch.Tensor, sin_w: torch.Tensor,
                img_height: int, img_width: int, rotate_style: int, reuse_freqs_front_part: bool, nope_first: bool,
                transpose_output: bool = False) -> torch.Tensor:
    return _2d("rope_bwd_2d", x, cos_h, sin_h, cos_w, sin_w, img_height, img_width, rotate_style,
               reuse_freqs_front_part, nope_first, transpose_output, backward=True)


# ---------------------------------------------------------------------------
# autograd: aiter's classes and argument orders, a gradient (or None) for every input.
# dx comes from the *_bwd kernel. The tables' gradients, rarely wanted, in plain torch: over
# a rotary part the forward is linear in the tables, y = x * C + rotate(x) * S (C, S the row a
# token reads, widened to the part's R channels), so dC = g * x and dS = g * rotate(x), summed
# over the heads, folded back to the table's F columns (the two channels of a pair share a
# column when the table is reused) and added into the row each token reads.


def _pairs(t: torch.Tensor, neox: bool) -> torch.Tensor:
    """(..., R) as (..., 2, R / 2): [..., 0, j] and [..., 1, j] are the j-th rotated pair
    (NEOX: channel j of each half; GPTJ: channels 2j and 2j + 1)."""
    return t.unflatten(-1, (2, -1)) if neox else t.unflatten(-1, (-1, 2)).transpose(-1, -2)


def _unpairs(t: torch.Tensor, neox: bool) -> torch.Tensor:
    """:func:`_pairs` undone: (..., 2, R / 2) back to the channel order (..., R)."""
    return t.flatten(-2) if neox else t.transpose(-1, -2).flatten(-2)


def _row_grads(x, grad, lo: int, r: int, rows, n_rows: int, neox: bool, reuse: bool, dtype):
    """(dC, dS), each (n_rows, F): the gradients of the cos and sin rows read by the rotary
    part x[..., lo:lo + r] of x (*lead, heads, d), token ``lead`` reading row ``rows[lead]``."""
    xp = _pairs(x[..., lo:lo + r].to(dtype), neox)  # (*lead, heads, 2, R / 2)
    gp = _pairs(grad[..., lo:lo + r].to(dtype), neox)
    rotated = torch.stack([-xp[..., 1, :], xp[..., 0, :]], dim=-2)  # rotate(x): pair (a, b) -> (-b, a)
    d = torch.stack([gp * xp, gp * rotated]).sum(-3)  # (2, *lead, 2, R / 2): dC, dS of each token
    d = d.sum(-2) if reuse else _unpairs(d, neox)  # (2, *lead, F)
    out = d.new_zeros(2, n_rows, d.shape[-1])
    out.index_add_(1, rows.reshape(-1), d.flatten(1, -2))
    return out[0], out[1]


def _table_grads(needs, x, grad, parts, rotate_style, reuse, nope_first):
    """The tables' gradients, None where ``needs`` is unset. ``parts``, one per rotary part
    in head-dim order: its tables, (cos, sin) or (freqs,) for raw angles, and the row each
    token reads (x's leading dims). fp32 math (fp64 for fp64 inputs)."""
    if not any(needs):
        return [None] * len(needs)
    neox = int(rotate_style) == RotateStyle.NEOX
    f = parts[0][0][0].shape[-1]
    r = f * (2 if reuse else 1)
    lo = x.shape[-1] - r * len(parts) if nope_first else 0
    grads = []
    for i, (tables, rows) in enumerate(parts):
        dtype = torch.promote_types(torch.promote_types(x.dtype, tables[0].dtype), torch.float32)
        n_rows = tables[0].numel() // f
        dc, ds = _row_grads(x, grad, lo + i * r, r, rows, n_rows, neox, reuse, dtype)
        if len(tables) == 1:  # raw angles: C = cos(freqs), S = sin(freqs)
            angle = tables[0].reshape(n_rows, f).to(dtype)
            dc, ds = ds * torch.cos(angle) - dc * torch.sin(angle), None
        grads += [g.reshape(t.shape).to(t.dtype) for g, t in zip((dc, ds), tables)]
    return [g if need else None for g, need in zip(grads, needs)]


def _outer_rows(x: torch.Tensor) -> torch.Tensor:
    """SBHD: token (i, b) reads row i."""
    return torch.arange(x.shape[0], device=x.device)[:, None].expand(x.shape[:2])


def _varlen_rows(x: torch.Tensor, cu_seqlens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """THD: (row, covered) per token: its position within its sequence, and whether it lies
    in one (tokens outside cu_seqlens pass through)."""
    cu = cu_seqlens.long()
    tok = torch.arange(x.shape[0], device=x.device)
    covered = (tok >= cu[0]) & (tok < cu[-1])
    start = cu[torch.searchsorted(cu[1:], tok, right=True)]
    return torch.where(covered, tok - start, 0), covered


class RoPE(torch.autograd.Function):
    """Differentiable ``rope_fwd(x, freqs, rotate_style, reuse_freqs_front_part, nope_first, transpose_output)``."""

    @staticmethod
    def forward(ctx, x, freqs, rotate_style, reuse_freqs_front_part, nope_first, transpose_output=False):
        ctx.args = (rotate_style, reuse_freqs_front_part, nope_first)
        ctx.transpose_output = transpose_output
        ctx.save_for_backward(x, freqs)
        return rope_fwd(x, freqs, rotate_style, reuse_freqs_front_part, nope_first, transpose_output)

    @staticmethod
    def backward(ctx, grad):
        x, freqs = ctx.saved_tensors
        dx = rope_bwd(grad, freqs, *ctx.args, ctx.transpose_output) if ctx.needs_input_grad[0] else None
        (dfreqs,) = _table_grads(ctx.needs_input_grad[1:2], x, grad, [((freqs,), _outer_rows(x))], *ctx.args)
        return dx, dfreqs, None, None, None, None


class RoPETHD(torch.autograd.Function):
    """Differentiable ``rope_thd_fwd(x, cu_seqlens, freqs, rotate_style, reuse_freqs_front_part, nope_first)``."""

    @staticmethod
    def forward(ctx, x, cu_seqlens, freqs, rotate_style, reuse_freqs_front_part, nope_first):
        ctx.args = (rotate_style, reuse_freqs_front_part, nope_first)
        ctx.save_for_backward(x, cu_seqlens, freqs)
        return rope_thd_fwd(x, cu_seqlens, freqs, rotate_style, reuse_freqs_front_part, nope_first)

    @staticmethod
    def backward(ctx, grad):
        x, cu, freqs = ctx.saved_tensors
        dx = rope_thd_bwd(grad, cu, freqs, *ctx.args) if ctx.needs_input_grad[0] else None
        rows, covered = _varlen_rows(x, cu)
        grad = torch.where(covered[:, None, None], grad, 0)
        (dfreqs,) = _table_grads(ctx.needs_input_grad[2:3], x, grad, [((freqs,), rows)], *ctx.args)
        return dx, None, dfreqs, None, None, None


class RoPECached(torch.autograd.Function):
    """Differentiable ``rope_cached_fwd(x, cos, sin, rotate_style, reuse_freqs_front_part, nope_first,
    transpose_output)``."""

    @staticmethod
    def forward(ctx, x, cos, sin, rotate_style, reuse_freqs_front_part, nope_first, transpose_output=False):
        ctx.args = (rotate_style, reuse_freqs_front_part, nope_first)
        ctx.transpose_output = transpose_output
        ctx.save_for_backward(x, cos, sin)
        return rope_cached_fwd(x, cos, sin, rotate_style, reuse_freqs_front_part, nope_first, transpose_output)

    @staticmethod
    def backward(ctx, grad):
        x, cos, sin = ctx.saved_tensors
        dx = rope_cached_bwd(grad, cos, sin, *ctx.args, ctx.transpose_output) if ctx.needs_input_grad[0] else None
        dcos, dsin = _table_grads(ctx.needs_input_grad[1:3], x, grad, [((cos, sin), _outer_rows(x))], *ctx.args)
        return dx, dcos, dsin, None, None, None, None


class RoPE2D(torch.autograd.Function):
    """Differentiable ``rope_fwd_2d(x, cos_height, sin_height, cos_width, sin_width, img_height, img_width,
    rotate_style, reuse_freqs_front_part, nope_first)``."""

    @staticmethod
    def forward(ctx, x, cos_height, sin_height, cos_width, sin_width, img_height, img_width, rotate_style,
                reuse_freqs_front_part, nope_first):
        ctx.size = (img_height, img_width)
        ctx.args = (rotate_style, reuse_freqs_front_part, nope_first)
        ctx.save_for_backward(x, cos_height, sin_height, cos_width, sin_width)
        return rope_fwd_2d(x, cos_height, sin_height, cos_width, sin_width, img_height, img_width, *ctx.args)

    @staticmethod
    def backward(ctx, grad):
        x, *tables = ctx.saved_tensors
        dx = rope_bwd_2d(grad, *tables, *ctx.size, *ctx.args) if ctx.needs_input_grad[0] else None
        img_width = int(ctx.size[1])
        tok = torch.arange(x.shape[1], device=x.device).expand(x.shape[:2])  # row-major: (row, column)
        parts = [(tables[:2], tok // img_width), (tables[2:], tok % img_width)]
        grads = _table_grads(ctx.needs_input_grad[1:5], x, grad, parts, *ctx.args)
        return (dx, *grads, None, None, None, None, None)


from aiter_lite.ops.triton.rope.rope_3d import rope_fwd_3d  # noqa: E402  (aiter's module holds it)
