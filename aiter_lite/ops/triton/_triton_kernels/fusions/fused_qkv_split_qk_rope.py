"""A fused QKV projection split into Q, K and V, Q and K rotated, in one launch.

``qkv`` rows are ``[q heads | k heads | v heads]``, each head ``head_dim`` wide. A
program takes BLOCK_T tokens and BLOCK_H heads of one of the three; the grid runs over
Q's head blocks, K's, then V's, for each token block in turn. Q and K heads are rotated
as the RoPE kernel does it (``_rotate_heads``: rotary part first or, NOPE_FIRST, last,
the other channels copied); V heads are copied.
"""

import triton
import triton.language as tl

from aiter_lite.ops.triton._triton_kernels.rope.rope import _rotate_heads, _token_block


@triton.jit
def _copy_heads(x_ptr, y_ptr, sx_t, sx_h, sy_t, sy_h, tok, t_mask, hblock, n_heads, head_dim,
                BLOCK_D: tl.constexpr, BLOCK_H: tl.constexpr):
    heads = hblock * BLOCK_H + tl.arange(0, BLOCK_H)
    c = tl.arange(0, BLOCK_D)
    m = (t_mask[:, None] & (heads < n_heads)[None, :])[:, :, None] & (c < head_dim)[None, None, :]
    xh = (x_ptr + tok * sx_t)[:, None] + heads[None, :] * sx_h
    yh = (y_ptr + tok * sy_t)[:, None] + heads[None, :] * sy_h
    tl.store(yh[:, :, None] + c[None, None, :], tl.load(xh[:, :, None] + c[None, None, :], mask=m), mask=m)


@triton.jit
def _rotate_part(x_ptr, y_ptr, hblock, n_heads, head_dim, stride_qkv_t, tok, t_mask, cos_ptr, sin_ptr, pos_ptr,
                 off_ptr, stride_t_r, stride_t_f, n_rows, HAS_OFFSETS: tl.constexpr, IS_NEOX: tl.constexpr,
                 REUSE: tl.constexpr, NOPE_FIRST: tl.constexpr, COPY_REST: tl.constexpr, HALF: tl.constexpr,
                 BLOCK_HALF: tl.constexpr, BLOCK_REST: tl.constexpr, BLOCK_T: tl.constexpr, BLOCK_H: tl.constexpr):
    """Q's or K's heads of a token block (rows of qkv at x_ptr, heads head_dim apart) rotated into y."""
    _rotate_heads(x_ptr, y_ptr, stride_qkv_t, 0, head_dim, 1, n_heads * head_dim, 0, head_dim, 1,
                  hblock, n_heads, head_dim, tok, t_mask,
                  cos_ptr, sin_ptr, cos_ptr, sin_ptr, pos_ptr, off_ptr, pos_ptr,
                  stride_t_r, stride_t_f, stride_t_r, stride_t_f, 1, 0,
                  1, n_rows, n_rows, 0, 1, 1,
                  1, HAS_OFFSETS, False, IS_NEOX, REUSE, False, NOPE_FIRST, COPY_REST,
                  HALF, BLOCK_HALF, BLOCK_REST, BLOCK_T, BLOCK_H)


@triton.jit(do_not_specialize=["n_tokens", "n_rows"])
def _qkv_split_rope_kernel(
    qkv_ptr, q_ptr, k_ptr, v_ptr,  # qkv (n_tokens, (qh + 2 kvh) * head_dim); q, k, v contiguous
    cos_ptr, sin_ptr,             # (n_rows, F) tables
    pos_ptr, off_ptr,             # (n_tokens,) positions (+ offsets), unit stride
    stride_qkv_t,
    stride_t_r, stride_t_f,
    n_tokens, n_rows,
    n_q_heads, n_kv_heads, head_dim,
    HAS_OFFSETS: tl.constexpr,
    IS_NEOX: tl.constexpr,
    REUSE: tl.constexpr,
    NOPE_FIRST: tl.constexpr,
    COPY_REST: tl.constexpr,      # head_dim > R: the passthrough channels copied
    HALF: tl.constexpr,
    BLOCK_HALF: tl.constexpr,
    BLOCK_REST: tl.constexpr,
    BLOCK_D: tl.constexpr,
    BLOCK_T: tl.constexpr,
    BLOCK_H: tl.constexpr,
    INT64: tl.constexpr,
):
    n_q_blocks = tl.cdiv(n_q_heads, BLOCK_H)
    n_kv_blocks = tl.cdiv(n_kv_heads, BLOCK_H)
    n_blocks = n_q_blocks + 2 * n_kv_blocks
    pid_h, tok, t_mask = _token_block(n_blocks, n_tokens, BLOCK_T, INT64)
    # Q and K each call the rotation with their own pointers (as _rope_kernel does): one
    # call on pointers chosen by a branch does not build for AMD (Triton 3.6's pointer
    # canonicalization rejects an scf.if yielding pointers of two bases).
    if pid_h < n_q_blocks:
        _rotate_part(qkv_ptr, q_ptr, pid_h, n_q_heads, head_dim, stride_qkv_t, tok, t_mask, cos_ptr, sin_ptr,
                     pos_ptr, off_ptr, stride_t_r, stride_t_f, n_rows, HAS_OFFSETS, IS_NEOX, REUSE, NOPE_FIRST,
                     COPY_REST, HALF, BLOCK_HALF, BLOCK_REST, BLOCK_T, BLOCK_H)
    elif pid_h < n_q_blocks + n_kv_blocks:
        _rotate_part(qkv_ptr + n_q_heads * head_dim, k_ptr, pid_h - n_q_blocks, n_kv_heads, head_dim, stride_qkv_t,
                     tok, t_mask, cos_ptr, sin_ptr, pos_ptr, off_ptr, stride_t_r, stride_t_f, n_rows, HAS_OFFSETS,
                     IS_NEOX, REUSE, NOPE_FIRST, COPY_REST, HALF, BLOCK_HALF, BLOCK_REST, BLOCK_T, BLOCK_H)
    else:
        _copy_heads(qkv_ptr + (n_q_heads + n_kv_heads) * head_dim, v_ptr, stride_qkv_t, head_dim,
                    n_kv_heads * head_dim, head_dim, tok, t_mask, pid_h - n_q_blocks - n_kv_blocks, n_kv_heads,
                    head_dim, BLOCK_D, BLOCK_H)
