"""Two head-dim parts joined into one: Q/K concatenation for MLA (the second part
optionally rotated), and MLA's latent cache written at the tokens' slots.

A program takes BLOCK_T tokens and BLOCK_H heads of one pair (first part ``a``, second
``b``; a ``b`` of one head, stride 0, serves every head) and writes ``cat(a, b)`` into
the pair's destination: token rows, or (DEST_SLOTS, the second pair only) the cache
entries at the tokens' slots, addressed as in ``fused_kv_cache``. The grid runs over the
first pair's head blocks, then the second's, for each token block in turn.

SHUFFLE (DEST_SLOTS; 0: off, compiled out) writes aiter's preshuffled MLA cache
(``cat_and_cache_mla(..., shuffled_kv_cache=True)``, the layout gfx950's MLA decode reads):
a cache (num_blocks, heads, block_size, d1 + d2) whose (block_size, d1 + d2) plane per
block and head is flat, the ``a`` parts of the block's tokens in its first block_size x d1
elements and the ``b`` parts after. In each, tokens go in tiles of 16 and a part's channels
in chunks of SHUFFLE (16 bytes: 8 bf16 / fp16, 16 fp8); channel c of the token at offset
o of a part d wide sits at ``(o // 16) * 16 d + (c // SHUFFLE) * 16 SHUFFLE + (o % 16) *
SHUFFLE + c % SHUFFLE``: the 16 tokens' chunks side by side, one MFMA operand row each.
"""

import triton
import triton.language as tl

from aiter_lite.ops.triton._triton_kernels.fusions.fused_kv_cache import (
    _cast,
    _rotated_heads,
    _rounded,
    _slots,
    _store_chans,
    _store_pairs,
    _two_part_block,
)


@triton.jit
def _cat_pair(a_ptr, b_ptr, dest, dest_b, b_lo, tok, t_mask, heads, th_mask, w_mask, sa_t, sa_h, sa_d, sb_t, sb_h,
              sb_d, sd_cx, sd_c, d1, d2, inv_scale, q_min, q_max, pos_ptr, cos_ptr, sin_ptr, n_rows, stride_t_r,
              stride_t_f, ROPE: tl.constexpr, IS_NEOX: tl.constexpr, REUSE: tl.constexpr, IS_FP8: tl.constexpr,
              SOFT_ROUND: tl.constexpr, X: tl.constexpr, HALF: tl.constexpr, BLOCK_HALF: tl.constexpr,
              BLOCK_D1: tl.constexpr, BLOCK_D2: tl.constexpr, BLOCK_T: tl.constexpr):
    """cat(a, b) of a (BLOCK_T, BLOCK_H) block where ``w_mask``: a's channels at ``dest``, b's
    from channel ``b_lo`` of ``dest_b`` (``dest`` and d1 but in the shuffled cache), channel
    ``c`` at ``_chan_off(c, X, sd_cx, sd_c)``; ROPE: b's channels 0 .. 2 HALF rotated, the rest
    copied."""
    dt = dest.dtype.element_ty
    c = tl.arange(0, BLOCK_D1)
    m = w_mask[:, :, None] & (c < d1)[None, None, :]
    ah = (a_ptr + tok * sa_t)[:, None] + heads[None, :] * sa_h
    a = tl.load(ah[:, :, None] + c[None, None, :] * sa_d, mask=m, other=0.0)
    _store_chans(dest, c, _cast(a.to(tl.float32), inv_scale, q_min, q_max, dt, IS_FP8, SOFT_ROUND), m, X, sd_cx,
                 sd_c)
    if ROPE:
        o1, o2 = _rotated_heads(b_ptr, sb_t, sb_h, sb_d, tok, t_mask, heads, w_mask, pos_ptr, pos_ptr, 1,
                                cos_ptr, sin_ptr, n_rows, stride_t_r, stride_t_f, 0, False, IS_NEOX, REUSE,
                                HALF, BLOCK_HALF, BLOCK_T)
        o1, o2 = _rounded(o1, o2, b_ptr.dtype.element_ty)
        _store_pairs(dest_b, b_lo, _cast(o1, inv_scale, q_min, q_max, dt, IS_FP8, SOFT_ROUND),
                     _cast(o2, inv_scale, q_min, q_max, dt, IS_FP8, SOFT_ROUND), w_mask, X, sd_cx, sd_c,
                     HALF, BLOCK_HALF, IS_NEOX)
    if not ROPE or 2 * HALF < BLOCK_D2:
        c = (2 * HALF if ROPE else 0) + tl.arange(0, BLOCK_D2)
        m = w_mask[:, :, None] & (c < d2)[None, None, :]
        bh = (b_ptr + tok * sb_t)[:, None] + heads[None, :] * sb_h
        b = tl.load(bh[:, :, None] + c[None, None, :] * sb_d, mask=m, other=0.0)
        _store_chans(dest_b, b_lo + c, _cast(b.to(tl.float32), inv_scale, q_min, q_max, dt, IS_FP8, SOFT_ROUND),
                     m, X, sd_cx, sd_c)


@triton.jit(do_not_specialize=["n_tokens", "n_slot_tokens", "n_cache_slots", "n_rows"])
def _cat_kernel(
    a1_ptr, b1_ptr, o1_ptr,       # first pair (Q): destination rows (n_tokens, n_heads1, d1 + d2)
    a2_ptr, b2_ptr, o2_ptr,       # second pair (K): rows, or (DEST_SLOTS) a cache
    slot_ptr, pos_ptr,            # (n_slot_tokens,) slots; (n_tokens,) positions (ROPE), unit stride
    cos_ptr, sin_ptr,
    scale_ptr,                    # fp32, one element (HAS_SCALE: the second pair's values times its inverse)
    sa1_t, sa1_h, sa1_d, sb1_t, sb1_h, sb1_d, so1_t, so1_h, so1_d,
    sa2_t, sa2_h, sa2_d, sb2_t, sb2_h, sb2_d,
    so2_blk, so2_off, so2_h, so2_d,   # DEST_SLOTS: block, offset, head, channel; else token, 0, head, channel
    stride_t_r, stride_t_f,
    n_tokens, n_slot_tokens, n_cache_slots, block_size, n_rows,
    n_heads1, n_heads2, d1, d2,
    q_min, q_max,
    ROPE: tl.constexpr,           # the second parts rotated (every channel)
    IS_NEOX: tl.constexpr,
    REUSE: tl.constexpr,
    DEST_SLOTS: tl.constexpr,
    HAS_SCALE: tl.constexpr,
    O1_FP8: tl.constexpr, O2_FP8: tl.constexpr,
    SOFT_ROUND: tl.constexpr,
    HALF: tl.constexpr,
    BLOCK_HALF: tl.constexpr,
    BLOCK_D1: tl.constexpr,
    BLOCK_D2: tl.constexpr,
    BLOCK_T: tl.constexpr,
    BLOCK_H: tl.constexpr,
    INT64: tl.constexpr,
    SHUFFLE: tl.constexpr = 0,    # DEST_SLOTS: aiter's preshuffled MLA cache, channel chunks this wide (module doc)
):
    # scalars to fp32 (inductor passes Python floats as fp64); tl.cast: a float has no .to in the interpreter
    q_min = tl.cast(q_min, tl.float32)
    q_max = tl.cast(q_max, tl.float32)
    first, heads, tok, t_mask, th_mask = _two_part_block(n_heads1, n_heads2, n_tokens, BLOCK_T, BLOCK_H, INT64)
    if first:
        dest = (o1_ptr + tok * so1_t)[:, None] + heads[None, :] * so1_h
        _cat_pair(a1_ptr, b1_ptr, dest, dest, d1, tok, t_mask, heads, th_mask, th_mask, sa1_t, sa1_h, sa1_d,
                  sb1_t, sb1_h, sb1_d, so1_d, so1_d, d1, d2, 1.0, q_min, q_max, pos_ptr, cos_ptr, sin_ptr, n_rows,
                  stride_t_r, stride_t_f, ROPE, IS_NEOX, REUSE, O1_FP8, SOFT_ROUND, 1, HALF, BLOCK_HALF,
                  BLOCK_D1, BLOCK_D2, BLOCK_T)
    else:
        if DEST_SLOTS:
            blk, off, writes = _slots(slot_ptr, tok, t_mask, n_slot_tokens, n_cache_slots, block_size)
        else:
            blk, off, writes = tok, tok * 0, t_mask
        if SHUFFLE > 0:  # a's and b's tiles of 16 tokens; so2_d is 1 (the plane is flat)
            plane = o2_ptr + blk * so2_blk + (off % 16) * SHUFFLE
            dest = (plane + (off // 16) * (16 * d1))[:, None] + heads[None, :] * so2_h
            dest_b = (plane + block_size * d1 + (off // 16) * (16 * d2))[:, None] + heads[None, :] * so2_h
            b_lo = 0
            sd_cx = 16 * SHUFFLE
            sd_c = 1
        else:
            dest = (o2_ptr + blk * so2_blk + off * so2_off)[:, None] + heads[None, :] * so2_h
            dest_b = dest
            b_lo = d1
            sd_cx = so2_d
            sd_c = so2_d  # unused: channels are not chunked (X = 1)
        inv_scale = tl.math.div_rn(1.0, tl.load(scale_ptr)) if HAS_SCALE else 1.0
        _cat_pair(a2_ptr, b2_ptr, dest, dest_b, b_lo, tok, t_mask, heads, th_mask, th_mask & writes[:, None],
                  sa2_t, sa2_h, sa2_d, sb2_t, sb2_h, sb2_d, sd_cx, sd_c, d1, d2, inv_scale, q_min, q_max,
                  pos_ptr, cos_ptr, sin_ptr, n_rows, stride_t_r, stride_t_f, ROPE, IS_NEOX, REUSE, O2_FP8,
                  SOFT_ROUND, 1 if SHUFFLE == 0 else SHUFFLE, HALF, BLOCK_HALF, BLOCK_D1, BLOCK_D2, BLOCK_T)
