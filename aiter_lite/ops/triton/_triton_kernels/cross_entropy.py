"""Cross entropy over rows of logits (the last dim of a 2-D row view), forward and gradient.

``_cross_entropy_kernel``: one row per program, in BLOCK_N-wide chunks.

* ``FORWARD``: a pass for the row's online max and sum of exponentials gives its
  log-sum-exp ``lse``; the row's loss is ``lse - z[target]`` (with label smoothing
  ``eps``: ``(1 - eps) * (lse - z[target]) + eps * (lse - mean(z))``), stored in fp32 with
  ``lse``.
* ``GRAD``: a pass that writes the logits' gradient, ``(softmax(z) - (1 - eps) * onehot -
  eps / V) * scale`` with ``scale`` the row's weight of the loss (``scale_ptr``, stride 0
  for one value, 1 for one a row); after ``FORWARD`` in the same program, or alone from a
  stored ``lse``. The gradient may overwrite the logits it is computed from (each chunk is
  read before it is written, by the same program).

``REDUCE`` (with ``FORWARD``): the loss's "sum" or "mean" in the same launch. Each program
publishes its row's loss by an atomic exchange and takes a ticket (acquire-release); the
program that draws the last one sums every row's loss in row order (the same bits on
every run), counts the targets not ignored ("mean" divides by them), writes the loss in
``out_ptr``'s dtype and the count after the rows' log-sum-exp (``lse_ptr[n_rows]``, which
``DIVIDE`` reads back in the backward), and zeroes the ticket for the next launch.

``SOFTCAP``: the loss is over ``z = softcap * tanh(x / softcap)`` (Gemma 2's final logit
softcapping), its gradient carried through to x.

A row whose target is ``ignore_index`` has loss 0 and a gradient of 0; a target outside
[0, V) otherwise gives a NaN loss and a NaN gradient row (visible, where torch raises). A
row holding NaN or +inf has a NaN loss, as torch's.
"""

import triton
import triton.language as tl


@triton.jit
def _capped(x, softcap, SOFTCAP: tl.constexpr):
    """(z, tanh(x / softcap)) where SOFTCAP, else (x, x): z = softcap * tanh(x / softcap)
    by exp (no tanh on every target); tanh of +-inf is +-1."""
    if SOFTCAP:
        t = 1.0 - 2.0 / (tl.exp(2.0 * x / softcap) + 1.0)
        return softcap * t, t
    else:
        return x, x


@triton.jit
def _reduce_rows(loss_ptr, target_ptr, lse_ptr, out_ptr, ticket_ptr, n_rows, ignore_index, MEAN: tl.constexpr,
                 BLOCK_R: tl.constexpr):
    """Called by every program after publishing its row's loss: the last to arrive writes
    the rows' sum (or mean) into out_ptr and the count of targets not ignored into
    lse_ptr[n_rows], and zeroes the ticket."""
    if tl.atomic_add(ticket_ptr, 1, sem="acq_rel", scope="gpu") == n_rows - 1:
        r = tl.arange(0, BLOCK_R)
        total = tl.zeros([BLOCK_R], dtype=tl.float32)
        count = tl.zeros([BLOCK_R], dtype=tl.int32)
        for start in range(0, n_rows, BLOCK_R):
            mask = start + r < n_rows
            total += tl.load(loss_ptr + start + r, mask=mask, other=0.0, cache_modifier=".cg")
            t = tl.load(target_ptr + start + r, mask=mask, other=ignore_index)
            count += (t != ignore_index).to(tl.int32)
        loss = tl.sum(total, axis=0)
        n_valid = tl.sum(count, axis=0).to(tl.float32)
        if MEAN:  # no target counted: 0 / 0, NaN, as torch
            loss = loss / n_valid
        tl.store(out_ptr, loss.to(out_ptr.dtype.element_ty))
        tl.store(lse_ptr + n_rows, n_valid)
        tl.atomic_xchg(ticket_ptr, 0, sem="relaxed", scope="gpu")


@triton.jit
def _cross_entropy_kernel(
    x_ptr, target_ptr, loss_ptr, lse_ptr, grad_ptr, scale_ptr,
    out_ptr, ticket_ptr,              # REDUCE: the reduced loss; an int32 word, zero at entry and exit
    stride_x_row, stride_grad_row, stride_scale,
    n_rows, n_cols,
    ignore_index,
    label_smoothing,                  # fp32 in [0, 1]
    softcap,                          # fp32 > 0 (read where SOFTCAP)
    FORWARD: tl.constexpr,            # compute and store the loss and lse (else read lse)
    GRAD: tl.constexpr,               # write the gradient
    SOFTCAP: tl.constexpr,
    SMOOTHING: tl.constexpr,
    REDUCE: tl.constexpr,             # FORWARD: 0 none, 1 sum, 2 mean (lse_ptr has n_rows + 1 elements)
    DIVIDE: tl.constexpr,             # GRAD: the scale divided by lse_ptr[n_rows] (mean's count)
    BLOCK_N: tl.constexpr,            # columns per chunk
    BLOCK_R: tl.constexpr,            # REDUCE: rows per step of the reduction
):
    label_smoothing = tl.cast(label_smoothing, tl.float32)
    softcap = tl.cast(softcap, tl.float32)
    row = tl.program_id(0).to(tl.int64)
    x_row = x_ptr + row * stride_x_row
    target = tl.load(target_ptr + row).to(tl.int64)
    ignored = target == ignore_index
    valid = (target >= 0) & (target < n_cols)
    cols = tl.arange(0, BLOCK_N)
    if FORWARD:
        m = tl.full([], float("-inf"), tl.float32)
        s = tl.zeros([], dtype=tl.float32)
        total = tl.zeros([], dtype=tl.float32)
        for start in range(0, n_cols, BLOCK_N):
            mask = start + cols < n_cols
            x = tl.load(x_row + start + cols, mask=mask, other=float("-inf")).to(tl.float32)
            z, _ = _capped(x, softcap, SOFTCAP)
            z = tl.where(mask, z, float("-inf"))
            if SMOOTHING:
                total += tl.sum(tl.where(mask, z, 0.0), axis=0)
            m_c = tl.max(z, axis=0)
            # a chunk of -inf adds nothing (its exp(z - m_c) would be NaN)
            s_c = tl.where(m_c == float("-inf"), 0.0, tl.sum(tl.where(mask, tl.exp(z - m_c), 0.0), axis=0))
            m_new = tl.maximum(m, m_c)
            s = tl.where(m == m_new, s, s * tl.exp(m - m_new)) + tl.where(m_c == m_new, s_c, s_c * tl.exp(m_c - m_new))
            m = m_new
        lse = m + tl.log(s)  # a row of -inf: NaN, as torch
        x_t = tl.load(x_row + tl.where(valid, target, 0)).to(tl.float32)
        z_t, _ = _capped(x_t, softcap, SOFTCAP)
        loss = lse - z_t
        if SMOOTHING:
            loss = (1.0 - label_smoothing) * loss + label_smoothing * (lse - total / n_cols)
        loss = tl.where(ignored, 0.0, tl.where(valid, loss, float("nan")))
        tl.store(lse_ptr + row, lse)
        if REDUCE == 0:
            tl.store(loss_ptr + row, loss)
        else:  # published before the ticket, by the thread that takes it (as int32 bits)
            tl.atomic_xchg(loss_ptr.to(tl.pointer_type(tl.int32)) + row, loss.to(tl.int32, bitcast=True),
                           sem="relaxed", scope="gpu")
            _reduce_rows(loss_ptr, target_ptr, lse_ptr, out_ptr, ticket_ptr, n_rows, ignore_index, REDUCE == 2,
                         BLOCK_R)
    else:
        lse = tl.load(lse_ptr + row)
    if GRAD:
        scale = tl.load(scale_ptr + row * stride_scale).to(tl.float32)
        if DIVIDE:
            scale = scale / tl.load(lse_ptr + n_rows)
        scale = tl.where(valid | ignored, scale, float("nan"))
        grad_row = grad_ptr + row * stride_grad_row
        hit = 1.0 - label_smoothing if SMOOTHING else 1.0
        for start in range(0, n_cols, BLOCK_N):
            mask = start + cols < n_cols
            x = tl.load(x_row + start + cols, mask=mask, other=0.0).to(tl.float32)
            z, t = _capped(x, softcap, SOFTCAP)
            g = tl.exp(z - lse) - tl.where(start + cols == target, hit, 0.0)
            if SMOOTHING:
                g -= label_smoothing / n_cols
            if SOFTCAP:
                g *= 1.0 - t * t
            g = tl.where(ignored, 0.0, g * scale)
            tl.store(grad_row + start + cols, g.to(grad_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _scale_kernel(x_ptr, scale_ptr, n, BLOCK: tl.constexpr):
    """x *= scale[0] over n elements (a flat tensor), grid-strided; a scale of exactly 1
    returns at once (the gradient of a loss nobody rescaled)."""
    scale = tl.load(scale_ptr).to(tl.float32)
    if scale != 1.0:
        offs = tl.arange(0, BLOCK)
        for start in range(tl.program_id(0).to(tl.int64) * BLOCK, n, tl.num_programs(0) * BLOCK):
            mask = start + offs < n
            x = tl.load(x_ptr + start + offs, mask=mask).to(tl.float32)
            tl.store(x_ptr + start + offs, (x * scale).to(x_ptr.dtype.element_ty), mask=mask)
