"""Sampling over a row of probabilities or logits without sorting it: top-k, top-p and
min-p thresholds found by bisection over the values' bit patterns, then a renormalized
row, a masked row, or one token drawn by the inverse CDF.

One program a row, the row in BLOCK_N chunks:

* the first pass: the row's max (and, FROM_LOGITS, the sum of ``exp(x - max)``: the
  row's softmax computed on the fly by every later pass); a NaN (or, from
  probabilities, a negative value) marks the row bad: its outputs NaN / -1;
* TOP_K: the largest key ``t`` with ``count(key >= t) >= k`` (a WAYS-way search of the
  32-bit key range: 32 / log2(WAYS) passes, each weighing WAYS candidate keys): every
  value tied with the k-th largest is kept;
* TOP_P: the largest key ``t`` whose kept mass ``sum(p, key >= max(t, t_k))`` is at least
  ``top_p`` times the mass top-k kept (``JOINT``: of the whole row, top-k not applied
  first): whole groups of tied values are kept or dropped together;
* MIN_P: ``p >= min_p * max(p)``;
* then (MODE) "renorm": the kept probabilities over their sum, 0 elsewhere; "mask": the
  kept logits, -inf elsewhere (keys of the logits themselves, sign-ordered); "sample":
  the first index whose running kept mass passes ``u * mass`` (u the row's uniform draw),
  the last kept index where rounding leaves none; -1 where nothing can be drawn.

Keys: the fp32 bits of a probability (non-negative: integer order is value order), or
for logits the bits with the negative ones' magnitude bits flipped (sign-ordered).
"""

import triton
import triton.language as tl

GREEDY_T: tl.constexpr = tl.constexpr(1e-5)  # vLLM's: a temperature below it samples greedily


@triton.jit
def _key(v, SIGNED: tl.constexpr):
    """int32 keys in value order: probabilities' bits (<= 0 as 0); logits' bits sign-ordered;
    NaN the largest key (2^31 - 1), kept by every threshold, so a row holding one shows it in
    whatever the kept values make (its mass, its draw, its renormalized values)."""
    b = v.to(tl.int32, bitcast=True)
    if SIGNED:
        k = tl.where(b < 0, b ^ 0x7FFFFFFF, b)
    else:
        k = tl.where(v > 0, b, 0)
    return tl.where(v != v, 2147483647, k)


@triton.jit
def _values(x_row, start, cols, n_cols, mx, se, inv_t, FROM_LOGITS: tl.constexpr, AS_PROBS: tl.constexpr):
    """(a chunk's values as loaded (fp32), as probabilities (the softmax of ``v * inv_t``
    where FROM_LOGITS: ``mx`` the row's max, ``se`` its sum), its mask)."""
    c = start + cols
    mask = c < n_cols
    fill = float("-inf") if FROM_LOGITS else 0.0
    v = tl.load(x_row + c, mask=mask, other=fill).to(tl.float32)
    if FROM_LOGITS and AS_PROBS:
        p = tl.exp((v - mx) * inv_t) / se  # a row of -inf: NaN
    elif AS_PROBS:
        p = tl.where(v < 0, float("nan"), v)  # a negative probability: as NaN
    else:
        p = v
    return v, p, mask


@triton.jit
def _count_or_mass(x_row, n_cols, mx, se, inv_t, mid, t_floor, COUNT: tl.constexpr, FROM_LOGITS: tl.constexpr,
                   SIGNED: tl.constexpr, AS_PROBS: tl.constexpr, BLOCK_N: tl.constexpr):
    """Over the row: how many keys are >= ``mid`` (COUNT), or the mass of the probabilities
    whose key is >= max(mid, t_floor)."""
    cols = tl.arange(0, BLOCK_N)
    acc = tl.zeros([BLOCK_N], dtype=tl.float32)
    for start in range(0, n_cols, BLOCK_N):
        v, p, mask = _values(x_row, start, cols, n_cols, mx, se, inv_t, FROM_LOGITS, AS_PROBS)
        k = _key(p if AS_PROBS else v, SIGNED)
        if COUNT:
            acc += tl.where(mask & (k >= mid), 1.0, 0.0)
        else:
            acc += tl.where(mask & (k >= mid) & (k >= t_floor), p, 0.0)
    return tl.sum(acc, 0)


@triton.jit
def _bisect(x_row, n_cols, mx, se, inv_t, goal, lo_key, hi_key, t_floor, COUNT: tl.constexpr,
            FROM_LOGITS: tl.constexpr,
            SIGNED: tl.constexpr, AS_PROBS: tl.constexpr, WAYS: tl.constexpr, STEPS: tl.constexpr,
            BLOCK_S: tl.constexpr):
    """The largest key t in [lo_key, hi_key) (int64 bounds) with count (COUNT) or kept mass
    >= ``goal`` (lo_key satisfies it: the whole row; hi_key does not). A WAYS-way search:
    each pass over the row weighs WAYS candidate keys at once, STEPS passes (WAYS^STEPS >=
    2^32) narrow the keys to one."""
    lo = lo_key
    hi = hi_key
    j = tl.arange(0, WAYS).to(tl.int64)
    cols = tl.arange(0, BLOCK_S)
    for _ in tl.static_range(STEPS):  # unrolled: no 64-bit bounds carried around a loop (ptxas spilled them)
        step = (hi - lo + WAYS - 1) // WAYS
        # int32 candidates: one past the largest key (2^31) compares as 2^31 - 1, a NaN's key, which no
        # counted value has
        mids = tl.minimum(lo + j * step, 2147483647).to(tl.int32)
        acc = tl.zeros([WAYS, BLOCK_S], dtype=tl.float32)
        for start in range(0, n_cols, BLOCK_S):
            v, p, mask = _values(x_row, start, cols, n_cols, mx, se, inv_t, FROM_LOGITS, AS_PROBS)
            k = _key(p if AS_PROBS else v, SIGNED)
            ge = (k[None, :] >= mids[:, None]) & (mask & (k >= t_floor))[None, :]
            if COUNT:
                acc += tl.where(ge, 1.0, 0.0)
            else:
                acc += tl.where(ge, p[None, :], 0.0)
        ok = tl.sum(acc, 1) >= goal  # j = 0 (lo) always: the candidates' totals fall as j grows
        best = tl.max(tl.where(ok, j, 0), 0)
        lo = lo + best * step
        hi = tl.minimum(lo + step, hi)
    return lo


@triton.jit
def _sampling_kernel(
    x_ptr,                        # (rows, n_cols) probabilities or logits, any float dtype
    out_ptr,                      # "sample": int32 (n_out,); "renorm": fp32 rows; "mask": x's dtype rows
    idx_ptr,                      # int (n_out,): the row each output reads (HAS_INDICES)
    u_ptr,                        # fp32 (n_out,): uniform draws in [0, 1) ("sample")
    k_ptr, p_ptr, minp_ptr,       # per-row top_k (int), top_p, min_p (fp32) where *_TENSOR
    t_ptr,                        # per-row temperature (fp32) where T_TENSOR
    stride_x, stride_out,
    n_cols,
    k_val, p_val, minp_val, t_val,  # the scalar forms (runtime)
    MODE: tl.constexpr,           # "sample", "renorm" or "mask"
    FROM_LOGITS: tl.constexpr,    # x is logits: their softmax is the distribution
    TOP_K: tl.constexpr,
    TOP_P: tl.constexpr,
    MIN_P: tl.constexpr,
    JOINT: tl.constexpr,          # top-p over the whole row (else over what top-k kept)
    K_TENSOR: tl.constexpr,
    P_TENSOR: tl.constexpr,
    MINP_TENSOR: tl.constexpr,
    HAS_TEMP: tl.constexpr,       # FROM_LOGITS: softmax(x / temperature); below GREEDY_T the row's argmax
    T_TENSOR: tl.constexpr,
    HAS_INDICES: tl.constexpr,
    BLOCK_N: tl.constexpr,        # a pass's chunk
    WAYS: tl.constexpr,           # a threshold search's candidates a pass (a power of 2)
    STEPS: tl.constexpr,          # its passes: 32 / log2(WAYS)
    BLOCK_S: tl.constexpr,        # a search pass's chunk (x WAYS candidates)
):
    p_val = tl.cast(p_val, tl.float32)
    minp_val = tl.cast(minp_val, tl.float32)
    t_val = tl.cast(t_val, tl.float32)
    pid = tl.program_id(0).to(tl.int64)
    inv_t = tl.full([], 1.0, tl.float32)
    if HAS_TEMP:
        temp = tl.load(t_ptr + pid).to(tl.float32) if T_TENSOR else t_val
        inv_t = tl.where(temp < GREEDY_T, 1.0, 1.0 / tl.maximum(temp, GREEDY_T))
    row = tl.load(idx_ptr + pid).to(tl.int64) if HAS_INDICES else pid
    x_row = x_ptr + row * stride_x
    cols = tl.arange(0, BLOCK_N)
    SIGNED: tl.constexpr = MODE == "mask"
    AS_PROBS: tl.constexpr = MODE != "mask"
    # The row's max (the softmax's shift; min-p's reference), and the softmax's sum. A bad row
    # (NaN; a negative probability; logits all -inf) is not flagged here: its NaN key is kept by
    # every threshold, which makes the kept mass NaN (a flag live across the searches spilled)
    mx = tl.full([], 0.0, tl.float32)
    if FROM_LOGITS or MIN_P:
        mx_acc = tl.full([BLOCK_N], float("-inf"), tl.float32)
        for start in range(0, n_cols, BLOCK_N):
            v, _p, mask = _values(x_row, start, cols, n_cols, 0.0, 1.0, 1.0, FROM_LOGITS, False)
            mx_acc = tl.maximum(mx_acc, tl.where(mask & (v == v), v, float("-inf")))
        mx = tl.max(mx_acc, 0)
    se = tl.full([], 1.0, tl.float32)
    if FROM_LOGITS and AS_PROBS:
        se_acc = tl.zeros([BLOCK_N], dtype=tl.float32)
        for start in range(0, n_cols, BLOCK_N):
            v, _p, mask = _values(x_row, start, cols, n_cols, 0.0, 1.0, 1.0, FROM_LOGITS, False)
            se_acc += tl.where(mask & (v > float("-inf")), tl.exp((v - mx) * inv_t), 0.0)  # NaN kept
        se = tl.sum(se_acc, 0)
    lo_key = tl.full([], -2147483648, tl.int64) if SIGNED else tl.full([], 0, tl.int64)
    hi_key = tl.full([], 2147483648, tl.int64)
    lo32 = lo_key.to(tl.int32)
    thr = lo32
    t_k = lo32
    if TOP_K:
        k = tl.load(k_ptr + pid).to(tl.int64) if K_TENSOR else tl.cast(k_val, tl.int64)
        if (k > 0) & (k < n_cols):
            t_k = _bisect(x_row, n_cols, mx, se, inv_t, k.to(tl.float32), lo_key, hi_key, lo32, True, FROM_LOGITS, SIGNED,
                          AS_PROBS, WAYS, STEPS, BLOCK_S).to(tl.int32)
        thr = tl.maximum(thr, t_k)
    if TOP_P:
        top_p = tl.load(p_ptr + pid).to(tl.float32) if P_TENSOR else p_val
        floor = lo32 if JOINT else t_k
        if top_p < 1.0:
            mass = _count_or_mass(x_row, n_cols, mx, se, inv_t, lo32, floor, False, FROM_LOGITS, SIGNED, AS_PROBS, BLOCK_N)
            t_p = _bisect(x_row, n_cols, mx, se, inv_t, top_p * mass, lo_key, hi_key, floor, False, FROM_LOGITS, SIGNED,
                          AS_PROBS, WAYS, STEPS, BLOCK_S).to(tl.int32)
            thr = tl.maximum(thr, t_p)
    if MIN_P:
        min_p = tl.load(minp_ptr + pid).to(tl.float32) if MINP_TENSOR else minp_val
        pmax = tl.exp(mx - mx) / se if FROM_LOGITS else mx
        thr = tl.maximum(thr, _key(min_p * pmax, False))
    out_row = out_ptr + pid * stride_out
    if MODE == "sample":
        kept_mass = _count_or_mass(x_row, n_cols, mx, se, inv_t, thr, lo32, False, FROM_LOGITS, SIGNED, AS_PROBS, BLOCK_N)
        target = tl.load(u_ptr + pid) * kept_mass
        running = tl.full([], 0.0, tl.float32)
        # the scan in BLOCK_S chunks: a running sum over BLOCK_N spilled (ptxas, 8 warps)
        cols_s = tl.arange(0, BLOCK_S)
        found = tl.full([BLOCK_S], 2147483647, tl.int32)  # per lane, reduced once after the row
        last = tl.full([BLOCK_S], -1, tl.int32)
        for start in range(0, n_cols, BLOCK_S):
            v, p, mask = _values(x_row, start, cols_s, n_cols, mx, se, inv_t, FROM_LOGITS, True)
            kept = mask & (_key(p, False) >= thr) & (p > 0)  # NaN: not here, but in kept_mass
            pk = tl.where(kept, p, 0.0)
            cs = running + tl.cumsum(pk, 0)
            c = start + cols_s
            found = tl.minimum(found, tl.where(kept & (cs > target), c, 2147483647))
            last = tl.maximum(last, tl.where(kept, c, -1))
            running += tl.sum(pk, 0)
        first = tl.min(found, 0)
        pick = tl.where(first < 2147483647, first, tl.max(last, 0))
        pick = tl.where(kept_mass > 0, pick, -1)  # no mass kept, or NaN
        if HAS_TEMP:  # a greedy row (temperature below GREEDY_T): the first index of its largest logit
            temp = tl.load(t_ptr + pid).to(tl.float32) if T_TENSOR else t_val  # read again: nothing kept live
            if temp < GREEDY_T:
                best = tl.full([BLOCK_N], 2147483647, tl.int32)
                for start in range(0, n_cols, BLOCK_N):
                    v, p, mask = _values(x_row, start, cols, n_cols, mx, se, inv_t, FROM_LOGITS, False)
                    best = tl.minimum(best, tl.where(mask & (v == mx), start + cols, 2147483647))
                pick = tl.where(kept_mass > 0, tl.min(best, 0), -1)
        tl.store(out_row, pick.to(tl.int32))
    elif MODE == "renorm":
        kept_mass = _count_or_mass(x_row, n_cols, mx, se, inv_t, thr, lo32, False, FROM_LOGITS, SIGNED, AS_PROBS, BLOCK_N)
        for start in range(0, n_cols, BLOCK_N):
            v, p, mask = _values(x_row, start, cols, n_cols, mx, se, inv_t, FROM_LOGITS, True)
            y = tl.where(_key(p, False) >= thr, p / kept_mass, 0.0 / kept_mass)  # no mass kept: 0 / 0; NaN mass
            tl.store(out_row + start + cols, y.to(out_ptr.dtype.element_ty), mask=mask)
    else:
        tl.static_assert(MODE == "mask")
        nan_acc = tl.zeros([BLOCK_N], dtype=tl.int32)  # a row holding NaN: NaN throughout
        for start in range(0, n_cols, BLOCK_N):
            v, p, mask = _values(x_row, start, cols, n_cols, mx, se, inv_t, FROM_LOGITS, False)
            nan_acc = tl.maximum(nan_acc, tl.where(mask & (v != v), 1, 0))
        drop = tl.where(tl.max(nan_acc, 0) > 0, float("nan"), float("-inf"))
        for start in range(0, n_cols, BLOCK_N):
            v, p, mask = _values(x_row, start, cols, n_cols, mx, se, inv_t, FROM_LOGITS, False)
            y = tl.where(_key(v, True) >= thr, v, drop)
            y = tl.where(drop != drop, float("nan"), y)
            tl.store(out_row + start + cols, y.to(out_ptr.dtype.element_ty), mask=mask)
