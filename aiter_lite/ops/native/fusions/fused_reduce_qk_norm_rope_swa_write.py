"""Split-K reduce + per-head RMSNorm + RoPE of the tail on Q and KV, + the sliding-window KV
write, in plain PyTorch (fp32 math): the reference of
``aiter_lite.ops.triton.fusions.fused_reduce_qk_norm_rope_swa_write``, same name and argument order
(aiter's)."""

from __future__ import annotations

import torch

from aiter_lite.ops.native.fusions._common import style, tables
from aiter_lite.ops.native.rope.rope import rotate


def fused_reduce_qk_norm_rope_swa_write(q, kv, q_norm_weight, kv_norm_weight, q_rms_eps, kv_rms_eps, rope_head_dim,
                                        cos_cache, sin_cache, positions, q_out=None, is_neox=False,
                                        write_indices=None, batch_id_per_token=None, state_slot_mapping=None,
                                        swa_kv=None, win=128, dtype=torch.bfloat16):
    """q_out (M, heads, head_dim); kv normalized and rotated in place (with the window cache:
    its rows ``write_indices``, also written into ``swa_kv``)."""
    op = "fused_reduce_qk_norm_rope_swa_write"
    m, d = kv.shape

    def norm_rope(x, w, eps, pos):  # x (rows, heads, d) fp32
        y = x * torch.rsqrt(x.square().mean(-1, keepdim=True) + eps)
        if w is not None:
            y = y * w.float()
        return rotate(op, y, tables(cos_cache, sin_cache, pos), style(is_neox), True, True)

    qf = (q.float().sum(0) if q.dim() == 3 else q.float()).reshape(m, q.shape[-1] // d, d)
    qo = norm_rope(qf, q_norm_weight, q_rms_eps, positions)
    q_out = torch.empty(qo.shape, dtype=dtype, device=kv.device) if q_out is None else q_out
    q_out.copy_(qo.to(q_out.dtype))
    swa = swa_kv is not None
    if swa:
        rows = write_indices.long()
        rows = rows[(rows >= 0) & (rows < m)]
    else:
        rows = torch.arange(m, device=kv.device)
    pos = positions.long()[rows]
    y = norm_rope(kv[rows].float()[:, None, :], kv_norm_weight, kv_rms_eps, pos)[:, 0]
    kv[rows] = y.to(kv.dtype)
    if swa:
        bid = batch_id_per_token.long()[rows]
        ok = (bid >= 0) & (bid < state_slot_mapping.shape[0])
        slot = torch.where(ok, state_slot_mapping.long()[bid.clamp(0, max(state_slot_mapping.shape[0] - 1, 0))], -1)
        ok = ok & (slot >= 0) & (slot < swa_kv.shape[0]) & (pos >= 0)
        swa_kv[slot[ok], pos[ok] % win] = y[ok].to(swa_kv.dtype)
    return q_out
