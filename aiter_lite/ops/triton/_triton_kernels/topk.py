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
"""

import triton
import triton.language as tl

PAD32 = tl.constexpr(-(2**31))
PAD64 = tl.constexpr(-(2**63))


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
