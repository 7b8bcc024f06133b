"""Top-k in plain PyTorch: a stable sort, the first k.

Same name and arguments as ``aiter_lite.ops.triton.topk``, and the same results bit for
bit: a stable sort keeps equal values (-0.0 and +0.0 included) in index order, so
ties go to the lower index, and it ranks NaN above +inf (first when largest, last
otherwise). ``sorted=False`` returns the sorted order too.
"""

from __future__ import annotations

import torch


def topk(x: torch.Tensor, k: int, dim: int = -1, largest: bool = True,
         sorted: bool = True, *, tiny_row_thresh: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    if x.dim() == 0:  # as torch.topk: a 0-dim x gives 0-dim outputs holding its element
        return x.clone(), torch.zeros((), dtype=torch.int64, device=x.device)
    values, indices = torch.sort(x, dim=dim, descending=largest, stable=True)
    return values.narrow(dim, 0, k).contiguous(), indices.narrow(dim, 0, k).contiguous()
