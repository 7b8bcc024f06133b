"""Top-1 MoE routing from the hidden states: the router GEMM ``x @ w`` fused with the
sigmoid and the arg-max (Llama 4).

A program takes BLOCK_M tokens and every expert (BLOCK_N >= N, at least 16 for ``tl.dot``):
it accumulates the (BLOCK_M, BLOCK_N) logits in fp32 over BLOCK_K-wide slices of the hidden
dim (of its share of it, with SPLIT_K), then picks each token's expert on the fp32 logits: the largest, the lowest index among
equal ones, a NaN above every number (the first NaN); padded experts are -inf and never
win. The weight is the sigmoid of that logit, NaN for a NaN row. SHARED appends the shared
expert's id N with weight 1.0 as the token's second column.
"""

import triton
import triton.language as tl


@triton.jit
def _top1_store(acc, rows, cols, ids_ptr, weights_ptr, stride_ids_m, stride_weights_m, n_tokens, n_experts,
                SHARED: tl.constexpr, BLOCK_N: tl.constexpr):
    """Each token's expert from its fp32 logits ``acc`` (BLOCK_M, BLOCK_N), stored."""
    row_mask = rows < n_tokens
    logits = tl.where((cols < n_experts)[None, :], acc, float("-inf"))
    is_nan = logits != logits
    any_nan = tl.max(is_nan.to(tl.int32), axis=1) > 0
    best = tl.max(tl.where(is_nan, float("-inf"), logits), axis=1)
    hit = tl.where(any_nan[:, None], is_nan, logits == best[:, None])
    ids = tl.min(tl.where(hit, cols[None, :], BLOCK_N), axis=1)
    weights = tl.where(any_nan, float("nan"), tl.sigmoid(best))
    tl.store(ids_ptr + rows * stride_ids_m, ids.to(tl.int32), mask=row_mask)
    tl.store(weights_ptr + rows * stride_weights_m, weights, mask=row_mask)
    if SHARED:
        tl.store(ids_ptr + rows * stride_ids_m + 1, n_experts, mask=row_mask)
        tl.store(weights_ptr + rows * stride_weights_m + 1, 1.0, mask=row_mask)


@triton.jit
def _routing_sigmoid_top1_kernel(
    x_ptr, w_ptr,                 # x (n_tokens, hidden), w (hidden, n_experts): one dtype
    ids_ptr, weights_ptr,         # out: (n_tokens, 1 + SHARED) int32 ids, fp32 weights; unit column stride
    part_ptr,                     # SPLIT_K > 1: fp32 partial logits, (row blocks, SPLIT_K, BLOCK_M, BLOCK_N)
    ticket_ptr,                   # SPLIT_K > 1: an int32 a row block, zero at entry and exit
    stride_x_m, stride_x_k, stride_w_k, stride_w_n, stride_ids_m, stride_weights_m,
    n_tokens, n_experts, hidden,  # runtime: no recompile per token count or model
    k_split,                      # hidden columns a split takes, a multiple of BLOCK_K
    SHARED: tl.constexpr,         # append the shared expert (id n_experts, weight 1.0)
    INT64: tl.constexpr,          # an offset of x or w can pass 2^31
    DOT_FP32: tl.constexpr,       # operands widened to fp32 first (the interpreter: its dot multiplies bf16 bits)
    SPLIT_K: tl.constexpr,        # programs sharing a row block's hidden dim (grid axis 1)
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,        # >= n_experts, a power of 2 >= 16
    BLOCK_K: tl.constexpr,
):
    """Grid (row blocks, SPLIT_K). With SPLIT_K > 1 (few tokens: the hidden dim spread over
    the GPU) each program stores its slice's partial logits; the last program of a row block
    to arrive (an acquire-release ticket, after a barrier) sums the partials in split order
    (the same sum whichever arrives last), picks the experts and zeroes the ticket."""
    pid = tl.program_id(0)
    pid_k = tl.program_id(1)
    if INT64:
        pid = pid.to(tl.int64)
    rows = pid * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.arange(0, BLOCK_N)
    ks = tl.arange(0, BLOCK_K)
    if INT64:
        cols = cols.to(tl.int64)
        ks = ks.to(tl.int64)
    row_mask = rows < n_tokens
    col_mask = cols < n_experts
    x_rows = x_ptr + rows[:, None] * stride_x_m
    w_cols = w_ptr + cols[None, :] * stride_w_n
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    k_start = pid_k * k_split
    k_end = tl.minimum(k_start + k_split, hidden)
    for k0 in range(k_start, k_end, BLOCK_K):
        k = k0 + ks
        k_mask = k < k_end
        x = tl.load(x_rows + k[None, :] * stride_x_k, mask=row_mask[:, None] & k_mask[None, :], other=0.0)
        w = tl.load(w_cols + k[:, None] * stride_w_k, mask=k_mask[:, None] & col_mask[None, :], other=0.0)
        if DOT_FP32:  # exact: a product of two bf16 fits fp32, as on a GPU
            x = x.to(tl.float32)
            w = w.to(tl.float32)
        # fp32 inputs multiply in full fp32 (no TF32): the expert picked must not depend on the GPU
        acc = tl.dot(x, w, acc, input_precision="ieee")
    if SPLIT_K > 1:
        tile = tl.arange(0, BLOCK_M)[:, None] * BLOCK_N + tl.arange(0, BLOCK_N)[None, :]
        parts = part_ptr + pid * (SPLIT_K * BLOCK_M * BLOCK_N)
        tl.store(parts + pid_k * (BLOCK_M * BLOCK_N) + tile, acc)
        tl.debug_barrier()  # every lane's partial stored before the ticket releases them
        if tl.atomic_add(ticket_ptr + pid, 1, sem="acq_rel", scope="gpu") == SPLIT_K - 1:
            acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
            for split in range(SPLIT_K):
                acc += tl.load(parts + split * (BLOCK_M * BLOCK_N) + tile, cache_modifier=".cg")
            _top1_store(acc, rows, cols, ids_ptr, weights_ptr, stride_ids_m, stride_weights_m, n_tokens, n_experts,
                        SHARED, BLOCK_N)
            tl.atomic_xchg(ticket_ptr + pid, 0, sem="relaxed", scope="gpu")
    else:
        _top1_store(acc, rows, cols, ids_ptr, weights_ptr, stride_ids_m, stride_weights_m, n_tokens, n_experts,
                    SHARED, BLOCK_N)
