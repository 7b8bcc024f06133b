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

# _cat_kernel's further outputs, none of them written (a launch of the plain concatenations), in
# its parameters' order: passed by position as every runtime argument is, so a launch plan takes them
NO_EXTRAS = (None, 0, 0, 0,   # bo1_ptr, sbo1_t, sbo1_h, sbo1_d
             None, 0, 0, 0,   # bo2_ptr, ...
             None, 0, 0, 0,   # z1_ptr, ...
             0, -1.0, 1.0)    # n_extra, q1_min, q1_max

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
              BLOCK_D1: tl.constexpr, BLOCK_D2: tl.constexpr, BLOCK_T: tl.constexpr, b_out=None, bo_mask=None,
              sbo_d=0, z_out=None, z_mask=None, sz_d=0, UPCAST: tl.constexpr = False, COPY_A: tl.constexpr = True,
              DIV: tl.constexpr = False):
    """cat(a, b) of a (BLOCK_T, BLOCK_H) block where ``w_mask``: a's channels at ``dest``, b's
    from channel ``b_lo`` of ``dest_b`` (``dest`` and d1 but in the shuffled cache), channel
    ``c`` at ``_chan_off(c, X, sd_cx, sd_c)``; ROPE: b's channels 0 .. 2 HALF rotated (rounded
    to b's dtype first unless UPCAST), the rest copied. ``b_out``: b as written (rotated, not
    scaled, in b_out's dtype) also at those rows where ``bo_mask``; ``z_out``: zeros in a's
    place at those rows where ``z_mask``. COPY_A false: a is already in place at ``dest`` (not
    read, not written). DIV: ``inv_scale`` is the scale, the values divided by it (``_cast``)."""
    dt = dest.dtype.element_ty
    c = tl.arange(0, BLOCK_D1)
    m = w_mask[:, :, None] & (c < d1)[None, None, :]
    if COPY_A:
        ah = (a_ptr + tok * sa_t)[:, None] + heads[None, :] * sa_h
        a = tl.load(ah[:, :, None] + c[None, None, :] * sa_d, mask=m, other=0.0)
        _store_chans(dest, c, _cast(a.to(tl.float32), inv_scale, q_min, q_max, dt, IS_FP8, SOFT_ROUND, DIV), m, X,
                     sd_cx, sd_c)
    if z_out is not None:
        zm = z_mask[:, :, None] & (c < d1)[None, None, :]
        _store_chans(z_out, c, tl.zeros(zm.shape, z_out.dtype.element_ty), zm, 1, sz_d, sz_d)
    lm = w_mask if b_out is None else th_mask  # b read for b_out's rows too
    if ROPE:
        o1, o2 = _rotated_heads(b_ptr, sb_t, sb_h, sb_d, tok, t_mask, heads, lm, pos_ptr, pos_ptr, 1,
                                cos_ptr, sin_ptr, n_rows, stride_t_r, stride_t_f, 0, False, IS_NEOX, REUSE,
                                HALF, BLOCK_HALF, BLOCK_T)
        if not UPCAST:
            o1, o2 = _rounded(o1, o2, b_ptr.dtype.element_ty)
        _store_pairs(dest_b, b_lo, _cast(o1, inv_scale, q_min, q_max, dt, IS_FP8, SOFT_ROUND, DIV),
                     _cast(o2, inv_scale, q_min, q_max, dt, IS_FP8, SOFT_ROUND, DIV), w_mask, X, sd_cx, sd_c,
                     HALF, BLOCK_HALF, IS_NEOX)
        if b_out is not None:
            bt = b_out.dtype.element_ty
            _store_pairs(b_out, 0, o1.to(bt), o2.to(bt), bo_mask, 1, sbo_d, sbo_d, HALF, BLOCK_HALF, IS_NEOX)
    if not ROPE or 2 * HALF < BLOCK_D2:
        c = (2 * HALF if ROPE else 0) + tl.arange(0, BLOCK_D2)
        m = w_mask[:, :, None] & (c < d2)[None, None, :]
        bh = (b_ptr + tok * sb_t)[:, None] + heads[None, :] * sb_h
        b = tl.load(bh[:, :, None] + c[None, None, :] * sb_d, mask=lm[:, :, None] & (c < d2)[None, None, :],
                    other=0.0)
        _store_chans(dest_b, b_lo + c, _cast(b.to(tl.float32), inv_scale, q_min, q_max, dt, IS_FP8, SOFT_ROUND, DIV),
                     m, X, sd_cx, sd_c)
        if b_out is not None:
            _store_chans(b_out, c, b.to(b_out.dtype.element_ty), bo_mask[:, :, None] & (c < d2)[None, None, :], 1,
                         sbo_d, sbo_d)


@triton.jit
def _first_pair(tok, t_mask, heads, th_mask, a1_ptr, b1_ptr, o1_ptr, pos_ptr, cos_ptr, sin_ptr,
                sa1_t, sa1_h, sa1_d, sb1_t, sb1_h, sb1_d, so1_t, so1_h, so1_d, stride_t_r, stride_t_f, n_rows,
                d1, d2, r_min, r_max, bo1_ptr, sbo1_t, sbo1_h, sbo1_d, z1_ptr, sz1_t, sz1_h, sz1_d, n_extra,
                ROPE: tl.constexpr, IS_NEOX: tl.constexpr, REUSE: tl.constexpr, O1_FP8: tl.constexpr,
                SOFT_ROUND: tl.constexpr, HALF: tl.constexpr, BLOCK_HALF: tl.constexpr, BLOCK_D1: tl.constexpr,
                BLOCK_D2: tl.constexpr, BLOCK_T: tl.constexpr, UPCAST: tl.constexpr, A1_IN_PLACE: tl.constexpr):
    """The first pair's (Q's) cat(a, b) for the tokens ``tok`` x ``heads`` block into its rows,
    with its further outputs (``_cat_program``'s; also the MLA matmul's epilogue)."""
    dest1 = (o1_ptr + tok * so1_t)[:, None] + heads[None, :] * so1_h
    extra = th_mask & (tok < n_extra)[:, None]
    bo_1 = None if bo1_ptr is None else (bo1_ptr + tok * sbo1_t)[:, None] + heads[None, :] * sbo1_h
    z_1 = None if z1_ptr is None else (z1_ptr + tok * sz1_t)[:, None] + heads[None, :] * sz1_h
    _cat_pair(a1_ptr, b1_ptr, dest1, dest1, d1, tok, t_mask, heads, th_mask, th_mask, sa1_t, sa1_h, sa1_d,
              sb1_t, sb1_h, sb1_d, so1_d, so1_d, d1, d2, 1.0, r_min, r_max, pos_ptr, cos_ptr, sin_ptr, n_rows,
              stride_t_r, stride_t_f, ROPE, IS_NEOX, REUSE, O1_FP8, SOFT_ROUND, 1, HALF, BLOCK_HALF,
              BLOCK_D1, BLOCK_D2, BLOCK_T, bo_1, extra, sbo1_d, z_1, extra, sz1_d, UPCAST, not A1_IN_PLACE)


@triton.jit
def _cat_program(
    pid0,                         # the grid's first pid0 programs are another part's (_cat_kernel: 0)
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
    # fused_qk_rope_cat_and_cache_mla's further outputs (rows; None: not written): each pair's b part as
    # written (bo1: the first n_extra tokens; bo2: every token), zeros in the first pair's a place (the
    # first n_extra tokens); the first pair's range where it is fp8 (q1_min / q1_max; else q_min / q_max)
    # (every launch passes these, by position: NO_EXTRAS where it writes none of them)
    bo1_ptr, sbo1_t, sbo1_h, sbo1_d,
    bo2_ptr, sbo2_t, sbo2_h, sbo2_d,
    z1_ptr, sz1_t, sz1_h, sz1_d,
    n_extra, q1_min, q1_max,
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
    UPCAST: tl.constexpr = False,  # rotated values not rounded to b's dtype before their destinations'
    OWN_Q1_RANGE: tl.constexpr = False,
    A1_IN_PLACE: tl.constexpr = False,  # the first pair's a already at its destination (neither read nor written)
    DIV_SCALE: tl.constexpr = False,  # the second pair's values divided by the scale (IEEE; vLLM's cache writes)
    BS_SHIFT: tl.constexpr = -1,  # DEST_SLOTS: block_size = 2^BS_SHIFT (else -1: a division)
):
    # scalars to fp32 (inductor passes Python floats as fp64); tl.cast: a float has no .to in the interpreter
    q_min = tl.cast(q_min, tl.float32)
    q_max = tl.cast(q_max, tl.float32)
    first, heads, tok, t_mask, th_mask = _two_part_block(n_heads1, n_heads2, n_tokens, BLOCK_T, BLOCK_H, INT64, pid0)
    if first:
        if OWN_Q1_RANGE:
            r_min = tl.cast(q1_min, tl.float32)
            r_max = tl.cast(q1_max, tl.float32)
        else:
            r_min = q_min
            r_max = q_max
        _first_pair(tok, t_mask, heads, th_mask, a1_ptr, b1_ptr, o1_ptr, pos_ptr, cos_ptr, sin_ptr,
                    sa1_t, sa1_h, sa1_d, sb1_t, sb1_h, sb1_d, so1_t, so1_h, so1_d, stride_t_r, stride_t_f, n_rows,
                    d1, d2, r_min, r_max, bo1_ptr, sbo1_t, sbo1_h, sbo1_d, z1_ptr, sz1_t, sz1_h, sz1_d, n_extra,
                    ROPE, IS_NEOX, REUSE, O1_FP8, SOFT_ROUND, HALF, BLOCK_HALF, BLOCK_D1, BLOCK_D2, BLOCK_T, UPCAST,
                    A1_IN_PLACE)
    else:
        if DEST_SLOTS:
            blk, off, writes = _slots(slot_ptr, tok, t_mask, n_slot_tokens, n_cache_slots, block_size, BS_SHIFT)
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
        inv_scale = 1.0
        if HAS_SCALE:
            inv_scale = tl.load(scale_ptr).to(tl.float32) if DIV_SCALE else tl.math.div_rn(1.0, tl.load(scale_ptr))
        bo_2 = None if bo2_ptr is None else (bo2_ptr + tok * sbo2_t)[:, None] + heads[None, :] * sbo2_h
        _cat_pair(a2_ptr, b2_ptr, dest, dest_b, b_lo, tok, t_mask, heads, th_mask, th_mask & writes[:, None],
                  sa2_t, sa2_h, sa2_d, sb2_t, sb2_h, sb2_d, sd_cx, sd_c, d1, d2, inv_scale, q_min, q_max,
                  pos_ptr, cos_ptr, sin_ptr, n_rows, stride_t_r, stride_t_f, ROPE, IS_NEOX, REUSE, O2_FP8,
                  SOFT_ROUND, 1 if SHUFFLE == 0 else SHUFFLE, HALF, BLOCK_HALF, BLOCK_D1, BLOCK_D2, BLOCK_T,
                  bo_2, th_mask, sbo2_d, None, None, 0, UPCAST, True, DIV_SCALE)


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
    # fused_qk_rope_cat_and_cache_mla's further outputs (rows; None: not written): each pair's b part as
    # written (bo1: the first n_extra tokens; bo2: every token), zeros in the first pair's a place (the
    # first n_extra tokens); the first pair's range where it is fp8 (q1_min / q1_max; else q_min / q_max)
    # (every launch passes these, by position: NO_EXTRAS where it writes none of them)
    bo1_ptr, sbo1_t, sbo1_h, sbo1_d,
    bo2_ptr, sbo2_t, sbo2_h, sbo2_d,
    z1_ptr, sz1_t, sz1_h, sz1_d,
    n_extra, q1_min, q1_max,
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
    UPCAST: tl.constexpr = False,  # rotated values not rounded to b's dtype before their destinations'
    OWN_Q1_RANGE: tl.constexpr = False,
    A1_IN_PLACE: tl.constexpr = False,  # the first pair's a already at its destination (neither read nor written)
    DIV_SCALE: tl.constexpr = False,  # the second pair's values divided by the scale (IEEE; vLLM's cache writes)
    BS_SHIFT: tl.constexpr = -1,  # DEST_SLOTS: block_size = 2^BS_SHIFT (else -1: a division)
):
    _cat_program(0, a1_ptr, b1_ptr, o1_ptr, a2_ptr, b2_ptr, o2_ptr, slot_ptr, pos_ptr, cos_ptr, sin_ptr, scale_ptr,
                 sa1_t, sa1_h, sa1_d, sb1_t, sb1_h, sb1_d, so1_t, so1_h, so1_d, sa2_t, sa2_h, sa2_d, sb2_t, sb2_h,
                 sb2_d, so2_blk, so2_off, so2_h, so2_d, stride_t_r, stride_t_f, n_tokens, n_slot_tokens,
                 n_cache_slots, block_size, n_rows, n_heads1, n_heads2, d1, d2, q_min, q_max, bo1_ptr, sbo1_t,
                 sbo1_h, sbo1_d, bo2_ptr, sbo2_t, sbo2_h, sbo2_d, z1_ptr, sz1_t, sz1_h, sz1_d, n_extra, q1_min,
                 q1_max, ROPE, IS_NEOX, REUSE, DEST_SLOTS, HAS_SCALE, O1_FP8, O2_FP8, SOFT_ROUND, HALF, BLOCK_HALF,
                 BLOCK_D1, BLOCK_D2, BLOCK_T, BLOCK_H, INT64, SHUFFLE, UPCAST, OWN_Q1_RANGE, A1_IN_PLACE, DIV_SCALE,
                 BS_SHIFT)
