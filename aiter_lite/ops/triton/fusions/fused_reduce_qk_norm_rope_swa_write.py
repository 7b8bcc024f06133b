"""aiter's ``fused_reduce_qk_norm_rope_swa_write`` (``aiter.ops.triton.fusions``): after the
Q / KV projection of a single-KV-head attention with a sliding-window cache (DeepSeek-V4
style), Q's split-K partial sums reduced, every Q head and the KV row RMS-normalized
(times a weight, or none) over head_dim with their last ``rope_head_dim`` channels rotated,
the KV row in place, and optionally into the window cache, in one launch.

Where aiter is limited this does more, and checks it:

* every argument checked, with a clear error (aiter: asserts, or none);
* the window-cache arguments come all together or not at all (aiter ignores a partial set);
* an index past its table writes nothing (write_indices past kv's rows, a batch id past
  state_slot_mapping, a slot past swa_kv or negative, a negative position); a position past
  the cos / sin rows gives NaN in that row's rotated channels (aiter reads past the table);
* any even rotary width up to head_dim, any head_dim (aiter: ROPE_DIM dividing HEAD_DIM,
  both powers of 2).
"""

from __future__ import annotations

import functools

import torch

from aiter_lite.ops.triton._triton_kernels.fusions.fused_reduce_qk_norm_rope_swa_write import (
    _reduce_qk_norm_rope_swa_kernel,
)
from aiter_lite.ops.triton.fusions._common import check_positions
from aiter_lite.ops.triton.normalization.norm import check_eps
from aiter_lite.ops.triton.rope.rope import RopeLaunchConfig, _table
from aiter_lite.spec.device import INTERPRETER, DeviceProfile, device_profile
from aiter_lite.utils.checks import (
    FLOAT_DTYPES,
    check_bool,
    check_float_tensor,
    check_int,
    check_same_device,
    check_triton_device,
    check_unit_last_stride,
)
from aiter_lite.utils.fast_launch import launch
from aiter_lite.utils.launch import cdiv, fill_tile, halve_until_filled, next_power_of_2, prev_power_of_2
from aiter_lite.utils.launcher import launcher
from aiter_lite.utils.logger import debug_on, log_call
from aiter_lite.utils.registry import public_op

__all__ = ["fused_reduce_qk_norm_rope_swa_write"]

_SWA = ("write_indices", "batch_id_per_token", "state_slot_mapping", "swa_kv")


_SWA_HEADS = 8  # Q heads a program, at most
_SWA_TOKENS_TILE = 4096  # (padded) elements a program's tokens fill up to (narrow heads)
_SWA_WARP = 2304  # elements a warp: 72 a lane
_SWA_PADDED_TILE = 1280  # a padded head's one-warp tile: 36-40 elements a lane


@functools.lru_cache(maxsize=1024)
def swa_launch_config(n_tokens: int, n_heads: int, head_elems: int,
                      profile: DeviceProfile = INTERPRETER, padded: bool = False) -> RopeLaunchConfig:
    """Tokens and Q heads per program: up to ``_SWA_HEADS`` heads of ``head_elems`` (padded:
    the unrotated part's and both rotated halves' power-of-2 blocks), tokens while the tile
    stays within ``_SWA_TOKENS_TILE`` elements, halved until the grid has two programs an SM,
    and a warp for every ``_SWA_WARP`` elements (about 72 a lane), at least 2 past 1024.
    ``padded``: the unrotated part's block is wider than the part (448 channels held as
    512); then heads and tokens fill one warp's ``_SWA_PADDED_TILE`` elements instead.

    H200, bf16, rope 64, T = 16384 (% of copy): 128 heads of 576, one token's 8 heads on 2
    warps 95-96%, against 46% for the RoPE ops' tile (2 heads on 4 warps: that sizes a head by
    1024, the width's power of 2), 75-81% for 8 or 16 heads on 4 warps, 78% for 2 tokens of 4
    heads, 93% for 2 heads on one warp; 32 heads of 128, 4 tokens of 8 heads on 2 warps 87-88%
    (2 tokens on 1 warp: 91%), against 70% for one token's 32 heads on 2 warps and 77-83% for
    16 heads or 8 tokens. Padded heads (448 + 64 held as 576; 192 + 64 as 320) run best on
    one warp of 1152-1280 elements: 64 heads of 512 86.8% (2 heads) against 84.0% for the
    wide tile (8 heads on 2 warps), 16 heads of 512 88.7% against 76.3%, 8 heads of 256 76.3%
    (2 tokens of 2 heads; 4 heads 75.6%) against 64.5%."""
    e = max(head_elems, 1)
    one_warp = padded and e <= _SWA_PADDED_TILE
    if one_warp:
        block_t, block_h = fill_tile(n_tokens, n_heads, e, _SWA_PADDED_TILE, _SWA_HEADS)
    else:
        block_h = min(next_power_of_2(max(n_heads, 1)), _SWA_HEADS)
        while block_h > 1 and cdiv(block_h * e, _SWA_WARP) > profile.max_warps:  # very wide heads
            block_h //= 2
        block_t = min(prev_power_of_2(_SWA_TOKENS_TILE // (block_h * e)), next_power_of_2(max(n_tokens, 1)))
    programs_per_token_block = cdiv(n_heads, block_h) + 1  # the last: the KV rows
    block_t = halve_until_filled(block_t, lambda t: cdiv(n_tokens, t) * programs_per_token_block, profile)
    tile = block_t * block_h * e
    # one warp only for a small tile: 1536 elements of 192-wide heads (2 split-K slices) on one spilled 8 B on sm_120
    warps = 1 if one_warp or tile <= 1024 else max(2, next_power_of_2(cdiv(tile, _SWA_WARP)))
    return profile.fit(RopeLaunchConfig(block_t, block_h, warps))


@launcher(mutates=("q_out", "kv", "swa_kv"))
def _launch_reduce_qk_norm_rope_swa(q: torch.Tensor, q_out: torch.Tensor, kv: torch.Tensor,
                                    q_weight: torch.Tensor | None, kv_weight: torch.Tensor | None,
                                    pos: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
                                    write_indices: torch.Tensor | None, batch_id: torch.Tensor | None,
                                    state_slots: torch.Tensor | None, swa_kv: torch.Tensor | None,
                                    geometry: list[int], eps: list[float], flags: list[bool],
                                    config: RopeLaunchConfig | None = None) -> None:
    """``geometry``: table rows and strides, R / 2, win; ``eps``: Q's and KV's; ``flags``: is_neox."""
    n_rows, stride_r, stride_f, half, win = geometry
    (is_neox,) = flags
    n_tokens, qh, d = q_out.shape
    if n_tokens == 0:
        return
    sq = q.stride() if q.dim() == 3 else (0, *q.stride())
    n_splitk = q.shape[0] if q.dim() == 3 else 1
    swa = swa_kv is not None
    nope = d - 2 * half
    block_half, block_nope = next_power_of_2(half), next_power_of_2(max(nope, 1))
    cfg = config or swa_launch_config(n_tokens, qh, block_nope + 2 * block_half, device_profile(q.device),
                                      0 < nope < block_nope)
    launch(
        _reduce_qk_norm_rope_swa_kernel, (cdiv(n_tokens, cfg.BLOCK_T) * (cdiv(qh, cfg.BLOCK_H) + 1),),
        q, q_out, kv, kv if q_weight is None else q_weight, kv if kv_weight is None else kv_weight, pos, cos, sin,
        pos if write_indices is None else write_indices, pos if batch_id is None else batch_id,
        pos if state_slots is None else state_slots, kv if swa_kv is None else swa_kv,
        sq[0], sq[1], q_out.stride(0), q_out.stride(1), kv.stride(0), swa_kv.stride(0) if swa else 0,
        swa_kv.stride(1) if swa else 0, stride_r, stride_f, n_tokens, qh, n_splitk, n_rows, d, win,
        state_slots.shape[0] if swa else 0, swa_kv.shape[0] if swa else 0, *eps,
        HAS_QW=q_weight is not None, HAS_KVW=kv_weight is not None, HAS_SWA=swa, IS_NEOX=is_neox, NOPE=nope,
        HALF=half, BLOCK_HALF=block_half, BLOCK_NOPE=block_nope,
        BLOCK_T=cfg.BLOCK_T, BLOCK_H=cfg.BLOCK_H, num_warps=cfg.num_warps,
    )


def _weight(op: str, name: str, w, head_dim: int, ref: torch.Tensor) -> torch.Tensor | None:
    if w is None:
        return None
    check_float_tensor(op, name, w)
    check_same_device(op, name, w, "kv", ref)
    if tuple(w.shape) != (head_dim,):
        raise ValueError(f"{op}: {name} must be None or (head_dim,) = ({head_dim},), got shape {tuple(w.shape)}")
    return w.contiguous()


def _index(op: str, name: str, t, ref: torch.Tensor, min_len: int | None = None) -> torch.Tensor:
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{op}: {name} must be a torch.Tensor, got {type(t).__name__}")
    if t.dtype not in (torch.int32, torch.int64):
        raise TypeError(f"{op}: {name} must be int32 or int64, got {t.dtype}")
    if t.dim() != 1 or (min_len is not None and t.shape[0] < min_len):
        want = f"1-D with at least {min_len} entries" if min_len is not None else "1-D"
        raise ValueError(f"{op}: {name} must be {want}, got shape {tuple(t.shape)}")
    check_same_device(op, name, t, "kv", ref)
    return t.contiguous()


@public_op(mutates=("kv", "swa_kv"), buffers=("q_out",),
           no_grad="it writes kv in place and a window cache (no backward)")
def fused_reduce_qk_norm_rope_swa_write(q: torch.Tensor, kv: torch.Tensor, q_norm_weight: torch.Tensor | None,
                                        kv_norm_weight: torch.Tensor | None, q_rms_eps: float, kv_rms_eps: float,
                                        rope_head_dim: int, cos_cache: torch.Tensor, sin_cache: torch.Tensor,
                                        positions: torch.Tensor, q_out: torch.Tensor | None = None,
                                        is_neox: bool = False, write_indices: torch.Tensor | None = None,
                                        batch_id_per_token: torch.Tensor | None = None,
                                        state_slot_mapping: torch.Tensor | None = None,
                                        swa_kv: torch.Tensor | None = None, win: int = 128,
                                        dtype: torch.dtype = torch.bfloat16) -> torch.Tensor:
    """q_out (M, heads, head_dim) in ``dtype``: q (M, heads * head_dim), or its split-K partial
    sums (S, M, heads * head_dim), summed in fp32; each head ``x * rstd * w`` (w =
    ``q_norm_weight``, none if None) with its last R = ``rope_head_dim`` channels rotated at
    ``positions`` (NEOX halves or GPTJ pairs; cos / sin (rows, R / 2), unit dims between
    allowed). kv (M, head_dim) normalized and rotated the same way in place. With the window
    cache (``write_indices``, ``batch_id_per_token``, ``state_slot_mapping``, ``swa_kv`` all
    given): only kv rows ``write_indices[t]`` (>= 0) are processed, each also written into
    ``swa_kv[state_slot_mapping[batch_id_per_token[row]], positions[row] % win]``. Two rows
    on one entry (a sequence's tokens ``win`` apart) race, as in aiter: which lands is
    unspecified, so ``write_indices`` should name a sequence's last ``win`` tokens only."""
    op = "fused_reduce_qk_norm_rope_swa_write"
    check_float_tensor(op, "kv", kv)
    check_triton_device(op, "kv", kv)
    if kv.dim() != 2:
        raise ValueError(f"{op}: kv must be 2-D (tokens, head_dim), got shape {tuple(kv.shape)}")
    check_unit_last_stride(op, "kv", kv)
    m, d = kv.shape
    check_float_tensor(op, "q", q)
    check_same_device(op, "q", q, "kv", kv)
    if q.dim() not in (2, 3) or q.shape[-2] != m or q.shape[-1] % max(d, 1) or q.shape[-1] == 0:
        raise ValueError(f"{op}: q must be (M, heads * head_dim) or (splits, M, heads * head_dim) with M = {m} "
                         f"(kv's rows) and head_dim = {d}, got shape {tuple(q.shape)}")
    if q.dim() == 3 and q.shape[0] == 0:
        raise ValueError(f"{op}: q's split-K axis must hold at least one slice, got shape {tuple(q.shape)}")
    check_unit_last_stride(op, "q", q)
    heads = q.shape[-1] // d
    q_w = _weight(op, "q_norm_weight", q_norm_weight, d, kv)
    kv_w = _weight(op, "kv_norm_weight", kv_norm_weight, d, kv)
    q_eps, kv_eps = check_eps(op, "q_rms_eps", q_rms_eps), check_eps(op, "kv_rms_eps", kv_rms_eps)
    r = check_int(op, "rope_head_dim", rope_head_dim, 2, d, "(at most head_dim)")
    if r % 2:
        raise ValueError(f"{op}: rope_head_dim must be even, got {r}")
    tab = _table(op, ("cos_cache", "sin_cache"), cos_cache, sin_cache, kv, "kv")
    if tab.width != r // 2:
        raise ValueError(f"{op}: cos_cache / sin_cache must be rope_head_dim / 2 = {r // 2} wide, got {tab.width}")
    is_neox = check_bool(op, "is_neox", is_neox)
    pos, _ = check_positions(op, "positions", positions, m, kv, tab.rows, ref_name="kv")
    if not isinstance(dtype, torch.dtype) or dtype not in FLOAT_DTYPES:
        raise TypeError(f"{op}: dtype must be one of {', '.join(map(str, FLOAT_DTYPES))}, got {dtype}")
    if q_out is None:
        q_out = torch.empty((m, heads, d), dtype=dtype, device=kv.device)
    else:
        check_float_tensor(op, "q_out", q_out)
        check_same_device(op, "q_out", q_out, "kv", kv)
        if tuple(q_out.shape) != (m, heads, d) or q_out.stride(2) != 1:
            raise ValueError(f"{op}: q_out must be (M, heads, head_dim) = {(m, heads, d)} with unit last stride, got "
                             f"shape {tuple(q_out.shape)} strides {tuple(q_out.stride())}")
    given = [n for n, t in zip(_SWA, (write_indices, batch_id_per_token, state_slot_mapping, swa_kv)) if t is not None]
    win = check_int(op, "win", win, 1)
    if given and len(given) != len(_SWA):
        raise ValueError(f"{op}: the window cache needs all of {', '.join(_SWA)}; got only {', '.join(given)}")
    if given:
        write_indices = _index(op, "write_indices", write_indices, kv)
        if write_indices.shape[0] != m:
            raise ValueError(f"{op}: write_indices must be (M,) = ({m},), got shape {tuple(write_indices.shape)}")
        batch_id_per_token = _index(op, "batch_id_per_token", batch_id_per_token, kv, m)
        state_slot_mapping = _index(op, "state_slot_mapping", state_slot_mapping, kv)
        check_float_tensor(op, "swa_kv", swa_kv)
        check_same_device(op, "swa_kv", swa_kv, "kv", kv)
        if swa_kv.dim() != 3 or tuple(swa_kv.shape[1:]) != (win, d) or swa_kv.stride(2) != 1:
            raise ValueError(f"{op}: swa_kv must be (slots, win, head_dim) = (S, {win}, {d}) with unit last stride, "
                             f"got shape {tuple(swa_kv.shape)} strides {tuple(swa_kv.stride())}")
    if debug_on():
        log_call(op, q=q, kv=kv, q_norm_weight=q_w, kv_norm_weight=kv_w, q_rms_eps=q_eps, kv_rms_eps=kv_eps,
                 rope_head_dim=r, cos_cache=tab.cos, sin_cache=tab.sin, positions=pos, q_out=q_out, is_neox=is_neox,
                 write_indices=write_indices, batch_id_per_token=batch_id_per_token,
                 state_slot_mapping=state_slot_mapping, swa_kv=swa_kv, win=win, dtype=dtype)
    _launch_reduce_qk_norm_rope_swa(q, q_out, kv, q_w, kv_w, pos, tab.cos, tab.sin, write_indices,
                                    batch_id_per_token, state_slot_mapping, swa_kv if given else None,
                                    [tab.rows, tab.stride_r, tab.stride_f, r // 2, win], [q_eps, kv_eps], [is_neox])
    return q_out
