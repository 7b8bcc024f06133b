"""MoE routing kernel: scores, optional group limit, top-k experts and their weights per token.

One kernel serves every routing op (``moe_routing`` and its named forms, aiter's forms that
write into preallocated outputs). A
program holds BLOCK_T tokens' rows of experts in registers as a (BLOCK_T, BLOCK_G *
BLOCK_S) tile: expert ``g * group_size + s`` sits at column ``g * BLOCK_S + s``, groups
and group sizes padded to powers of two (ungrouped calls use one group of all the
experts), so the column order is the expert order. Per token:

1. scores ``p``: softmax over the experts or sigmoid, in fp32;
2. selection keys: ``p`` (+ bias); NaN becomes +inf (a NaN ranks above every number,
   as in ``torch.sort``); padded columns are -inf;
3. ``GROUPED``: the tile seen as (BLOCK_T, BLOCK_G, BLOCK_S); each group's score (its
   best key, or with a bias the sum of its best two), the ``topk_group`` best groups
   kept, the other groups' keys set to -inf;
4. ``topk`` rounds of one max-with-index reduction over the keys (the left-most column
   among equal keys: the lower expert index), the chosen expert's unbiased score
   gathered, its key retired;
5. the k weights renormalized (``RENORMALIZE``), scaled, stored with the ids in
   selection order;
6. ``HAS_SRC``: vLLM's source rows ``j * n_tokens + t`` stored for the k choices;
   ``HAS_SHARED``: the ``n_shared`` shared experts' logits (after the routed ones) stored
   as sigmoid weights after the k routed ones (aiter's fused shared experts).

Token count, expert count, group geometry, ``topk``, ``topk_group`` and the scale are
runtime values; the tile shape and the flags are compile-time.
"""

import triton
import triton.language as tl


@triton.jit(do_not_specialize=["n_tokens", "topk", "topk_group"])
def _moe_routing_kernel(
    x_ptr,                      # gating logits (n_tokens, n_groups * group_size), any float dtype
    bias_ptr,                   # correction bias (n_experts,) (HAS_BIAS)
    w_ptr, ids_ptr,             # outputs: fp32 weights, int32 expert ids, (n_tokens, topk)
    src_ptr,                    # output (HAS_SRC): int32 (n_tokens, topk), j * n_tokens + t (vLLM's source rows)
    stride_x_t, stride_x_e,
    stride_bias,
    stride_w_t, stride_ids_t,
    n_tokens,
    n_groups, group_size,       # runtime: the expert count is n_groups * group_size
    topk, topk_group,
    n_shared,                   # shared experts (HAS_SHARED): logits after the routed, weights after the topk
    scale,                      # runtime fp32: routed_scaling_factor
    SIGMOID: tl.constexpr,      # scores are sigmoid(logits), else softmax over the experts
    HAS_BIAS: tl.constexpr,     # selection keys are scores + bias; group score the sum of the best two
    GROUPED: tl.constexpr,      # keep only the topk_group best groups
    RENORMALIZE: tl.constexpr,  # weights divided by their sum over the k chosen
    BLOCK_T: tl.constexpr,      # tokens per program
    BLOCK_G: tl.constexpr,      # >= n_groups
    BLOCK_S: tl.constexpr,      # >= group_size
    BLOCK_K: tl.constexpr,      # >= topk
    HAS_SRC: tl.constexpr = False,
    HAS_SHARED: tl.constexpr = False,
    BLOCK_SH: tl.constexpr = 1,  # >= n_shared
    IDENTITY: tl.constexpr = False,  # the inputs are the scores already (no softmax, no sigmoid)
):
    # scalars to fp32 (inductor passes Python floats as fp64); tl.cast: a float has no .to in the interpreter
    scale = tl.cast(scale, tl.float32)
    BLOCK_E: tl.constexpr = BLOCK_G * BLOCK_S
    tok = tl.program_id(0).to(tl.int64) * BLOCK_T + tl.arange(0, BLOCK_T)
    tok_ok = tok < n_tokens
    col = tl.arange(0, BLOCK_E)
    grp, sub = col // BLOCK_S, col % BLOCK_S
    exp_ok = (grp < n_groups) & (sub < group_size)
    eid = (grp * group_size + sub).to(tl.int64)

    x = tl.load(x_ptr + tok[:, None] * stride_x_t + eid[None, :] * stride_x_e,
                mask=tok_ok[:, None] & exp_ok[None, :], other=0.0).to(tl.float32)
    if IDENTITY:  # the scores as given (vLLM's grouped_topk with scoring_func 0)
        p = x
    elif SIGMOID:
        p = tl.sigmoid(x)
    else:
        x = tl.where(exp_ok[None, :], x, float("-inf"))
        e = tl.exp(x - tl.max(x, 1)[:, None])
        p = e / tl.sum(e, 1)[:, None]
    p = tl.where(exp_ok[None, :], p, 0.0)

    key = p
    if HAS_BIAS:
        bias = tl.load(bias_ptr + eid * stride_bias, mask=exp_ok, other=0.0).to(tl.float32)
        key = key + bias[None, :]
    key = tl.where(key != key, float("inf"), key)  # noqa: PLR0124 (NaN is unequal to itself)
    key = tl.where(exp_ok[None, :], key, float("-inf"))

    if GROUPED:
        g = tl.arange(0, BLOCK_G)
        key3 = tl.reshape(key, (BLOCK_T, BLOCK_G, BLOCK_S))
        if HAS_BIAS:
            # Sum of the two best keys of each group (one copy of a tied best removed);
            # a group of one expert scores its one key.
            best, first = tl.max(key3, 2, return_indices=True, return_indices_tie_break_left=True)
            s3 = tl.arange(0, BLOCK_S)[None, None, :]
            second = tl.max(tl.where(s3 == first[:, :, None], float("-inf"), key3), 2)
            group_score = tl.where(group_size > 1, best + second, best)
        else:
            group_score = tl.max(key3, 2)
        alive = (g[None, :] < n_groups) & tok_ok[:, None]
        kept = tl.zeros((BLOCK_T, BLOCK_G), dtype=tl.int32)
        for _round in range(topk_group):
            pick = tl.argmax(tl.where(alive, group_score, float("-inf")), 1, tie_break_left=True)
            hit = g[None, :] == pick[:, None]
            kept = tl.where(hit, 1, kept)
            alive = alive & ~hit
        kept = tl.reshape(tl.broadcast_to(kept[:, :, None], (BLOCK_T, BLOCK_G, BLOCK_S)), (BLOCK_T, BLOCK_E))
        key = tl.where(kept != 0, key, float("-inf"))

    kcol = tl.arange(0, BLOCK_K)
    weights = tl.zeros((BLOCK_T, BLOCK_K), dtype=tl.float32)
    ids = tl.zeros((BLOCK_T, BLOCK_K), dtype=tl.int32)
    for j in range(topk):
        _top, pick = tl.max(key, 1, return_indices=True, return_indices_tie_break_left=True)
        hit = col[None, :] == pick[:, None]
        w = tl.sum(tl.where(hit, p, 0.0), 1)
        key = tl.where(hit, float("-inf"), key)
        expert = (pick // BLOCK_S) * group_size + pick % BLOCK_S
        here = kcol[None, :] == j
        weights = tl.where(here, w[:, None], weights)
        ids = tl.where(here, expert[:, None], ids)

    if RENORMALIZE:
        weights = weights / tl.sum(weights, 1)[:, None]
    weights = weights * scale
    out_ok = tok_ok[:, None] & (kcol[None, :] < topk)
    tl.store(w_ptr + tok[:, None] * stride_w_t + kcol[None, :], weights, mask=out_ok)
    tl.store(ids_ptr + tok[:, None] * stride_ids_t + kcol[None, :], ids, mask=out_ok)
    if HAS_SRC:
        src = kcol[None, :].to(tl.int64) * n_tokens + tok[:, None]
        tl.store(src_ptr + tok[:, None] * topk + kcol[None, :], src.to(tl.int32), mask=out_ok)
    if HAS_SHARED:
        sh = tl.arange(0, BLOCK_SH)
        sh_ok = tok_ok[:, None] & (sh[None, :] < n_shared)
        n_routed = n_groups * group_size
        logit = tl.load(x_ptr + tok[:, None] * stride_x_t + (n_routed + sh[None, :]).to(tl.int64) * stride_x_e,
                        mask=sh_ok, other=0.0).to(tl.float32)
        tl.store(w_ptr + tok[:, None] * stride_w_t + topk + sh[None, :], tl.sigmoid(logit), mask=sh_ok)
