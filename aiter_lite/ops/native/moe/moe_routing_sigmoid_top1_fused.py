"""aiter's ``routing_sigmoid_top1`` in plain PyTorch (fp32 math): the expert of each token's
largest router logit ``x @ w`` (the first of equal ones, the first NaN above every number),
its weight the logit's sigmoid; with ``fused_shared_experts`` the shared expert N, weight 1,
as a second column. Returns ``(ids, weights)``, int32 and fp32, (M, 1 or 2)."""

from __future__ import annotations

import math

import torch


def routing_sigmoid_top1(x, w, topk, fused_shared_experts=False):
    logits = x.reshape(math.prod(x.shape[:-1]), x.shape[-1]).float() @ w.float()
    ids = torch.argmax(logits, dim=-1, keepdim=True)
    weights = torch.sigmoid(logits.gather(1, ids))
    if fused_shared_experts:
        ids = torch.cat([ids, torch.full_like(ids, w.shape[1])], dim=1)
        weights = torch.cat([weights, torch.ones_like(weights)], dim=1)
    return ids.to(torch.int32), weights
