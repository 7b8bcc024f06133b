"""Per-dtype tolerances and a comparison that says where and how much it failed."""

import torch

# (atol, rtol) for results rounded to the output dtype. bf16 carries 8 bits of
# mantissa (rounding error 2^-8 relative), fp16 11 bits (2^-11); a kernel and the
# fp32 reference may round to neighbouring values, hence about two units.
TOLERANCES = {
    torch.float32: (1e-5, 1e-5),
    torch.float16: (1e-3, 2e-3),
    torch.bfloat16: (1e-2, 1.6e-2),
}


def tolerance(dtype: torch.dtype, reduction_len: int = 1) -> tuple:
    """(atol, rtol) for ``dtype``; reductions grow the budget with sqrt of their length."""
    atol, rtol = TOLERANCES[dtype]
    grow = max(1.0, reduction_len ** 0.5 / 8)
    return atol * grow, rtol * grow


def assert_close(actual: torch.Tensor, expected: torch.Tensor, *, dtype=None, atol=None, rtol=None,
                 name: str = "output", max_report: int = 8) -> None:
    """Like torch.testing.assert_close, with a report of the worst mismatches.

    NaN in ``expected`` must be NaN in ``actual`` (propagation); NaN in ``actual`` alone
    (an unwritten, poisoned element) fails.
    """
    if tuple(actual.shape) != tuple(expected.shape):
        raise AssertionError(f"{name}: shape {tuple(actual.shape)} != expected {tuple(expected.shape)}")
    d_atol, d_rtol = TOLERANCES[dtype or actual.dtype]
    atol = d_atol if atol is None else atol
    rtol = d_rtol if rtol is None else rtol
    a = actual.detach().double().cpu()
    e = expected.detach().double().cpu()
    both_nan = a.isnan() & e.isnan()
    same_inf = a.isinf() & (a == e)
    err = (a - e).abs()
    tol_text = f"atol={atol:g}" if not isinstance(atol, torch.Tensor) else "atol per element"
    if isinstance(atol, torch.Tensor):  # a bound of each element's own (cancellation in its formula)
        atol = atol.detach().double().cpu()
    bad = ~(both_nan | same_inf | (err <= atol + rtol * e.abs()))
    if not bad.any():
        return
    idx = bad.nonzero()
    err = torch.where(bad, err.nan_to_num(float("inf")), torch.zeros_like(err))
    order = err[bad].argsort(descending=True)[:max_report]
    lines = [
        f"{name}: {int(bad.sum())} of {a.numel()} elements mismatch ({tol_text}, rtol={rtol:g}); "
        f"max abs error {float(err.max()):.4g}; unwritten (NaN) {int((a.isnan() & ~e.isnan()).sum())}"
    ]
    for i in order.tolist():
        where = tuple(idx[i].tolist())
        lines.append(f"  at {where}: got {a[where].item():.6g}, expected {e[where].item():.6g}")
    raise AssertionError("\n".join(lines))
