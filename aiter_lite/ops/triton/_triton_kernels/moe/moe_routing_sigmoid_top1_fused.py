"""Top-1 MoE routing from the hidden states: the router GEMM ``x @ w`` fused with the
sigmoid and the arg-max (Llama 4).

A program takes BLOCK_M tokens and every expert (BLOCK_N >= N, at least 16 for ``tl.dot``):
it accumulates the (BLOCK_M, BLOCK_N) logits in fp32 over BLOCK_K-wide slices of the hidden
dim, then picks each token's expert on the fp32 logits: the largest, the lowest index among
equal ones, a NaN above every number (the first NaN); padded experts are -inf and never
win. The weight is the sigmoid of that logit, NaN for a NaN row. SHARED appends the shared
expert's id N with weight 1.0 as the token's second column.
"""

import triton
import triton.language as tl


@triton.jit
def _routing_sigmoid_top1_kernel(
    x_ptr, w_ptr,                 # x (n_tokens, hidden), w (hidden, n_experts): one dtype
    ids_ptr, weights_ptr,         # out: (n_tokens, 1 + SHARED) int32 ids, fp32 weights; unit column stride
    stride_x_m, stride_x_k, stride_w_k, stride_w_n, stride_ids_m, stride_weights_m,
    n_tokens, n_experts, hidden,  # runtime: no recompile per token count or model
    SHARED: tl.constexpr,         # append the shared expert (id n_experts, weight 1.0)
    INT64: tl.constexpr,          # an offset of x or w can pass 2^31
    DOT_FP32: tl.constexpr,       # operands widened to fp32 first (the interpreter: its dot multiplies bf16 bits)
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,        # >= n_experts, a power of 2 >= 16
    BLOCK_K: tl.constexpr,
):
    pid = tl.program_id(0)
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
    for k0 in range(0, hidden, BLOCK_K):
        k = k0 + ks
        k_mask = k < hidden
        x = tl.load(x_rows + k[None, :] * stride_x_k, mask=row_mask[:, None] & k_mask[None, :], other=0.0)
        w = tl.load(w_cols + k[:, None] * stride_w_k, mask=k_mask[:, None] & col_mask[None, :], other=0.0)
        if DOT_FP32:  # exact: a product of two bf16 fits fp32, as on a GPU
            x = x.to(tl.float32)
            w = w.to(tl.float32)
        # fp32 inputs multiply in full fp32 (no TF32): the expert picked must not depend on the GPU
        acc = tl.dot(x, w, acc, input_precision="ieee")
    logits = tl.where(col_mask[None, :], acc, float("-inf"))
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
