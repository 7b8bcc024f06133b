"""Sampling over rows of probabilities or logits without sorting them: top-k, top-p and
min-p thresholds found by a search over the values' bit patterns, then a renormalized
row, a masked row, or one token drawn by the inverse CDF.

A row is split into ``n_parts`` slices (a multiple of the chunk each), one program a
(row, slice): a few rows spread over the whole GPU, many rows a slice or two each. The
programs of a row meet only through small buffers that one launch writes and the next
reads (every sum is taken in a fixed order, so a draw is deterministic; the atomics of
the top-k lists only place candidates, which the list's program sorts):

* ``_stats_kernel``: each slice's max, ``sum(exp((x - max) / t))`` (FROM_LOGITS: the
  row's softmax, combined by every later launch), the first index of its max, a NaN flag;
* ``_search_kernel``, STEPS launches a threshold: the largest key ``t`` whose count
  (top-k: ``count(key >= t) >= k``) or mass (top-p: ``sum(p, key >= max(t, floor)) >=
  top_p * mass``) reaches the goal. Each launch weighs WAYS candidate keys of the interval
  left by the last: it narrows the interval from the last launch's per-slice sums
  (``part``, summed over the slices in order), its slice 0 records the interval
  (``bounds``), and it writes its own slice's sums for the WAYS candidates. WAYS^STEPS
  spans the keys' bits: the last interval holds one value's key. Every value tied with the threshold is kept;
* top-k when drawing, before any search: ``_bound_kernel``, a lower bound of the row's
  top-k threshold (the k-th largest of G groups' largest keys, a maximum a value);
  ``_compact_kernel``, the values with mass at or above it (the top-k and a few more:
  about 1.05-1.4 k on random rows) listed by an atomic count, where they fit the list;
  ``_list_kernel``: one program a listed row, the list sorted into index order, the k-th
  largest and top-p by threshold searches over it, the softmax and the draw
  (``_row_draw`` after ``_row_kth``: one program over the whole row, for a row that does
  not fit where no whole-row launches follow; with a top_k a row the searches below run
  for the rows not listed, the listed ones skipped);
* ``_mass_kernel``: each slice's kept mass (the draw's CDF across slices, the
  renormalization's divisor), where the top-p search's last weighing is not it;
* ``_finish_kernel`` (MODE) "sample": the slice holding ``u * mass`` (u the row's uniform
  draw) finds the first index whose running kept mass passes it (the last kept index
  where rounding leaves none; -1 where nothing can be drawn); "renorm": the kept
  probabilities over their sum, 0 elsewhere; "mask": the kept logits, -inf elsewhere.

Keys: the fp32 bits of a probability (non-negative: integer order is value order), or of
a logit with the negative ones' magnitude bits flipped (sign-ordered; top-k and top-p of
logits compare the logits, weighing their softmax); NaN the largest key, so a bad row's
NaN reaches its kept mass (and so its draw: -1). bf16 / fp16 values leave their keys' low
16 / 13 bits alone: their searches take 4 / 5 launches. Top-k counts values with mass only
(no -inf logit, no zero probability), so a row with fewer than k of them keeps all.
"""

import triton
import triton.language as tl

GREEDY_T: tl.constexpr = tl.constexpr(1e-5)  # vLLM's: a temperature below it samples greedily
STAT_W: tl.constexpr = tl.constexpr(4)  # a slice's stats: max, exp sum, first index of the max (bits), NaN flag


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
def _vkey(v, p, FROM_LOGITS: tl.constexpr):
    """The key every threshold compares: the logit's (sign-ordered), or the probability's."""
    return _key(v, True) if FROM_LOGITS else _key(p, False)


@triton.jit
def _weight(v, p, FROM_LOGITS: tl.constexpr, COUNT: tl.constexpr):
    """What a search sums: top-k 1 a value with mass (not a -inf logit, not a zero
    probability; NaN counts), top-p the probability."""
    if COUNT:
        if FROM_LOGITS:
            return tl.where((v > float("-inf")) | (v != v), 1.0, 0.0)
        else:
            return tl.where(p != 0.0, 1.0, 0.0)
    else:
        return p


@triton.jit
def _row_of(idx_ptr, t_ptr, t_val, HAS_INDICES: tl.constexpr, HAS_TEMP: tl.constexpr, T_TENSOR: tl.constexpr):
    """(this program's output row, its input row, 1 / temperature (1 where greedy or none), its slice)."""
    pid = tl.program_id(0).to(tl.int64)
    part = tl.program_id(1)
    inv_t = tl.full([], 1.0, tl.float32)
    if HAS_TEMP:
        temp = tl.load(t_ptr + pid).to(tl.float32) if T_TENSOR else tl.cast(t_val, tl.float32)
        inv_t = tl.where(temp < GREEDY_T, 1.0, 1.0 / tl.maximum(temp, GREEDY_T))
    row = tl.load(idx_ptr + pid).to(tl.int64) if HAS_INDICES else pid
    return pid, row, inv_t, part


@triton.jit
def _greedy(t_ptr, pid, t_val, HAS_TEMP: tl.constexpr, T_TENSOR: tl.constexpr):
    """Whether the row samples greedily: a temperature below GREEDY_T."""
    greedy = pid < 0  # false
    if HAS_TEMP:
        temp = tl.load(t_ptr + pid).to(tl.float32) if T_TENSOR else t_val
        greedy = temp < GREEDY_T
    return greedy


@triton.jit
def _values(x_row, c, n_cols, mx, rse, inv_t, FROM_LOGITS: tl.constexpr, AS_PROBS: tl.constexpr):
    """(the values at columns ``c`` as loaded (fp32), as probabilities (the softmax of
    ``v * inv_t`` where FROM_LOGITS: ``mx`` the row's max, ``rse`` one over its sum), the mask)."""
    mask = c < n_cols
    fill = float("-inf") if FROM_LOGITS else 0.0
    v = tl.load(x_row + c, mask=mask, other=fill).to(tl.float32)
    if FROM_LOGITS and AS_PROBS:
        p = tl.exp((v - mx) * inv_t) * rse  # a row of -inf: NaN
    elif AS_PROBS:
        p = tl.where(v < 0, float("nan"), v)  # a negative probability: as NaN
    else:
        p = v
    return v, p, mask


@triton.jit
def _row_stats(stats_ptr, pid, n_parts, inv_t, PB: tl.constexpr):
    """The row's (max, softmax sum, first index of the max, NaN seen) from its slices' stats."""
    j = tl.arange(0, PB)
    base = stats_ptr + (pid * n_parts + j) * STAT_W
    jm = j < n_parts
    m = tl.load(base, mask=jm, other=float("-inf"))
    s = tl.load(base + 1, mask=jm, other=0.0)
    first = tl.load(base + 2, mask=jm, other=0.0).to(tl.int32, bitcast=True)
    nan = tl.load(base + 3, mask=jm, other=0.0)
    mx = tl.max(m, 0)
    # a slice of -inf / NaN only (max -inf) adds its sum as it is: 0, or NaN
    se = tl.sum(tl.where(m > float("-inf"), s * tl.exp((m - mx) * inv_t), s), 0)
    arg = tl.min(tl.where(jm & (m == mx), first, 2147483647), 0)
    return mx, se, arg, tl.max(nan, 0)


@triton.jit
def _stats_of(x_row, lo, hi, inv_t, SUMS: tl.constexpr, BLOCK: tl.constexpr):
    """(max (NaN aside), the first index of it, a NaN flag, (SUMS) ``sum(exp((x - max) / t))``) of
    the columns [lo, hi) of a row of logits."""
    cols = tl.arange(0, BLOCK)
    m_acc = tl.full([BLOCK], float("-inf"), tl.float32)
    arg = tl.full([BLOCK], 2147483647, tl.int32)
    nan = tl.zeros([BLOCK], dtype=tl.float32)
    for start in range(lo, hi, BLOCK):
        v, _p, mask = _values(x_row, start + cols, hi, 0.0, 1.0, 1.0, True, False)
        v = tl.where(mask, v, float("-inf"))
        arg = tl.where((v > m_acc) | ((v == m_acc) & (arg == 2147483647)), start + cols, arg)  # a lane's first max
        m_acc = tl.maximum(m_acc, tl.where(v == v, v, float("-inf")))
        nan = tl.maximum(nan, tl.where(v != v, 1.0, 0.0))
    mx = tl.max(m_acc, 0)
    first = tl.min(tl.where(m_acc == mx, arg, 2147483647), 0)
    s = tl.full([], 0.0, tl.float32)
    if SUMS:
        s_acc = tl.zeros([BLOCK], dtype=tl.float32)
        for start in range(lo, hi, BLOCK):
            v, _p, mask = _values(x_row, start + cols, hi, 0.0, 1.0, 1.0, True, False)
            s_acc += tl.where(mask & (v > float("-inf")), tl.exp((v - mx) * inv_t), 0.0)
        s = tl.sum(s_acc, 0)
    return mx, first, tl.max(nan, 0), s


@triton.jit
def _slice_stats(x_row, out, lo, hi, inv_t, SUMS: tl.constexpr, BLOCK: tl.constexpr):
    """A slice's stats (``_stats_of``) stored at ``out`` (STAT_W values: max, sum, first index, NaN)."""
    mx, first, nan, s = _stats_of(x_row, lo, hi, inv_t, SUMS, BLOCK)
    tl.store(out, mx)
    tl.store(out + 1, s)
    tl.store(out + 2, first.to(tl.float32, bitcast=True))
    tl.store(out + 3, nan)


@triton.jit
def _stats_kernel(x_ptr, stats_ptr, idx_ptr, t_ptr, k_ptr, stride_x, n_cols, slice_len, n_parts, t_val,
                  k_val, SUMS: tl.constexpr, HAS_TEMP: tl.constexpr, T_TENSOR: tl.constexpr,
                  HAS_INDICES: tl.constexpr, LIST: tl.constexpr, K_TENSOR: tl.constexpr,
                  BLOCK: tl.constexpr):
    """Each slice's stats (``_slice_stats``); LIST: not of rows drawn from their lists."""
    t_val = tl.cast(t_val, tl.float32)
    pid, row, inv_t, part = _row_of(idx_ptr, t_ptr, t_val, HAS_INDICES, HAS_TEMP, T_TENSOR)
    work = part >= 0  # true
    if LIST:
        work = _listed(pid, n_cols, k_ptr, k_val, K_TENSOR) == 0
    if work:
        lo = part * slice_len
        _slice_stats(x_ptr + row * stride_x, stats_ptr + (pid * n_parts + part) * STAT_W, lo,
                     tl.minimum(lo + slice_len, n_cols), inv_t, SUMS, BLOCK)


@triton.jit
def _part_sums(part_ptr, step, pid, n_out, n_parts, WAYS: tl.constexpr, PB: tl.constexpr):
    """A search launch's WAYS candidate sums for the row, its slices' summed in order."""
    j = tl.arange(0, PB)
    w = tl.arange(0, WAYS)
    base = part_ptr + ((step * n_out + pid) * n_parts) * WAYS
    vals = tl.load(base + j[:, None] * WAYS + w[None, :], mask=(j < n_parts)[:, None], other=0.0)
    return tl.sum(vals, 0)


@triton.jit
def _initial(SIGNED: tl.constexpr):
    lo = tl.full([], -2147483648, tl.int64) if SIGNED else tl.full([], 0, tl.int64)
    return lo, tl.full([], 2147483648, tl.int64)


@triton.jit
def _narrow(lo, hi, sums, goal, live, WAYS: tl.constexpr):
    """The interval after a launch: the last candidate whose sum reaches ``goal`` (the first,
    ``lo``, always: a live search starts from a goal the whole row meets) and the keys below
    the next. A search that does not apply (``live`` false) keeps ``lo``."""
    j = tl.arange(0, WAYS).to(tl.int64)
    step = (hi - lo + WAYS - 1) // WAYS
    ok = tl.where(live, (sums >= goal) & (sums > 0), False)  # no mass, no set: top_p <= 0 keeps the largest group
    best = tl.max(tl.where(ok, j, 0), 0)
    lo = lo + best * step
    return lo, tl.minimum(lo + step, hi), best


@triton.jit
def _goal(part_ptr, pid, n_out, n_parts, n_cols, goal_ptr, goal_val, COUNT: tl.constexpr, GOAL_TENSOR: tl.constexpr,
          WAYS: tl.constexpr, PB: tl.constexpr):
    """(the search's goal, whether it applies): top-k's k where 0 < k < n; top-p's ``top_p``
    times the mass the first launch's first candidate (the floor) weighed, where top_p < 1."""
    if COUNT:
        k, live = _k_of(goal_ptr, pid, goal_val, n_cols, GOAL_TENSOR)
        return k.to(tl.float32), live
    else:
        top_p = tl.load(goal_ptr + pid).to(tl.float32) if GOAL_TENSOR else tl.cast(goal_val, tl.float32)
        w = tl.arange(0, WAYS)
        mass = tl.sum(tl.where(w == 0, _part_sums(part_ptr, 0, pid, n_out, n_parts, WAYS, PB), 0.0), 0)
        return top_p * mass, top_p < 1.0  # top_p <= 0 and NaN: see _narrow and _threshold


@triton.jit
def _search_result(part_ptr, bounds_ptr, pid, n_out, n_parts, n_cols, goal_ptr, goal_val, COUNT: tl.constexpr,
                   GOAL_TENSOR: tl.constexpr, WAYS: tl.constexpr, STEPS: tl.constexpr, PB: tl.constexpr):
    """A finished search's (threshold key (int32), the last launch's candidate it is, whether the
    search applies, its goal): the last launch's interval narrowed by its sums. The last launch's candidates
    are one key apart where the keys take every bit pattern (fp32); bf16 / fp16 values' keys leave
    their low bits alone, and their searches stop once an interval holds one value's key."""
    goal, live = _goal(part_ptr, pid, n_out, n_parts, n_cols, goal_ptr, goal_val, COUNT, GOAL_TENSOR, WAYS, PB)
    b = bounds_ptr + ((STEPS - 1) * n_out + pid) * 2
    sums = _part_sums(part_ptr, STEPS - 1, pid, n_out, n_parts, WAYS, PB)
    lo, _hi, best = _narrow(tl.load(b), tl.load(b + 1), sums, goal, live, WAYS)
    t = lo.to(tl.int32)
    if not COUNT:  # a NaN top_p keeps only a NaN's key: nothing of a good row (no mass: NaN rows, -1 draws)
        t = tl.where(goal != goal, 2147483647, t)
    return t, best, live, goal


@triton.jit
def _threshold(part_ptr, bounds_ptr, pid, n_out, n_parts, n_cols, goal_ptr, goal_val, COUNT: tl.constexpr,
               GOAL_TENSOR: tl.constexpr, WAYS: tl.constexpr, STEPS: tl.constexpr, PB: tl.constexpr):
    t, _best, _live, _goal_v = _search_result(part_ptr, bounds_ptr, pid, n_out, n_parts, n_cols, goal_ptr, goal_val,
                                              COUNT, GOAL_TENSOR, WAYS, STEPS, PB)
    return t


@triton.jit
def _searched_mass(part_ptr, bounds_ptr, pid, n_out, n_parts, n_cols, p_ptr, p_val, P_TENSOR: tl.constexpr,
                   WAYS: tl.constexpr, STEPS: tl.constexpr, PB: tl.constexpr):
    """Each slice's kept mass (PB,) as the top-p search weighed it: its last launch's sums at
    the threshold's candidate (the mass of keys at or above it and the floor), or where top-p
    keeps everything, its first launch's first (all the mass above the floor); none for a
    NaN goal (a NaN top_p or a NaN in the row: no draw, a NaN row)."""
    _t, best, live, goal = _search_result(part_ptr, bounds_ptr, pid, n_out, n_parts, n_cols, p_ptr, p_val, False,
                                          P_TENSOR, WAYS, STEPS, PB)
    j = tl.arange(0, PB)
    jm = j < n_parts
    last = tl.load(part_ptr + (((STEPS - 1) * n_out + pid) * n_parts + j) * WAYS + best, mask=jm, other=0.0)
    whole = tl.load(part_ptr + ((pid * n_parts + j) * WAYS), mask=jm, other=0.0)
    own = tl.where(live, last, whole)
    return tl.where(goal == goal, own, 0.0)


@triton.jit
def _k_of(k_ptr, pid, k_val, n_cols, K_TENSOR: tl.constexpr):
    """(the row's top_k (int64), whether it filters: 0 < k < n_cols)."""
    k = tl.load(k_ptr + pid).to(tl.int64) if K_TENSOR else tl.cast(k_val, tl.int64)
    return k, (k > 0) & (k < n_cols)


@triton.jit
def _listed(pid, n_cols, k_ptr, k_val, K_TENSOR: tl.constexpr):
    """Whether _list_kernel draws the row: its top-k filters (from its list of candidates, or
    where they overflow it, by one program over the row); the other rows take the whole-row
    launches, top-k filtering none of them."""
    _k, live = _k_of(k_ptr, pid, k_val, n_cols, K_TENSOR)
    return live


@triton.jit
def _top_threshold(keys, w, goal, KEY_BITS: tl.constexpr):
    """The largest key t whose values' weight ``sum(w, keys >= t)`` reaches ``goal`` (and is
    positive): with w = 1 and goal = k, the k-th largest of ``keys`` (1-D int32); the lowest
    key where none does. WAYS candidates a step over the key range, a reduction a step (16
    ways, 4 or 2: as many as keep WAYS x the keys at 4096), over the keys' top KEY_BITS bits
    (bf16 / fp16 values' keys leave the low 16 / 13 alone)."""
    N: tl.constexpr = keys.shape[0]
    BITS: tl.constexpr = 4 if N <= 256 else (2 if N <= 1024 else 1)
    WAYS: tl.constexpr = 1 << BITS
    j = tl.arange(0, WAYS).to(tl.int64)
    lo = tl.full([], -2147483648, tl.int64)  # the answer at or above lo
    for s in tl.static_range((KEY_BITS + BITS - 1) // BITS):
        step = 1 << (32 - BITS * (s + 1))  # ... and below lo + WAYS step
        mids = (lo + j * step).to(tl.int32)
        sums = tl.sum(tl.where(keys[None, :] >= mids[:, None], w, 0), 1)
        lo = lo + tl.max(tl.where((sums >= goal) & (sums > 0), j, 0), 0) * step
    return lo.to(tl.int32)


@triton.jit
def _weigh(x_row, first, last, lo, hi, floor, mx, rse, inv_t, FROM_LOGITS: tl.constexpr, AS_PROBS: tl.constexpr,
           COUNT: tl.constexpr, WAYS: tl.constexpr, BLOCK: tl.constexpr, SB: tl.constexpr):
    """The WAYS candidates' sums over columns [first, last): the candidates split the interval
    [lo, hi) evenly; each sums the weights (``_weight``) of the keys at or above it and ``floor``.

    Keys at or above the interval count for every candidate, keys inside it for those at or
    below them, keys under it (or under the floor) for none. Only a chunk holding keys inside
    the interval weighs its candidates one by one: after a step or two the interval holds
    few keys, and a pass is a read and a compare a value."""
    j = tl.arange(0, WAYS).to(tl.int64)
    wstep = (hi - lo + WAYS - 1) // WAYS
    # int32 candidates: one past the largest key (2^31) compares as 2^31 - 1, a NaN's key, which no
    # counted value has
    mids = tl.minimum(lo + j * wstep, 2147483647).to(tl.int32)
    hi_c = tl.minimum(hi, 2147483647).to(tl.int32)  # a NaN's key (2^31 - 1): above, counted by all
    lo_c = tl.maximum(lo.to(tl.int32), floor)
    cols = tl.arange(0, BLOCK)
    if COUNT:
        return _count(x_row, first, last, lo, wstep, hi_c, lo_c, floor, mx, rse, inv_t, FROM_LOGITS, AS_PROBS, WAYS,
                      BLOCK)
    cols_s = tl.arange(0, SB)
    above = tl.zeros([BLOCK], dtype=tl.float32)
    acc = tl.zeros([WAYS, SB], dtype=tl.float32)
    for start in range(first, last, BLOCK):
        v, p, mask = _values(x_row, start + cols, last, mx, rse, inv_t, FROM_LOGITS, AS_PROBS)
        k = _vkey(v, p, FROM_LOGITS)
        above += tl.where(mask & (k >= hi_c) & (k >= floor), _weight(v, p, FROM_LOGITS, COUNT), 0.0)
        inside = mask & (k >= lo_c) & (k < hi_c)
        if tl.sum(inside.to(tl.int32), 0) > 0:
            for sub in range(start, start + BLOCK, SB):  # the chunk again (from L1), a part at a time
                v_s, p_s, mask_s = _values(x_row, sub + cols_s, last, mx, rse, inv_t, FROM_LOGITS, AS_PROBS)
                k_s = _vkey(v_s, p_s, FROM_LOGITS)
                w_s = tl.where(mask_s & (k_s >= lo_c) & (k_s < hi_c), _weight(v_s, p_s, FROM_LOGITS, COUNT), 0.0)
                acc += tl.where(k_s[None, :] >= mids[:, None], w_s[None, :], 0.0)
    return tl.sum(acc, 1) + tl.sum(above, 0)


@triton.jit
def _count(x_row, first, last, lo, wstep, hi_c, lo_c, floor, mx, rse, inv_t, FROM_LOGITS: tl.constexpr,
           AS_PROBS: tl.constexpr, WAYS: tl.constexpr, BLOCK: tl.constexpr):
    """``_weigh``'s counts (top-k): a histogram of the keys inside the interval over the WAYS
    candidates' buckets, summed from the top. A counting search's intervals span a power of 2
    keys (2^32 or 2^31, a WAYS-th of the last each launch), so a key's bucket is its offset
    from ``lo`` shifted: a few instructions a value where weighing the candidates one by one
    takes three a candidate."""
    shift = (wstep.to(tl.float32).to(tl.int32, bitcast=True) >> 23) - 127  # log2(wstep), a power of 2
    lo_u = lo.to(tl.int32).to(tl.uint32, bitcast=True)
    cols = tl.arange(0, BLOCK)
    above = tl.zeros([BLOCK], dtype=tl.int32)
    hist = tl.zeros([WAYS], dtype=tl.int32)
    for start in range(first, last, BLOCK):
        v, p, mask = _values(x_row, start + cols, last, mx, rse, inv_t, FROM_LOGITS, AS_PROBS)
        k = _vkey(v, p, FROM_LOGITS)
        has = mask & (_weight(v, p, FROM_LOGITS, True) > 0)
        above += (has & (k >= hi_c) & (k >= floor)).to(tl.int32)
        bucket = (k.to(tl.uint32, bitcast=True) - lo_u) >> shift.to(tl.uint32)  # (inside: [0, WAYS))
        hist += tl.histogram(bucket.to(tl.int32), WAYS, mask=has & (k >= lo_c) & (k < hi_c))
    return (tl.cumsum(hist, 0, reverse=True) + tl.sum(above, 0)).to(tl.float32)


@triton.jit
def _search_kernel(
    x_ptr, stats_ptr, part_ptr, bounds_ptr,
    fpart_ptr, fbounds_ptr,       # FLOOR: the finished top-k search
    idx_ptr, t_ptr, goal_ptr, fgoal_ptr,
    stride_x, n_cols, slice_len, n_parts, step,
    goal_val, fgoal_val, t_val,
    COUNT: tl.constexpr,          # top-k (count keys); else top-p (weigh probabilities)
    FLOOR: tl.constexpr,          # top-p of what top-k kept
    LIST: tl.constexpr,           # rows whose top-k filters are _list_kernel's: skipped
    FROM_LOGITS: tl.constexpr,    # keys of the logits (sign-ordered), weights their softmax
    GOAL_TENSOR: tl.constexpr,
    FGOAL_TENSOR: tl.constexpr,
    HAS_TEMP: tl.constexpr,
    T_TENSOR: tl.constexpr,
    HAS_INDICES: tl.constexpr,
    WAYS: tl.constexpr,           # candidate keys a launch (a power of 2)
    STEPS: tl.constexpr,          # launches: WAYS^STEPS >= the keys' distinct bit patterns
    PB: tl.constexpr,             # n_parts rounded up to a power of 2
    BLOCK: tl.constexpr,          # a chunk
    SB: tl.constexpr,             # a part of it weighed against the candidates (x WAYS sums in registers)
):
    t_val = tl.cast(t_val, tl.float32)
    pid, row, inv_t, part = _row_of(idx_ptr, t_ptr, t_val, HAS_INDICES, HAS_TEMP, T_TENSOR)
    n_out = tl.num_programs(0)
    AS_PROBS: tl.constexpr = (not FROM_LOGITS) or (not COUNT)  # top-k of logits: their keys alone
    lo, hi = _initial(FROM_LOGITS)
    goal, live = _goal(part_ptr, pid, n_out, n_parts, n_cols, goal_ptr, goal_val, COUNT, GOAL_TENSOR, WAYS, PB)
    if step > 0:
        b = bounds_ptr + ((step - 1) * n_out + pid) * 2
        sums = _part_sums(part_ptr, step - 1, pid, n_out, n_parts, WAYS, PB)
        lo, hi, _best = _narrow(tl.load(b), tl.load(b + 1), sums, goal, live, WAYS)
    if part == 0:
        b = bounds_ptr + (step * n_out + pid) * 2
        tl.store(b, lo)
        tl.store(b + 1, hi)
    work = live
    if not COUNT:
        work = work | (step == 0)  # a top-p search's first launch weighs the mass its goal divides
    if LIST:
        if COUNT:
            listed = _listed(pid, n_cols, goal_ptr, goal_val, GOAL_TENSOR)
        else:
            listed = _listed(pid, n_cols, fgoal_ptr, fgoal_val, FGOAL_TENSOR)
        work = work & (listed == 0)
    if work:
        floor = lo.to(tl.int32)
        if FLOOR:
            floor = _threshold(fpart_ptr, fbounds_ptr, pid, n_out, n_parts, n_cols, fgoal_ptr, fgoal_val, True,
                               FGOAL_TENSOR, WAYS, STEPS, PB)
        mx = tl.full([], 0.0, tl.float32)
        rse = tl.full([], 1.0, tl.float32)
        if FROM_LOGITS and AS_PROBS:
            mx, se, _a, _n = _row_stats(stats_ptr, pid, n_parts, inv_t, PB)
            rse = 1.0 / se
        first = part * slice_len
        sums = _weigh(x_ptr + row * stride_x, first, tl.minimum(first + slice_len, n_cols), lo, hi, floor, mx, rse,
                      inv_t, FROM_LOGITS, AS_PROBS, COUNT, WAYS, BLOCK, SB)
        w = tl.arange(0, WAYS)
        tl.store(part_ptr + ((step * n_out + pid) * n_parts + part) * WAYS + w, sums)


@triton.jit
def _kept_threshold(stats_ptr, kpart_ptr, kbounds_ptr, ppart_ptr, pbounds_ptr, k_ptr, p_ptr, minp_ptr,
                    pid, n_out, n_parts, n_cols, k_val, p_val, minp_val, inv_t,
                    FROM_LOGITS: tl.constexpr, TOP_K: tl.constexpr, TOP_P: tl.constexpr,
                    MIN_P: tl.constexpr, K_TENSOR: tl.constexpr, P_TENSOR: tl.constexpr,
                    MINP_TENSOR: tl.constexpr, WAYS: tl.constexpr, STEPS: tl.constexpr, PB: tl.constexpr):
    """The row's kept key: every filter's threshold (keys of one kind: ``_vkey``)."""
    lo, _hi = _initial(FROM_LOGITS)
    thr = lo.to(tl.int32)
    if TOP_K:
        thr = tl.maximum(thr, _threshold(kpart_ptr, kbounds_ptr, pid, n_out, n_parts, n_cols, k_ptr, k_val, True,
                                         K_TENSOR, WAYS, STEPS, PB))
    if TOP_P:
        thr = tl.maximum(thr, _threshold(ppart_ptr, pbounds_ptr, pid, n_out, n_parts, n_cols, p_ptr, p_val, False,
                                         P_TENSOR, WAYS, STEPS, PB))
    if MIN_P:
        tl.static_assert(not FROM_LOGITS, "min-p: of probabilities")
        min_p = tl.load(minp_ptr + pid).to(tl.float32) if MINP_TENSOR else tl.cast(minp_val, tl.float32)
        mx, _se, _a, _n = _row_stats(stats_ptr, pid, n_parts, inv_t, PB)
        thr = tl.maximum(thr, _key(min_p * mx, False))
    return thr


@triton.jit
def _mass_kernel(
    x_ptr, stats_ptr, kpart_ptr, kbounds_ptr, ppart_ptr, pbounds_ptr, mass_ptr,
    idx_ptr, k_ptr, p_ptr, minp_ptr, t_ptr,
    stride_x, n_cols, slice_len, n_parts,
    k_val, p_val, minp_val, t_val,
    FROM_LOGITS: tl.constexpr, TOP_K: tl.constexpr, TOP_P: tl.constexpr, MIN_P: tl.constexpr,
    K_TENSOR: tl.constexpr, P_TENSOR: tl.constexpr, MINP_TENSOR: tl.constexpr, HAS_TEMP: tl.constexpr,
    T_TENSOR: tl.constexpr, HAS_INDICES: tl.constexpr, LIST: tl.constexpr, WAYS: tl.constexpr,
    STEPS: tl.constexpr, PB: tl.constexpr, BLOCK: tl.constexpr,
):
    """A slice's kept mass: ``sum(p, key >= the row's threshold)`` (NaN kept); rows drawn from
    their lists (LIST) skipped."""
    t_val = tl.cast(t_val, tl.float32)
    pid, row, inv_t, part = _row_of(idx_ptr, t_ptr, t_val, HAS_INDICES, HAS_TEMP, T_TENSOR)
    n_out = tl.num_programs(0)
    work = part >= 0  # true
    if LIST:
        work = _listed(pid, n_cols, k_ptr, k_val, K_TENSOR) == 0
    if work:
        thr = _kept_threshold(stats_ptr, kpart_ptr, kbounds_ptr, ppart_ptr, pbounds_ptr, k_ptr, p_ptr, minp_ptr,
                              pid, n_out, n_parts, n_cols, k_val, p_val, minp_val, inv_t, FROM_LOGITS, TOP_K,
                              TOP_P, MIN_P, K_TENSOR, P_TENSOR, MINP_TENSOR, WAYS, STEPS, PB)
        mx = tl.full([], 0.0, tl.float32)
        rse = tl.full([], 1.0, tl.float32)
        if FROM_LOGITS:
            mx, se, _a, _n = _row_stats(stats_ptr, pid, n_parts, inv_t, PB)
            rse = 1.0 / se
        x_row = x_ptr + row * stride_x
        cols = tl.arange(0, BLOCK)
        first = part * slice_len
        last = tl.minimum(first + slice_len, n_cols)
        acc = tl.zeros([BLOCK], dtype=tl.float32)
        for start in range(first, last, BLOCK):
            v, p, mask = _values(x_row, start + cols, last, mx, rse, inv_t, FROM_LOGITS, True)
            acc += tl.where(mask & (_vkey(v, p, FROM_LOGITS) >= thr), p, 0.0)
        tl.store(mass_ptr + pid * n_parts + part, tl.sum(acc, 0))


@triton.jit
def _clear_kernel(ptr, n, BLOCK: tl.constexpr):
    """``ptr[:n] = 0`` (int32): the top-k bound's groups and the lists' counts, before a call's launches."""
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(ptr + offs, tl.zeros([BLOCK], tl.int32), mask=offs < n)


@triton.jit
def _bound_kernel(x_ptr, gmax_ptr, idx_ptr, t_ptr, stride_x, n_cols, slice_len, t_val, FROM_LOGITS: tl.constexpr,
                  HAS_TEMP: tl.constexpr, T_TENSOR: tl.constexpr, HAS_INDICES: tl.constexpr, G: tl.constexpr,
                  R: tl.constexpr):
    """A lower bound of each row's top-k threshold, cheap to take: the row cut into G groups
    (column c in group ``(c - slice start) % G`` of every slice), each group's largest key.
    Those are G distinct values, so the k-th largest of them (k <= G) is at most the row's k-th
    largest. A slice takes its groups' largest values (a maximum a value, NaN kept) and merges
    their keys into the row's G (``gmax``, zeroed: keys stored as ``key ^ 2^31``, unsigned)."""
    t_val = tl.cast(t_val, tl.float32)
    pid, row, _inv_t, part = _row_of(idx_ptr, t_ptr, t_val, HAS_INDICES, HAS_TEMP, T_TENSOR)
    x_row = x_ptr + row * stride_x
    first = part * slice_len
    last = tl.minimum(first + slice_len, n_cols)
    cols = tl.arange(0, R * G)  # R runs of the G groups a step: a maximum a value, no reduction
    acc = tl.full([R * G], float("-inf"), tl.float32)
    for start in range(first, last, R * G):
        _v, p, _mask = _values(x_row, start + cols, last, 0.0, 1.0, 1.0, FROM_LOGITS, not FROM_LOGITS)
        acc = tl.maximum(acc, p, propagate_nan=tl.PropagateNan.ALL)  # (logits: p is v; past the row: -inf / 0)
    acc = tl.reshape(acc, [R, G])
    top = tl.where(tl.max((acc != acc).to(tl.int32), 0) > 0, float("nan"), tl.max(acc, 0))
    keys = _vkey(top, top, FROM_LOGITS)
    g_row = (gmax_ptr + pid * G).to(tl.pointer_type(tl.uint32), bitcast=True)
    tl.atomic_max(g_row + tl.arange(0, G), (keys ^ -2147483648).to(tl.uint32, bitcast=True))


@triton.jit
def _compact_kernel(
    x_ptr, gmax_ptr, cnt_ptr, list_ptr,
    idx_ptr, k_ptr, t_ptr,
    stride_x, n_cols, slice_len, k_val, t_val,
    FROM_LOGITS: tl.constexpr, K_TENSOR: tl.constexpr, HAS_TEMP: tl.constexpr, T_TENSOR: tl.constexpr,
    HAS_INDICES: tl.constexpr, G: tl.constexpr, CAP: tl.constexpr, BLOCK: tl.constexpr, KEY_BITS: tl.constexpr,
):
    """A row's top-k candidates: every value with mass whose key reaches the row's bound (the
    k-th largest of ``_bound_kernel``'s G keys, or every value where k > G), their columns
    listed in the order they reach the row's count (``cnt``, zeroed; it counts past CAP: such
    a row is not listed). The candidates hold the row's top-k and its ties; _list_kernel
    sorts them."""
    t_val = tl.cast(t_val, tl.float32)
    pid, row, _inv_t, part = _row_of(idx_ptr, t_ptr, t_val, HAS_INDICES, HAS_TEMP, T_TENSOR)
    k, live = _k_of(k_ptr, pid, k_val, n_cols, K_TENSOR)
    if live:
        bound = tl.full([], -2147483648, tl.int32)
        if k <= G:
            g_row = (gmax_ptr + pid * G).to(tl.pointer_type(tl.uint32), bitcast=True)
            gk = tl.load(g_row + tl.arange(0, G)).to(tl.int32, bitcast=True) ^ -2147483648
            bound = _top_threshold(gk, 1, k, KEY_BITS)
        x_row = x_ptr + row * stride_x
        first = part * slice_len
        last = tl.minimum(first + slice_len, n_cols)
        cols = tl.arange(0, BLOCK)
        for start in range(first, last, BLOCK):  # no reduction a step: loads as in a plain pass
            v, p, mask = _values(x_row, start + cols, last, 0.0, 1.0, 1.0, FROM_LOGITS, not FROM_LOGITS)
            keep = mask & (_vkey(v, p, FROM_LOGITS) >= bound) & (_weight(v, p, FROM_LOGITS, True) > 0)
            # each candidate its own place (few lanes: most values of a long row are below the bound)
            pos = tl.atomic_add(cnt_ptr + pid + tl.zeros_like(cols), 1, mask=keep)
            keep = keep & (pos < CAP)
            tl.store(list_ptr + pid * CAP + pos, start + cols, mask=keep)


@triton.jit
def _list_draw(x_row, n_cols, list_ptr, u_ptr, p_ptr, pid, count, k, p_val, inv_t, greedy,
               FROM_LOGITS: tl.constexpr, TOP_P: tl.constexpr, P_TENSOR: tl.constexpr, CAP: tl.constexpr,
               KEY_BITS: tl.constexpr):
    """A row's token from its ``count`` listed top-k candidates: sorted into index order, the
    top-k of them kept (the k-th largest key and its ties; all where fewer than k), their
    softmax (FROM_LOGITS) or probabilities; top-p over them (the largest value whose values
    at or above it hold ``top_p`` of their mass, its tie group kept: the reference's first
    sorted value whose running mass reaches it); the draw's inverse CDF in index order. -1
    where a NaN is kept or no mass is left; greedy: the first largest."""
    r = tl.arange(0, CAP)
    m = r < count
    # index order: the listed columns sorted (the unlisted last), their values read again
    col = tl.sort(tl.where(m, tl.load(list_ptr + pid * CAP + r, mask=m, other=0), 2147483647), 0)
    _x, v, _mask = _values(x_row, col, n_cols, 0.0, 1.0, 1.0, FROM_LOGITS, not FROM_LOGITS)
    key = _vkey(v, v, FROM_LOGITS)
    m = m & (key >= _top_threshold(key, tl.where(m, 1, 0), k, KEY_BITS))
    bad = tl.max(tl.where(m & (v != v), 1, 0), 0) > 0
    mx = tl.max(tl.where(m & (v == v), v, float("-inf")), 0)
    if FROM_LOGITS:
        p = tl.where(m, tl.exp((v - mx) * inv_t), 0.0)
    else:
        p = tl.where(m, v, 0.0)
    keep = m & (p > 0)
    if TOP_P:
        top_p = tl.load(p_ptr + pid).to(tl.float32) if P_TENSOR else tl.cast(p_val, tl.float32)
        # the largest value whose values at or above it hold top_p of the mass (its ties kept; top_p
        # <= 0: the largest group), by the values' keys (logits: the logits', as the whole-row search)
        t = _top_threshold(key, p, top_p * tl.sum(p, 0), KEY_BITS)
        t = tl.where(top_p >= 1.0, -2147483648, t)  # top_p >= 1: every survivor
        t = tl.where(top_p == top_p, t, 2147483647)  # NaN: none
        keep = keep & (key >= t)
    kp = tl.where(keep, p, 0.0)
    mass = tl.sum(kp, 0)
    run = tl.cumsum(kp, 0)
    target = tl.load(u_ptr + pid) * mass
    hit = tl.min(tl.where(keep & (run > target), r, CAP), 0)
    hit = tl.where(hit < CAP, hit, tl.max(tl.where(keep, r, -1), 0))  # rounding: the last kept
    if greedy:
        hit = tl.min(tl.where(m & (v == mx), r, CAP), 0)
    tok = tl.sum(tl.where(r == hit, col, 0), 0)
    return tl.where(bad | ((mass > 0) == 0), -1, tok)


@triton.jit
def _scan_draw(x_row, first, last, thr, target, running, mx, rse, inv_t, FROM_LOGITS: tl.constexpr,
               BLOCK_S: tl.constexpr):
    """The draw's inverse CDF over columns [first, last): the first kept column whose running
    kept mass (from ``running``) passes ``target``; the last kept one where rounding leaves
    none (0 where none is kept)."""
    cols = tl.arange(0, BLOCK_S)
    found = tl.full([BLOCK_S], 2147483647, tl.int32)  # per lane, reduced once after the columns
    last_kept = tl.full([BLOCK_S], -1, tl.int32)
    for start in range(first, last, BLOCK_S):
        v, p, mask = _values(x_row, start + cols, last, mx, rse, inv_t, FROM_LOGITS, True)
        kept = mask & (_vkey(v, p, FROM_LOGITS) >= thr) & (p > 0)
        pk = tl.where(kept, p, 0.0)
        c = start + cols
        found = tl.minimum(found, tl.where(kept & (running + tl.cumsum(pk, 0) > target), c, 2147483647))
        last_kept = tl.maximum(last_kept, tl.where(kept, c, -1))
        running += tl.sum(pk, 0)
    f = tl.min(found, 0)
    return tl.where(f < 2147483647, f, tl.max(last_kept, 0))


@triton.jit
def _row_draw(x_row, n_cols, kthr, u_ptr, p_ptr, pid, p_val, inv_t, greedy, FROM_LOGITS: tl.constexpr,
              TOP_P: tl.constexpr, P_TENSOR: tl.constexpr, WAYS: tl.constexpr, STEPS: tl.constexpr,
              BLOCK: tl.constexpr, SB: tl.constexpr):
    """A row's token by one program over the whole row, where its top-k survivors (threshold
    ``kthr``) overflow their list (ties: a row of equal values): the slices' launches in one
    program, their thresholds and sums as they take them (top-p's search of WAYS candidates
    STEPS times over the survivors, the kept mass its last weighing, the draw's inverse CDF)."""
    mx = tl.full([], 0.0, tl.float32)
    rse = tl.full([], 1.0, tl.float32)
    arg = tl.full([], 0, tl.int32)
    if FROM_LOGITS:
        mx, arg, _nan, se = _stats_of(x_row, 0, n_cols, inv_t, True, BLOCK)
        rse = 1.0 / se
    j = tl.arange(0, WAYS)
    thr = kthr
    lo, hi = _initial(FROM_LOGITS)
    # STEPS weighings narrowing the interval as the launches over slices do; the first's first
    # candidate (the whole key range) weighs the survivors' mass, top-p's goal a fraction of it
    sums = _weigh(x_row, 0, n_cols, lo, hi, kthr, mx, rse, inv_t, FROM_LOGITS, True, False, WAYS, BLOCK, SB)
    mass = tl.sum(tl.where(j == 0, sums, 0.0), 0)
    if TOP_P:
        top_p = tl.load(p_ptr + pid).to(tl.float32) if P_TENSOR else tl.cast(p_val, tl.float32)
        goal = top_p * mass
        live = top_p < 1.0
        lo, hi, best = _narrow(lo, hi, sums, goal, live, WAYS)
        for _s in tl.static_range(STEPS - 1):
            sums = _weigh(x_row, 0, n_cols, lo, hi, kthr, mx, rse, inv_t, FROM_LOGITS, True, False, WAYS, BLOCK,
                          SB)
            lo, hi, best = _narrow(lo, hi, sums, goal, live, WAYS)
        thr = tl.maximum(thr, tl.where(goal != goal, 2147483647, lo.to(tl.int32)))
        mass = tl.where(live, tl.sum(tl.where(j == best, sums, 0.0), 0), mass)
        mass = tl.where(goal == goal, mass, 0.0)
    tok = _scan_draw(x_row, 0, n_cols, thr, tl.load(u_ptr + pid) * mass, tl.full([], 0.0, tl.float32), mx, rse,
                     inv_t, FROM_LOGITS, SB)
    if greedy:
        tok = arg
    return tl.where(mass > 0, tok, -1)


@triton.jit
def _row_kth(x_row, n_cols, k, FROM_LOGITS: tl.constexpr, WAYS: tl.constexpr, STEPS: tl.constexpr,
             BLOCK: tl.constexpr, SB: tl.constexpr):
    """A row's top-k threshold key by one program: the search's STEPS counts over the whole row."""
    lo, hi = _initial(FROM_LOGITS)
    goal = k.to(tl.float32)
    for _s in tl.static_range(STEPS):
        sums = _weigh(x_row, 0, n_cols, lo, hi, lo.to(tl.int32), 0.0, 1.0, 1.0, FROM_LOGITS, not FROM_LOGITS, True,
                      WAYS, BLOCK, SB)
        lo, hi, _best = _narrow(lo, hi, sums, goal, goal == goal, WAYS)
    return lo.to(tl.int32)


@triton.jit
def _list_kernel(
    x_ptr, out_ptr, cnt_ptr, list_ptr, idx_ptr, u_ptr, k_ptr, p_ptr, t_ptr,
    stride_x, n_cols, k_val, p_val, t_val,
    FROM_LOGITS: tl.constexpr, TOP_P: tl.constexpr, K_TENSOR: tl.constexpr, P_TENSOR: tl.constexpr,
    HAS_TEMP: tl.constexpr, T_TENSOR: tl.constexpr, HAS_INDICES: tl.constexpr,
    WAYS: tl.constexpr, STEPS: tl.constexpr, CAP: tl.constexpr, BLOCK: tl.constexpr, SB: tl.constexpr,
    KEY_BITS: tl.constexpr,       # the keys' bits that differ: 32 (fp32 values), 20 (fp16), 16 (bf16)
):
    """A row's token where its top-k filters: from its listed candidates (``_list_draw``), or
    where they overflow the list, by this program over the row (``_row_kth``, ``_row_draw``)."""
    t_val = tl.cast(t_val, tl.float32)
    pid, row, inv_t, _part = _row_of(idx_ptr, t_ptr, t_val, HAS_INDICES, HAS_TEMP, T_TENSOR)
    greedy = _greedy(t_ptr, pid, t_val, HAS_TEMP, T_TENSOR)
    k, live = _k_of(k_ptr, pid, k_val, n_cols, K_TENSOR)  # live: the row is this kernel's (_listed)
    x_row = x_ptr + row * stride_x
    count = tl.load(cnt_ptr + pid)
    if live & (count <= CAP):
        tl.store(out_ptr + pid, _list_draw(x_row, n_cols, list_ptr, u_ptr, p_ptr, pid, count, k, p_val, inv_t, greedy,
                                           FROM_LOGITS, TOP_P, P_TENSOR, CAP, KEY_BITS))
    elif live:
        kthr = _row_kth(x_row, n_cols, k, FROM_LOGITS, WAYS, STEPS, BLOCK, SB)
        tl.store(out_ptr + pid, _row_draw(x_row, n_cols, kthr, u_ptr, p_ptr, pid, p_val, inv_t, greedy, FROM_LOGITS,
                                          TOP_P, P_TENSOR, WAYS, STEPS, BLOCK, SB))


@triton.jit
def _finish_kernel(
    x_ptr, out_ptr, stats_ptr, kpart_ptr, kbounds_ptr, ppart_ptr, pbounds_ptr, mass_ptr,
    idx_ptr, u_ptr, k_ptr, p_ptr, minp_ptr, t_ptr,
    stride_x, stride_out, n_cols, slice_len, n_parts,
    k_val, p_val, minp_val, t_val,
    MODE: tl.constexpr,           # "sample", "renorm" or "mask"
    SEARCHED_MASS: tl.constexpr,  # the kept mass from the top-p search (_searched_mass), not _mass_kernel's
    FROM_LOGITS: tl.constexpr, TOP_K: tl.constexpr, TOP_P: tl.constexpr, MIN_P: tl.constexpr,
    K_TENSOR: tl.constexpr, P_TENSOR: tl.constexpr, MINP_TENSOR: tl.constexpr, HAS_TEMP: tl.constexpr,
    T_TENSOR: tl.constexpr, HAS_INDICES: tl.constexpr, LIST: tl.constexpr, WAYS: tl.constexpr,
    STEPS: tl.constexpr, PB: tl.constexpr,
    BLOCK: tl.constexpr,
    BLOCK_S: tl.constexpr,        # the draw's scan chunk
):
    t_val = tl.cast(t_val, tl.float32)
    pid, row, inv_t, part = _row_of(idx_ptr, t_ptr, t_val, HAS_INDICES, HAS_TEMP, T_TENSOR)
    n_out = tl.num_programs(0)
    greedy = _greedy(t_ptr, pid, t_val, HAS_TEMP, T_TENSOR)
    listed = part < 0  # false
    if LIST:  # rows drawn from their lists: _list_kernel's
        listed = _listed(pid, n_cols, k_ptr, k_val, K_TENSOR)
    if listed == 0:
        _finish_slice(x_ptr, out_ptr, stats_ptr, kpart_ptr, kbounds_ptr, ppart_ptr, pbounds_ptr, mass_ptr, u_ptr,
                      k_ptr, p_ptr, minp_ptr, stride_x, stride_out, n_cols, slice_len, n_parts, k_val, p_val,
                      minp_val, pid, row, inv_t, part, n_out, greedy, MODE, SEARCHED_MASS, FROM_LOGITS, TOP_K,
                      TOP_P, MIN_P, K_TENSOR, P_TENSOR, MINP_TENSOR, WAYS, STEPS, PB, BLOCK, BLOCK_S)


@triton.jit
def _finish_slice(x_ptr, out_ptr, stats_ptr, kpart_ptr, kbounds_ptr, ppart_ptr, pbounds_ptr, mass_ptr, u_ptr,
                  k_ptr, p_ptr, minp_ptr, stride_x, stride_out, n_cols, slice_len, n_parts, k_val, p_val,
                  minp_val, pid, row, inv_t, part, n_out, greedy, MODE: tl.constexpr,
                  SEARCHED_MASS: tl.constexpr, FROM_LOGITS: tl.constexpr,
                  TOP_K: tl.constexpr, TOP_P: tl.constexpr, MIN_P: tl.constexpr, K_TENSOR: tl.constexpr,
                  P_TENSOR: tl.constexpr, MINP_TENSOR: tl.constexpr, WAYS: tl.constexpr,
                  STEPS: tl.constexpr, PB: tl.constexpr, BLOCK: tl.constexpr, BLOCK_S: tl.constexpr):
    """A slice of a row thresholded over the whole row: its renormalized or masked values, or
    (the slice that holds the row's draw) the token."""
    thr = _kept_threshold(stats_ptr, kpart_ptr, kbounds_ptr, ppart_ptr, pbounds_ptr, k_ptr, p_ptr, minp_ptr, pid,
                          n_out, n_parts, n_cols, k_val, p_val, minp_val, inv_t, FROM_LOGITS, TOP_K, TOP_P,
                          MIN_P, K_TENSOR, P_TENSOR, MINP_TENSOR, WAYS, STEPS, PB)
    x_row = x_ptr + row * stride_x
    first = part * slice_len
    last = tl.minimum(first + slice_len, n_cols)
    j = tl.arange(0, PB)
    if MODE == "mask":
        _mx, _se, _a, nan = _row_stats(stats_ptr, pid, n_parts, inv_t, PB)
        drop = tl.where(nan > 0, float("nan"), float("-inf"))  # a row holding NaN: NaN throughout
        cols = tl.arange(0, BLOCK)
        for start in range(first, last, BLOCK):
            v, _p, mask = _values(x_row, start + cols, last, 0.0, 1.0, 1.0, True, False)
            y = tl.where(_key(v, True) >= thr, v, drop)
            y = tl.where(drop != drop, float("nan"), y)
            tl.store(out_ptr + pid * stride_out + start + cols, y.to(out_ptr.dtype.element_ty), mask=mask)
    else:
        mx = tl.full([], 0.0, tl.float32)
        rse = tl.full([], 1.0, tl.float32)
        arg = tl.full([], 0, tl.int32)
        if FROM_LOGITS:
            mx, se, arg, _n = _row_stats(stats_ptr, pid, n_parts, inv_t, PB)
            rse = 1.0 / se
        if SEARCHED_MASS:
            own = _searched_mass(ppart_ptr, pbounds_ptr, pid, n_out, n_parts, n_cols, p_ptr, p_val, P_TENSOR, WAYS,
                                 STEPS, PB)
        else:
            own = tl.load(mass_ptr + pid * n_parts + j, mask=j < n_parts, other=0.0)
        if MODE == "renorm":
            kept_mass = tl.sum(own, 0)
            cols = tl.arange(0, BLOCK)
            for start in range(first, last, BLOCK):
                v, p, mask = _values(x_row, start + cols, last, mx, rse, inv_t, FROM_LOGITS, True)
                y = tl.where(_vkey(v, p, FROM_LOGITS) >= thr, p / kept_mass, 0.0 / kept_mass)  # no mass: 0 / 0
                tl.store(out_ptr + pid * stride_out + start + cols, y.to(out_ptr.dtype.element_ty), mask=mask)
        else:
            tl.static_assert(MODE == "sample")
            # the slices' masses summed in order: the slice whose running total first passes the target draws
            cs = tl.cumsum(own, 0)
            kept_mass = tl.sum(tl.where(j == n_parts - 1, cs, 0.0), 0)
            target = tl.load(u_ptr + pid) * kept_mass
            hit = tl.min(tl.where((cs > target) & (own > 0) & (j < n_parts), j, PB), 0)
            hit = tl.where(hit < PB, hit, tl.max(tl.where(own > 0, j, -1), 0))  # rounding: the last with mass
            if (kept_mass > 0) & (part == hit) & (greedy == 0):
                running = tl.sum(tl.where(j == part - 1, cs, 0.0), 0)  # the slices before, as summed above
                tl.store(out_ptr + pid, _scan_draw(x_row, first, last, thr, target, running, mx, rse, inv_t,
                                                   FROM_LOGITS, BLOCK_S))
            if part == 0:
                if greedy:  # the first index of the row's largest logit; -1 for a bad row
                    tl.store(out_ptr + pid, tl.where(kept_mass > 0, arg, -1))
                elif (kept_mass > 0) == 0:  # no mass kept, or NaN
                    tl.store(out_ptr + pid, -1)
