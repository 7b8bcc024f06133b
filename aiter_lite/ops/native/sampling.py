"""Sampling in plain PyTorch, by sorting (as vLLM's torch sampler): the reference of
``aiter_lite.ops.triton.sampling``, with its semantics (module doc there).

Each row's values sorted in descending order. Top-k keeps every value >= the k-th.
Top-p keeps every value >= the first sorted value whose running mass reaches ``top_p``
of the row's (of what top-k kept, or of the whole row with ``joint``). Min-p keeps
``p >= min_p * max(p)``. A draw takes u (the caller's uniform numbers) and returns the
first kept index whose running kept mass passes ``u * mass``.
"""

from __future__ import annotations

import torch

GREEDY_T = 1e-5  # a temperature below it samples greedily (vLLM's)


def _per_row(value, rows: int, device, dtype) -> torch.Tensor:
    if isinstance(value, torch.Tensor):
        return value.reshape(-1).to(device=device, dtype=dtype)
    return torch.full((rows,), value, device=device, dtype=dtype)


def _bad(x: torch.Tensor, from_logits: bool) -> torch.Tensor:
    bad = x.isnan().any(-1)
    if not from_logits:
        bad |= (x < 0).any(-1)
    return bad


def _probs(x: torch.Tensor, from_logits: bool, temperature=None) -> torch.Tensor:
    x = x.float()
    if temperature is not None:
        t = _per_row(temperature, x.shape[0], x.device, torch.float32)
        x = x / torch.where(t < GREEDY_T, 1.0, t)[:, None]
    return torch.softmax(x, -1) if from_logits else x


def kept(p: torch.Tensor, top_k=None, top_p=None, min_p=None, joint: bool = False) -> torch.Tensor:
    """The mask of the tokens the filters keep, over fp32 probabilities (rows, vocab)."""
    rows, n = p.shape
    keep = torch.ones_like(p, dtype=torch.bool)
    if top_k is not None:
        k = _per_row(top_k, rows, p.device, torch.int64)
        on = (k > 0) & (k < n)
        srt = p.sort(-1, descending=True).values
        kth = srt.gather(1, (k.clamp(1, max(n, 1)) - 1)[:, None])
        keep &= ~on[:, None] | (p >= kth)
    if top_p is not None:
        tp = _per_row(top_p, rows, p.device, torch.float32)
        base = p if joint else torch.where(keep, p, torch.zeros_like(p))
        srt = base.sort(-1, descending=True).values
        mass = base.sum(-1, keepdim=True)
        run = srt.cumsum(-1)
        first = (run < tp[:, None] * mass).sum(-1, keepdim=True).clamp(max=n - 1)
        thr = srt.gather(1, first)
        keep &= (tp[:, None] >= 1) | (p >= thr)
        keep &= ~tp.isnan()[:, None]  # a NaN top_p keeps nothing: its row renormalizes to NaN, draws -1
    if min_p is not None:
        mp = _per_row(min_p, rows, p.device, torch.float32)
        keep &= p >= mp[:, None] * p.max(-1, keepdim=True).values
    return keep


def renorm(x: torch.Tensor, from_logits: bool = False, **filters) -> torch.Tensor:
    p = _probs(x, from_logits)
    keep = kept(p, **filters)
    y = torch.where(keep, p, torch.zeros_like(p))
    y = y / y.sum(-1, keepdim=True)
    return torch.where(_bad(x, from_logits)[:, None], torch.full_like(y, float("nan")), y)


def sample(x: torch.Tensor, u: torch.Tensor, from_logits: bool = False, temperature=None, **filters) -> torch.Tensor:
    """int32 tokens, -1 for a bad row or one with no mass kept; rows of ``temperature`` below
    GREEDY_T: their first largest logit."""
    p = _probs(x, from_logits, temperature)
    y = torch.where(kept(p, **filters) & (p > 0), p, torch.zeros_like(p))
    mass = y.sum(-1)
    run = y.cumsum(-1)
    hit = (run > (u * mass)[:, None]) & (y > 0)
    idx = torch.where(hit.any(-1), hit.float().argmax(-1), (y > 0).cumsum(-1).argmax(-1))
    if temperature is not None:
        greedy = _per_row(temperature, x.shape[0], x.device, torch.float32) < GREEDY_T
        idx = torch.where(greedy, x.float().nan_to_num(float("-inf")).argmax(-1), idx)
    bad = _bad(x, from_logits) | (mass <= 0)
    return torch.where(bad, torch.full_like(idx, -1), idx).to(torch.int32)


def top_k_renorm_probs(probs: torch.Tensor, top_k) -> torch.Tensor:
    return renorm(probs, top_k=top_k)


def top_p_renorm_probs(probs: torch.Tensor, top_p) -> torch.Tensor:
    return renorm(probs, top_p=top_p)


def top_k_mask_logits(logits: torch.Tensor, top_k) -> torch.Tensor:
    x = logits.float()
    keep = kept(x, top_k=top_k)
    y = torch.where(keep, x, torch.full_like(x, float("-inf")))
    y = torch.where(logits.isnan().any(-1)[:, None], torch.full_like(y, float("nan")), y)
    return y.to(logits.dtype)


def kept_sets_differ(got: torch.Tensor, want: torch.Tensor, probs: torch.Tensor, top_p) -> str | None:
    """Where two top-p kept sets (bool, (rows, n)) of ``probs`` differ beyond the summation
    order: None where they are equal but for one boundary group a row whose mass above it is
    ``top_p`` of the row's to within 1e-5 of it (two fp32 sums of a row in different orders
    may keep or drop that group); else what differs."""
    p64 = probs.double()
    tp = torch.as_tensor(top_p, dtype=torch.float64, device=probs.device).expand(p64.shape[0])
    for r in (got != want).any(-1).nonzero().flatten().tolist():
        flipped = p64[r][got[r] != want[r]].unique()
        if flipped.numel() != 1:
            return f"row {r}: kept sets differ in {flipped.numel()} value groups"
        above = p64[r][p64[r] > flipped].sum()
        target = tp[r] * p64[r].sum()
        if abs(above - target) > 1e-5 * p64[r].sum():
            return f"row {r}: kept sets differ away from the boundary ({above.item()} above vs {target.item()})"
    return None


def sampling_from_uniform(x: torch.Tensor, uniform: torch.Tensor, top_k=None, top_p=None, min_p=None,
                          temperature=None, indices=None, from_logits: bool = False,
                          joint: bool = False) -> torch.Tensor:
    if indices is not None:
        x = x[indices.long()]
    return sample(x, uniform.float(), from_logits, temperature, top_k=top_k, top_p=top_p, min_p=min_p, joint=joint)
