"""Top-k kernels over rows: selection on packed integer keys.

Every element becomes one integer whose signed order is the order top-k wants:

* the value's bits as an order-preserving signed key (``_float_keys``): negative
  floats have their magnitude bits flipped; -0.0 is given +0.0's key and every NaN
  one key above +inf, as torch orders them; for the smallest (``LARGEST`` false)
  the key is inverted (``~key``), which keeps NaN last;
* the key in the high bits, the column in the low bits counted down from their
  maximum, so that of two equal keys the lower column is the larger integer.

The largest packed integers are then the top-k, ties to the lower index, and one
integer max (or sort) carries its own argmax. Keys are taken from the value's bits
in its own dtype: no rounding ever reorders two values. Packing:

* ``KEY32`` (16-bit dtypes, chunks of at most 32768 columns): an int32, the key in
  the high 16 bits, ``0xFFFF - column in chunk`` in the low 16;
* otherwise an int64, the key in the high 32 bits, ``0x7FFFFFFF - column`` in the
  low 32 (columns below 2^31 - 1).

Lanes past the row hold ``PAD`` (the type's minimum): below every packed element,
whose low bits are never 0.
Values are never rebuilt from keys: the outputs gather x at the selected columns,
so ``x.gather(dim, indices) == values`` bit for bit.

``_topk_kernel`` is the one selection kernel: it reads a (BLOCK_M, BLOCK_N) tile of
x or of packed candidates, keeps its BLOCK_K largest (BLOCK_K rounds of max
extraction, or Triton's bitonic ``tl.topk``), and writes them as packed int64 candidates or,
``FINAL``, as values and int64 indices. ``_bitonic_pass_kernel`` is one
compare-exchange step of a bitonic sort over rows in global memory, for k too large
to keep in registers.

Rows too long for one program take ``_topk_filter_kernel``, launched twice: it
reduces groups of columns to their largest key and takes the k-th largest of those
as the row's bound, then gathers the elements at or above it and sorts them (module
doc of ``aiter_lite.ops.triton.topk``).
"""

import triton
import triton.language as tl

from aiter_lite.ops.triton._triton_kernels.split_rows import co_resident, segments_waiting

PAD32 = tl.constexpr(-(2**31))
PAD64 = tl.constexpr(-(2**63))
KEY_MIN = tl.constexpr(-(2**31))  # below every key but largest=False's NaN (which equals it)


@triton.jit
def _float_keys(x, LARGEST: tl.constexpr):
    """Signed int32 keys of x (float32 / float16 / bfloat16) in x's value order, exact.

    16-bit dtypes give keys in [-2^15, 2^15), float32 in [-2^31, 2^31). Zeros and
    NaNs are told apart by their bits, not by float compares (no conversion)."""
    if x.dtype.primitive_bitwidth == 16:
        bits = x.to(tl.int16, bitcast=True).to(tl.int32)
        magnitude_mask = 0x7FFF
        inf_bits = 0x7C00 if x.dtype == tl.float16 else 0x7F80
    else:
        bits = x.to(tl.int32, bitcast=True)
        magnitude_mask = 0x7FFFFFFF
        inf_bits = 0x7F800000
    magnitude = bits & magnitude_mask
    key = tl.where(bits < 0, bits ^ magnitude_mask, bits)
    key = tl.where(magnitude == 0, 0, key)
    key = tl.where(magnitude > inf_bits, magnitude_mask, key)
    if not LARGEST:
        key = ~key
    return key


@triton.jit
def _row_offsets(rows, rows_inner, stride_r0, stride_r1):
    """Offsets of rows (int64) in a tensor whose rows are (row // rows_inner, row % rows_inner)."""
    return (rows // rows_inner) * stride_r0 + (rows % rows_inner) * stride_r1


@triton.jit
def _select(packed, PAD: tl.constexpr, MODE: tl.constexpr, BLOCK_K: tl.constexpr):
    """The BLOCK_K largest of each row of ``packed`` (lanes past the row hold PAD), largest first."""
    if MODE == 0:
        lanes = tl.arange(0, BLOCK_K)[None, :]
        top = tl.full([packed.shape[0], BLOCK_K], PAD, packed.dtype)
        for j in tl.static_range(BLOCK_K):
            m = tl.max(packed, axis=1)
            top = tl.where(lanes == j, m[:, None], top)
            packed = tl.where(packed == m[:, None], PAD, packed)
        return top
    elif MODE == 1:
        return tl.topk(packed, BLOCK_K)
    else:
        return packed


@triton.jit
def _topk_kernel(
    x_ptr,                        # the input: element (row, col) at _row_offsets(row) + col * stride_x_n
    cand_in_ptr,                  # int64 packed candidates, rows of stride_cand_in (not FROM_X)
    cand_out_ptr,                 # int64 packed candidates out, BLOCK_K a program (not FINAL)
    values_ptr, indices_ptr,      # outputs (FINAL), element (row, j) at the out strides
    stride_x_r0, stride_x_r1, stride_x_n,
    stride_o_r0, stride_o_r1, stride_o_k,
    stride_cand_in, stride_cand_out,
    n_rows,
    rows_inner,                   # rows are (row // rows_inner, row % rows_inner): a moved dim needs no copy
    n_in,                         # elements of a row to select from: x's columns, or candidates
    n_chunks,                     # programs per row block, chunk i covering [i * BLOCK_N, (i + 1) * BLOCK_N)
    k,
    FROM_X: tl.constexpr,         # read x and make keys; else read packed candidates
    FINAL: tl.constexpr,          # write values and indices; else candidates
    LARGEST: tl.constexpr,
    KEY32: tl.constexpr,          # from x: keys packed in int32 (16-bit dtypes)
    MODE: tl.constexpr,           # 0: BLOCK_K rounds of max extraction; 1: tl.topk; 2: the input is in order
    INT64: tl.constexpr,          # column offsets of x or of the outputs can pass 2^31
    BLOCK_M: tl.constexpr,        # rows per program
    BLOCK_N: tl.constexpr,        # elements of a row per program: grid (row blocks x n_chunks), chunks inner
    BLOCK_K: tl.constexpr,        # elements kept per program, a power of 2 >= k (BLOCK_N for MODE 2)
):
    """The BLOCK_K largest packed keys of one (BLOCK_M rows, BLOCK_N elements) chunk.

    Not FINAL: they go to ``cand_out`` at columns [chunk * BLOCK_K, (chunk + 1) *
    BLOCK_K), largest first, as int64 with their column in x. FINAL: the first k
    (from column chunk * BLOCK_K on, for a sorted input) become values, gathered
    from x, and indices."""
    pid = tl.program_id(0)
    chunk = pid % n_chunks
    rows = (pid // n_chunks).to(tl.int64) * BLOCK_M + tl.arange(0, BLOCK_M)
    row_mask = rows < n_rows
    local = tl.arange(0, BLOCK_N)
    cols = chunk * BLOCK_N + local
    mask = row_mask[:, None] & (cols < n_in)[None, :]
    x_rows = _row_offsets(rows, rows_inner, stride_x_r0, stride_x_r1)
    if FROM_X:
        col_offs = cols.to(tl.int64) * stride_x_n if INT64 else cols * stride_x_n
        x = tl.load(x_ptr + x_rows[:, None] + col_offs[None, :], mask=mask, other=0.0)
        key = _float_keys(x, LARGEST)
        if KEY32:
            packed = tl.where(mask, (key << 16) | (0xFFFF - local)[None, :], PAD32)
        else:
            packed = tl.where(mask, (key.to(tl.int64) << 32) | (0x7FFFFFFF - cols).to(tl.int64)[None, :], PAD64)
    else:
        packed = tl.load(cand_in_ptr + rows[:, None] * stride_cand_in + cols[None, :], mask=mask, other=PAD64)
    top = _select(packed, PAD32 if FROM_X and KEY32 else PAD64, MODE, BLOCK_K)
    lanes = tl.arange(0, BLOCK_K)
    if FROM_X and KEY32:
        col = (chunk * BLOCK_N + 0xFFFF - (top & 0xFFFF)).to(tl.int64)
    else:
        col = 0x7FFFFFFF - (top & 0x7FFFFFFF)
    if FINAL:
        out_cols = chunk * BLOCK_K + lanes
        out_mask = row_mask[:, None] & (out_cols < k)[None, :]
        values = tl.load(x_ptr + x_rows[:, None] + col * stride_x_n, mask=out_mask)
        out_col_offs = out_cols.to(tl.int64) * stride_o_k if INT64 else out_cols * stride_o_k
        out = _row_offsets(rows, rows_inner, stride_o_r0, stride_o_r1)[:, None] + out_col_offs[None, :]
        tl.store(values_ptr + out, values, mask=out_mask)
        tl.store(indices_ptr + out, col, mask=out_mask)
    else:
        if FROM_X and KEY32:
            wide = ((top >> 16).to(tl.int64) << 32) | (0x7FFFFFFF - col)
            top = tl.where(top == PAD32, PAD64, wide)
        out = rows[:, None] * stride_cand_out + (chunk * BLOCK_K + lanes)[None, :]
        tl.store(cand_out_ptr + out, top, mask=row_mask[:, None])


@triton.jit
def _bitonic_pass_kernel(
    keys_ptr,                     # int64 (n_rows, row_len), row_len a power of 2; sorted in place, largest first
    stride_row,
    row_len,
    log_span,                     # MIRROR: the merged sequences' length 2^log_span
    log_dist,                     # else: the distance 2^log_dist of compared elements
    MIRROR: tl.constexpr,
    BLOCK: tl.constexpr,          # pairs per program: grid (rows x row_len / (2 * BLOCK)), pair blocks inner
):
    """One compare-exchange step of a bitonic sort, the larger key to the lower position.

    MIRROR: element i of each 2^log_span block against its mirror (the merge of two
    sorted halves, both largest first); else element i against i + 2^log_dist, for i
    with that bit clear (a half-cleaner)."""
    blocks = row_len // (2 * BLOCK)
    pid = tl.program_id(0)
    row = (pid // blocks).to(tl.int64)
    pair = (pid % blocks).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    one = tl.full([], 1, tl.int64)
    if MIRROR:
        lo = ((pair >> (log_span - 1)) << log_span) + (pair & ((one << (log_span - 1)) - 1))
        hi = lo ^ ((one << log_span) - 1)
    else:
        lo = ((pair >> log_dist) << (log_dist + 1)) + (pair & ((one << log_dist) - 1))
        hi = lo + (one << log_dist)
    base = keys_ptr + row * stride_row
    a = tl.load(base + lo)
    b = tl.load(base + hi)
    tl.store(base + lo, tl.maximum(a, b))
    tl.store(base + hi, tl.minimum(a, b))


# ---------------------------------------------------------------------------
# long rows: a bound from group maxima, then the candidates above it


@triton.jit
def _packed(key, cols, mask):
    """int64 packed keys of one chunk (module doc), PAD64 where masked."""
    return tl.where(mask, (key.to(tl.int64) << 32) | (0x7FFFFFFF - cols).to(tl.int64), PAD64)


@triton.jit
def _load_cols(x_row, cols, n_cols, stride_x_n, other, INT64: tl.constexpr):
    """x at a row's columns ``cols`` (any shape), ``other`` past the row."""
    col_offs = cols.to(tl.int64) * stride_x_n if INT64 else cols * stride_x_n
    return tl.load(x_row + col_offs, mask=cols < n_cols, other=other)


@triton.jit
def _load_keys(x_row, cols, n_cols, stride_x_n, LARGEST: tl.constexpr, INT64: tl.constexpr):
    """In-row mask and int32 keys of a row's columns ``cols`` (any shape)."""
    return cols < n_cols, _float_keys(_load_cols(x_row, cols, n_cols, stride_x_n, 0.0, INT64), LARGEST)


@triton.jit
def _write_top(x_row, out_row, top, k, stride_x_n, stride_o_k, values_ptr, indices_ptr, INT64: tl.constexpr):
    """The first k of ``top`` (packed, largest first) as values gathered from x and int64 indices."""
    j = tl.arange(0, top.shape[0])
    mask = j < k
    col = 0x7FFFFFFF - (top & 0x7FFFFFFF)
    values = tl.load(x_row + col * stride_x_n, mask=mask)
    out = out_row + (j.to(tl.int64) * stride_o_k if INT64 else j * stride_o_k)
    tl.store(values_ptr + out, values, mask=mask)
    tl.store(indices_ptr + out, col, mask=mask)


@triton.jit
def _key_value(key, dtype: tl.constexpr, LARGEST: tl.constexpr):
    """The value (as float32) whose key (``_float_keys``) is ``key``: NaN for the NaN key."""
    if not LARGEST:
        key = ~key
    if dtype.primitive_bitwidth == 16:
        bits = tl.where(key < 0, key ^ 0x7FFF, key).to(tl.int16)
    else:
        bits = tl.where(key < 0, key ^ 0x7FFFFFFF, key)
    return bits.to(dtype, bitcast=True).to(tl.float32)


@triton.jit
def _reaches(x, bval, all_reach, LARGEST: tl.constexpr):
    """Whether each key of x is at least the key of ``bval``, in float compares: NaN
    ranks above everything for the largest and below for the smallest, where only the
    lowest bound (``all_reach``) lets it through; -0.0 and +0.0 are equal, as their keys."""
    xf = x.to(tl.float32)
    if LARGEST:
        return (xf >= bval) | (xf != xf)
    return ((xf <= bval).to(tl.int32) | all_reach.to(tl.int32)) != 0


@triton.jit
def _count_at_least(x_row, n_chunks, n_cols, stride_x_n, u_min, LARGEST: tl.constexpr, INT64: tl.constexpr,
                    KEY_BITS: tl.constexpr, BLOCK_N: tl.constexpr):
    """Elements of the row whose key, offset to [0, 2^KEY_BITS), is at least u_min."""
    n = tl.zeros([], tl.int32)
    for c in range(0, n_chunks):
        cols = c * BLOCK_N + tl.arange(0, BLOCK_N)
        mask, key = _load_keys(x_row, cols, n_cols, stride_x_n, LARGEST, INT64)
        u = key.to(tl.int64) + (1 << (KEY_BITS - 1))
        n += tl.sum((mask & (u >= u_min)).to(tl.int32), axis=0)
    return n


@triton.jit
def _kth_key(key, valid, k, KEY_BITS: tl.constexpr):
    """The k-th largest of the valid lanes of ``key`` (signed, KEY_BITS wide), bit by bit
    (offset to unsigned: int32 arithmetic for 16-bit keys, int64 for 32-bit ones)."""
    wide = tl.int64 if KEY_BITS > 16 else tl.int32
    u = key.to(wide) + (1 << (KEY_BITS - 1))
    t = tl.zeros([], wide)
    for b in tl.static_range(KEY_BITS - 1, -1, -1):
        c = t | (1 << b)
        n = tl.sum((valid & (u >= c)).to(tl.int32), axis=0)
        t = tl.where(n >= k, c, t)
    return (t - (1 << (KEY_BITS - 1))).to(tl.int32)


@triton.jit
def _bound_part(x_row, row, seg, work_ptr, gmax_ptr, values_ptr, indices_ptr, stride_x_n,
                stride_o_r0, stride_o_r1, stride_o_k, stride_g, n_rows, rows_inner, n_cols, n_chunks,
                chunks_per_seg, n_segs, k, LARGEST: tl.constexpr, KEY_BITS: tl.constexpr, INT64: tl.constexpr,
                FIRST: tl.constexpr, BLOCK_N: tl.constexpr, GROUP: tl.constexpr, BLOCK_G: tl.constexpr):
    """The bound: a segment's GROUP-column maxima, and the row's last program to arrive
    takes the k-th largest of them (FIRST: writes the row's largest). Whether this
    program was the row's last."""
    groups = tl.arange(0, BLOCK_N // GROUP)
    tile = groups[:, None] * GROUP + tl.arange(0, GROUP)[None, :]  # a group a row
    gkey_ptr = gmax_ptr.to(tl.pointer_type(tl.int32)) + 2 * row * stride_g  # k > 1: int32 keys
    for c in range(seg * chunks_per_seg, tl.minimum((seg + 1) * chunks_per_seg, n_chunks)):
        cols = c * BLOCK_N + tile
        if FIRST:  # int32 keys, the group's first column holding the largest packed with it
            mask, key = _load_keys(x_row, cols, n_cols, stride_x_n, LARGEST, INT64)
            key = tl.where(mask, key, KEY_MIN)
            gkey = tl.max(key, axis=1)
            gcol = tl.min(tl.where(key == gkey[:, None], cols, 0x7FFFFFFF), axis=1)
            packed = (gkey.to(tl.int64) << 32) | (0x7FFFFFFF - gcol).to(tl.int64)
            tl.store(gmax_ptr + row * stride_g + c * (BLOCK_N // GROUP) + groups, packed)
        else:
            # a float max (min) a group, then its key: a few operations an element, not
            # a key each. It may pass over a NaN (the GPU's max does, numpy's does not),
            # which can only lower the bound, and a lower bound is still one
            x = _load_cols(x_row, cols, n_cols, stride_x_n, float("-inf") if LARGEST else float("inf"), INT64)
            if LARGEST:
                gval = tl.max(x.to(tl.float32), axis=1)
            else:
                gval = tl.min(x.to(tl.float32), axis=1)
            tl.store(gkey_ptr + c * (BLOCK_N // GROUP) + groups, _float_keys(gval.to(x.dtype), LARGEST))
    tl.debug_barrier()  # every thread's stores before the one thread's release
    last = tl.atomic_add(work_ptr + row, 1, sem="acq_rel", scope="gpu") == n_segs - 1
    if last:
        g = tl.arange(0, BLOCK_G)
        if FIRST:
            gmax = tl.load(gmax_ptr + row * stride_g + g, mask=g < n_chunks * (BLOCK_N // GROUP), other=PAD64,
                           cache_modifier=".cg")
            out_row = _row_offsets(row, rows_inner, stride_o_r0, stride_o_r1)
            top = tl.zeros([1], tl.int64) + tl.max(gmax, axis=0)
            _write_top(x_row, out_row, top, 1, stride_x_n, stride_o_k, values_ptr, indices_ptr, INT64)
            tl.atomic_xchg(work_ptr + row, 0, sem="relaxed", scope="gpu")  # every sibling has arrived: left zeroed
        else:
            valid = g * GROUP < n_cols  # groups holding a column of the row
            gkey = tl.load(gkey_ptr + g, mask=valid, other=0, cache_modifier=".cg")
            tl.store(work_ptr + 3 * n_rows + row, _kth_key(gkey, valid, k, KEY_BITS))
    return last


@triton.jit
def _filter_part(x_row, row, seg, work_ptr, cand_ptr, values_ptr, indices_ptr, stride_x_n,
                 stride_o_r0, stride_o_r1, stride_o_k, stride_c, n_rows, rows_inner, n_cols, n_chunks,
                 chunks_per_seg, n_segs, k, LARGEST: tl.constexpr, KEY_BITS: tl.constexpr, INT64: tl.constexpr,
                 BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, CAP: tl.constexpr, SUB: tl.constexpr):
    """The candidates: a segment's elements at or above the row's bound appended to the
    row's candidates (an atomic count a candidate reserves its place); the row's last
    program sorts them and writes the first k. More candidates than CAP (a bound shared
    by many equal values, say) and it finds the row's k-th largest key itself, a pass
    over the row a key bit, and gathers exactly k: slow, and exact."""
    cand_row = cand_ptr + row * stride_c
    count_ptr = work_ptr + 2 * n_rows + row
    bound = tl.load(work_ptr + 3 * n_rows + row, cache_modifier=".cg")
    bval = _key_value(bound, x_row.dtype.element_ty, LARGEST)
    all_reach = bound == -(1 << (KEY_BITS - 1))  # the lowest key (largest=False: NaN's)
    for c in range(seg * chunks_per_seg, tl.minimum((seg + 1) * chunks_per_seg, n_chunks)):
        cols = c * BLOCK_N + tl.arange(0, BLOCK_N)
        x = _load_cols(x_row, cols, n_cols, stride_x_n, 0.0, INT64)
        sel = (cols < n_cols) & _reaches(x, bval, all_reach, LARGEST)
        # a place for each candidate by its own atomic on the row's count: candidates
        # are a few in a thousand elements, and a scan of the chunk for their places
        # costs a block-wide prefix sum (and its registers) in every program; the
        # order they land in is any, the last program sorts them
        at = tl.atomic_add(count_ptr + tl.zeros_like(cols), 1, mask=sel, sem="relaxed", scope="gpu")
        tl.store(cand_row + at, _packed(_float_keys(x, LARGEST), cols, sel), mask=sel & (at < CAP))
    tl.debug_barrier()  # every thread's stores before the one thread's release
    if tl.atomic_add(work_ptr + n_rows + row, 1, sem="acq_rel", scope="gpu") == n_segs - 1:
        count = tl.atomic_add(count_ptr, 0, sem="relaxed", scope="gpu")
        if count > CAP:
            n_subs = tl.cdiv(n_cols, SUB)
            # the row's k-th largest key, a bit a pass, then everything above it and its
            # first ties in column order: exactly k candidates
            t = tl.zeros([], tl.int64)
            for b in tl.static_range(KEY_BITS - 1, -1, -1):
                n = _count_at_least(x_row, n_subs, n_cols, stride_x_n, t | (1 << b), LARGEST, INT64, KEY_BITS, SUB)
                t = tl.where(n >= k, t | (1 << b), t)
            kth = (t - (1 << (KEY_BITS - 1))).to(tl.int32)
            need = k - _count_at_least(x_row, n_subs, n_cols, stride_x_n, t + 1, LARGEST, INT64, KEY_BITS, SUB)
            written = tl.zeros([], tl.int32)
            ties = tl.zeros([], tl.int32)
            for j in range(0, n_subs):
                cols = j * SUB + tl.arange(0, SUB)
                mask, key = _load_keys(x_row, cols, n_cols, stride_x_n, LARGEST, INT64)
                eq = (mask & (key == kth)).to(tl.int32)
                sel = (mask & (key > kth)) | ((eq != 0) & (ties + tl.cumsum(eq, axis=0) <= need))
                pos = written + tl.cumsum(sel.to(tl.int32), axis=0) - 1
                tl.store(cand_row + pos, _packed(key, cols, mask), mask=sel)
                written += tl.sum(sel.to(tl.int32), axis=0)
                ties += tl.sum(eq, axis=0)
            tl.debug_barrier()
            count = k
        lanes = tl.arange(0, CAP)
        cand = tl.load(cand_row + lanes, mask=lanes < count, other=PAD64, cache_modifier=".cg")
        out_row = _row_offsets(row, rows_inner, stride_o_r0, stride_o_r1)
        _write_top(x_row, out_row, tl.topk(cand, BLOCK_K), k, stride_x_n, stride_o_k, values_ptr, indices_ptr, INT64)
        # every sibling is past the bound and its filter: the row's four words left zeroed,
        # by plain stores (no sibling reads them again; the next reader is the next launch;
        # a vector atomic exchange does not build for AMD with Triton 3.6)
        words = tl.arange(0, 4) * n_rows + row
        tl.store(work_ptr + words, tl.zeros([4], tl.int32))


@co_resident(segments_waiting)
@triton.jit
def _topk_filter_kernel(
    x_ptr,                        # the input, addressed as in _topk_kernel
    work_ptr,                     # int32 (4 * n_rows + 1), zeroed: arrivals at the bound, arrivals at the
                                  # filter, candidates, bound (a row each); PHASE 0's ticket. Left zeroed:
                                  # a row's last program clears its words, the last ticket the ticket
    gmax_ptr,                     # int64 (n_rows, stride_g): a row's n_chunks * BLOCK_N / GROUP group maxima
                                  # (int32 keys unless FIRST), then its packed candidates
    values_ptr, indices_ptr,
    stride_x_r0, stride_x_r1, stride_x_n,
    stride_o_r0, stride_o_r1, stride_o_k,
    stride_g,
    n_rows, rows_inner, n_cols, n_chunks, chunks_per_seg, n_segs, k,
    LARGEST: tl.constexpr,
    KEY_BITS: tl.constexpr,       # 16 for 16-bit dtypes, else 32
    INT64: tl.constexpr,
    FIRST: tl.constexpr,          # k == 1: the row's largest is the answer, written by the bound
    BLOCK_N: tl.constexpr,        # columns a chunk
    GROUP: tl.constexpr,          # columns a group
    BLOCK_G: tl.constexpr,        # power of 2 >= n_chunks * BLOCK_N / GROUP
    BLOCK_K: tl.constexpr,        # power of 2 >= k
    CAP: tl.constexpr,            # candidates kept a row, a power of 2 >= 2 * BLOCK_K
    SUB: tl.constexpr,            # columns at a time of the exact path
    PHASE: tl.constexpr,          # 0: bound and filter, waiting between; 1: the bound; 2: the filter
):
    """Rows too long for one program, each cut into n_segs segments of whole chunks, a
    program each: the bound (``_bound_part``), then the candidates (``_filter_part``).

    PHASE 1 and 2 are two launches (k = 1 needs only the first). PHASE 0 is one:
    programs take their (row, segment) in start order (a ticket after the work rows),
    and after the bound each waits for its row's last program to publish it (the
    arrival count raised past n_segs), so the siblings a program waits for have started
    or start as earlier rows finish (n_segs programs must fit the GPU at once)."""
    if PHASE == 0:
        ticket = tl.atomic_add(work_ptr + 4 * n_rows, 1, sem="relaxed", scope="gpu").to(tl.int64)
        if ticket == n_rows * n_segs - 1:  # the last ticket taken: the word left zeroed
            tl.atomic_xchg(work_ptr + 4 * n_rows, 0, sem="relaxed", scope="gpu")
        row = ticket // n_segs
        seg = ticket % n_segs
    else:
        pid = tl.program_id(0)
        row = (pid // n_segs).to(tl.int64)
        seg = (pid % n_segs).to(tl.int64)
    x_row = x_ptr + _row_offsets(row, rows_inner, stride_x_r0, stride_x_r1)
    if PHASE != 2:
        last = _bound_part(x_row, row, seg, work_ptr, gmax_ptr, values_ptr, indices_ptr, stride_x_n,
                           stride_o_r0, stride_o_r1, stride_o_k, stride_g, n_rows, rows_inner, n_cols, n_chunks,
                           chunks_per_seg, n_segs, k, LARGEST, KEY_BITS, INT64, FIRST, BLOCK_N, GROUP, BLOCK_G)
        if PHASE == 0:
            if last:  # the bound's store (every thread's) before the raise
                tl.debug_barrier()
                tl.atomic_add(work_ptr + row, 1, sem="release", scope="gpu")
            else:
                while tl.atomic_add(work_ptr + row, 0, sem="acquire", scope="gpu") < n_segs + 1:
                    pass
    if PHASE != 1:
        cand_ptr = gmax_ptr + n_chunks * (BLOCK_N // GROUP)
        _filter_part(x_row, row, seg, work_ptr, cand_ptr, values_ptr, indices_ptr, stride_x_n,
                     stride_o_r0, stride_o_r1, stride_o_k, stride_g, n_rows, rows_inner, n_cols, n_chunks,
                     chunks_per_seg, n_segs, k, LARGEST, KEY_BITS, INT64, BLOCK_N, BLOCK_K, CAP, SUB)
