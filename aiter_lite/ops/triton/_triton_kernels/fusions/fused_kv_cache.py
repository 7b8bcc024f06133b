"""RoPE fused with the paged KV-cache write, and MLA's latent-cache write.

A program takes BLOCK_T tokens and BLOCK_H heads of Q (rotated into q_out, zeros_out
zeroed) or of K and V (K rotated into k_out; rotated K and V written at the token's
slot of the caches); the grid runs over Q's head blocks, then the KV heads' blocks, for
each token block in turn. Cache entries are addressed by (block, offset, head, channel)
with strides, a channel ``c`` at ``(c // X) * stride_cx + (c % X) * stride_c``: X = 1 for
the flash layout and the classic value cache, X = x for the classic key cache's
16-byte-chunked head dim; VC_X > 1 chunks the value cache's offsets instead (aiter's
shuffled value cache [blocks, heads, block_size // x, head_dim, x]). A token writes the caches only when its slot is in
[0, cache slots): padding (slot < 0, or past the end of slot_mapping) writes nothing and
a slot past the cache is never an out-of-bounds write. ROW_SLOTS (aiter's per-sequence
cache of ``fused_qk_rope_cosine_cache_llama``): token t writes row t of the cache at offset
``slot_mapping[t]``, a slot in [0, block_size).

Values bound for a cache are multiplied by ``inv_scale`` (1 unscaled) in fp32 and, for
fp8, saturated and rounded as the quant kernels do (``_quantize``); DIV_SCALE divides them by
the scale instead (an IEEE division, as vLLM's cache kernels write). ROTATE off writes K and
V as they are (vLLM's ``reshape_and_cache``: no Q heads, no tables). ``_cache_convert_kernel``
converts a whole cache to or from fp8 (vLLM's ``convert_fp8``).
"""

import triton
import triton.language as tl

from aiter_lite.ops.triton._triton_kernels.quant.mx_quant import _pow2
from aiter_lite.ops.triton._triton_kernels.quant.quant import _quantize
from aiter_lite.ops.triton._triton_kernels.rope.rope import (
    _load_part,
    _tables,
    _token_block,
    _token_rows,
    _turn,
)


@triton.jit
def _corrected(x, q0, s, r):
    """Markstein's correction of q0 = RN(x r), r = RN(1 / s): the remainder q0 s - x is exact
    (one FMA) while everything stays normal, and RN(q0 - (q0 s - x) r) is then RN(x / s)."""
    return tl.math.fma(tl.math.fma(q0, s, x * -1.0), -r, q0)  # x * -1: an FFMA operand negation, no FADD


@triton.jit
def _div_by(x, s):
    """fp32 ``x / s`` for an fp8 destination, as IEEE division rounds it, in multiplies and FMAs
    (``div_rn`` is some 10 instructions an element and a slow-path call; kept as this
    function's fallback branch, its calls' register saves spilled the whole conversion kernel
    on sm_90). The runtime scalar ``s`` picks a uniform branch:

    * s in [2^-84, 2^126): ``_corrected`` over q0 = x * RN(1 / s). Every quotient an fp8
      value can tell apart (|x / s| >= 2^-17) has x >= 2^-101, so an exact remainder; smaller
      ones stay within an ulp with their sign (fp8 zero alike), zeros keep their sign (the
      remainder of +-0 is +0), and a quotient past 2^100 (inf, an overflow: the remainder
      would be NaN) keeps q0, which saturates alike.
    * any other s: s = m 2^k with m in [1, 2) (a subnormal s normalized first), and
      x / s = (x 2^-k) / m: x scaled by two powers of 2 (exact, or an overflow or underflow
      whose quotient saturates or flushes alike), then corrected as above where q0 lies in
      [2^-100, 2^100]. Zero, inf and NaN scales divide as x * (1 / s) does: inf, 0 or NaN."""
    bits = s.to(tl.int32, bitcast=True)
    e = (bits >> 23) & 0xFF
    if (e >= 127 - 84) & (e < 127 + 126):
        r = tl.math.div_rn(1.0, s)
        q0 = x * r
        y = tl.where(tl.abs(q0) <= 2.0**100, _corrected(x, q0, s, r), q0)
    else:
        special = (e == 255) | ((bits & 0x7FFFFFFF) == 0)
        sub = (e == 0) & ~special
        sn = tl.where(sub, s * 2.0**64, s)
        k = ((sn.to(tl.int32, bitcast=True) >> 23) & 0xFF) - 127 - tl.where(sub, 64, 0)
        m = ((sn.to(tl.int32, bitcast=True) & -2139095041) | (127 << 23)).to(tl.float32, bitcast=True)  # 0x807FFFFF
        j1 = tl.minimum(tl.maximum(-k, -126), 126)
        p1 = tl.where(special, 1.0, _pow2(j1))
        p2 = tl.where(special, 1.0, _pow2(-k - j1))
        m = tl.where(special, s, m)
        r = tl.math.div_rn(1.0, m)
        xs = x * p1 * p2
        q0 = xs * r
        a = tl.abs(q0)
        y = tl.where((a >= 2.0**-100) & (a <= 2.0**100), _corrected(xs, q0, m, r), q0)
    return y


@triton.jit
def _cast(x, inv_scale, q_min, q_max, dtype: tl.constexpr, IS_FP8: tl.constexpr, SOFT_ROUND: tl.constexpr,
          DIV: tl.constexpr = False):
    """fp32 ``x * inv_scale`` in ``dtype``: fp8 saturated to [q_min, q_max] (as the quant ops).
    DIV: ``inv_scale`` is the scale itself, ``x`` divided by it (IEEE, vLLM's cache writes)."""
    if DIV:
        if IS_FP8:
            x = _div_by(x, inv_scale)
        else:
            x = tl.math.div_rn(x, inv_scale)
        inv_scale = 1.0
    if IS_FP8:
        return _quantize(x, inv_scale, q_min, q_max, dtype, SOFT_ROUND)
    return (x * inv_scale).to(dtype)


@triton.jit
def _rounded(o1, o2, dtype: tl.constexpr):
    """Rotated pairs rounded to the input's dtype (the value the RoPE ops store), in fp32."""
    return o1.to(dtype).to(tl.float32), o2.to(dtype).to(tl.float32)


@triton.jit
def _chan_off(c, X: tl.constexpr, stride_cx, stride_c):
    """Offset of channel ``c`` in a cache entry (the classic key cache splits it into x-wide chunks)."""
    if X == 1:
        return c * stride_cx
    return (c // X) * stride_cx + (c % X) * stride_c


@triton.jit
def _store_pairs(base, lo, o1, o2, mask, X: tl.constexpr, stride_cx, stride_c,
                 HALF: tl.constexpr, BLOCK_HALF: tl.constexpr, IS_NEOX: tl.constexpr):
    """The rotated pairs (o1, o2: (BLOCK_T, BLOCK_H, BLOCK_HALF), already in the destination's
    dtype) at channels lo .. lo + 2 HALF of the (BLOCK_T, BLOCK_H) entries at ``base``."""
    j = tl.arange(0, BLOCK_HALF)
    if IS_NEOX:
        m = mask[:, :, None] & (j < HALF)[None, None, :]
        tl.store(base[:, :, None] + _chan_off(lo + j, X, stride_cx, stride_c)[None, None, :], o1, mask=m)
        tl.store(base[:, :, None] + _chan_off(lo + HALF + j, X, stride_cx, stride_c)[None, None, :], o2, mask=m)
    else:
        r = tl.arange(0, 2 * BLOCK_HALF)
        m = mask[:, :, None] & (r < 2 * HALF)[None, None, :]
        oo = tl.reshape(tl.join(o1, o2), (o1.shape[0], o1.shape[1], 2 * BLOCK_HALF))
        tl.store(base[:, :, None] + _chan_off(lo + r, X, stride_cx, stride_c)[None, None, :], oo, mask=m)


@triton.jit
def _store_chans(base, c, vals, mask, X: tl.constexpr, stride_cx, stride_c):
    """``vals`` (BLOCK_T, BLOCK_H, len(c)) at channels ``c`` of the entries at ``base``."""
    tl.store(base[:, :, None] + _chan_off(c, X, stride_cx, stride_c)[None, None, :], vals, mask=mask)


@triton.jit
def _slots(slot_ptr, tok, t_mask, n_slot_tokens, n_cache_slots, block_size, BS_SHIFT: tl.constexpr = -1):
    """Each token's (block, offset) in the cache, int64, and whether it writes: tok <
    n_slot_tokens and 0 <= slot < n_cache_slots (else block 0, offset 0, no write).
    BS_SHIFT >= 0: block_size is 2^BS_SHIFT, a shift and a mask (a 64-bit division by a
    runtime value is a subroutine of some 70 instructions a token)."""
    slot = tl.load(slot_ptr + tok, mask=t_mask & (tok < n_slot_tokens), other=-1).to(tl.int64)
    writes = t_mask & (slot >= 0) & (slot < n_cache_slots)
    slot = tl.where(writes, slot, 0)
    if BS_SHIFT >= 0:
        return slot >> BS_SHIFT, slot & ((1 << BS_SHIFT) - 1), writes
    return slot // block_size, slot % block_size, writes


@triton.jit
def _slot_runs(blk, off, writes):
    """This program's tokens as at most two runs of consecutive slots, each in one cache
    block (a prefill's tile: a sequence's tokens, across a block's end or into the next
    sequence): token t of run r writes offset ``o_r + t`` of block ``b_r``. Returns (every
    writing token in one of the runs, run 1's tokens, its (b, o), run 2's tokens, its (b, o));
    run 1 holds the first writing token, run 2 the last."""
    BLOCK_T: tl.constexpr = blk.shape[0]
    t = tl.arange(0, BLOCK_T)
    o = off - t
    t1 = tl.min(tl.where(writes, t, BLOCK_T))
    t2 = tl.max(tl.where(writes, t, -1))
    b1 = tl.sum(tl.where(t == t1, blk, 0))
    o1 = tl.sum(tl.where(t == t1, o, 0))
    b2 = tl.sum(tl.where(t == t2, blk, 0))
    o2 = tl.sum(tl.where(t == t2, o, 0))
    run1 = writes & (blk == b1) & (o == o1)
    run2 = writes & (blk == b2) & (o == o2) & ~run1
    runs = tl.sum((writes & ~run1 & ~run2).to(tl.int32)) == 0
    return runs, run1, b1, o1, run2, b2, o2


@triton.jit
def _store_value_run(vc_ptr, vals, run, b, o, heads, hd_mask, c, svc_blk, svc_h, svc_cx):
    """A run's tokens of the (BLOCK_T, BLOCK_H, BLOCK_D) tile ``vals`` into the classic value
    cache [blocks, heads, d, block_size] (offsets adjacent): the tokens are the addresses'
    contiguous axis, so the compiler stores them across the lanes (the tile turned through
    shared memory), each channel's run of tokens in whole sectors, where a token's entry
    alone is one element every ``block_size``."""
    t = tl.arange(0, vals.shape[0])
    offs = (heads * svc_h)[None, :, None] + (c * svc_cx)[None, None, :] + t[:, None, None]  # one 64-bit add
    tl.store((vc_ptr + b * svc_blk + o) + offs, vals, mask=run[:, None, None] & hd_mask)


@triton.jit
def _store_key_run(kc_ptr, chunks, run, b, o, heads, h_mask, head_dim, skc_blk, skc_h, skc_cx):
    """A run's tokens of ``chunks`` (BLOCK_T, BLOCK_H, chunks, X: the key tile's channels in
    X-wide chunks) into the classic key cache [blocks, heads, d / X, block_size, X] (its last
    two axes contiguous): a chunk's run of tokens is one contiguous run of memory, stored X
    elements (16 bytes) a lane with the tokens across the lanes (the compiler orders the
    lanes by the addresses' contiguous axis, then the first)."""
    BLOCK_T: tl.constexpr = chunks.shape[0]
    NC: tl.constexpr = chunks.shape[2]
    X: tl.constexpr = chunks.shape[3]
    ci = tl.arange(0, NC)
    offs = ((tl.arange(0, BLOCK_T) * X)[:, None, None, None] + (heads * skc_h)[None, :, None, None]
            + (ci * skc_cx)[None, None, :, None] + tl.arange(0, X)[None, None, None, :])
    mask = run[:, None, None, None] & h_mask[None, :, None, None] & (ci * X < head_dim)[None, None, :, None]
    tl.store((kc_ptr + b * skc_blk + o * X) + offs, chunks, mask=mask)


@triton.jit
def _rotated_heads(x_ptr, sxt, sxh, sxd, tok, t_mask, heads, th_mask, pos_ptr, off_ptr, stride_p, cos_ptr, sin_ptr,
                   n_rows, stride_t_r, stride_t_f, LO, HAS_OFFSETS: tl.constexpr, IS_NEOX: tl.constexpr,
                   REUSE: tl.constexpr, HALF: tl.constexpr, BLOCK_HALF: tl.constexpr, BLOCK_T: tl.constexpr):
    """The rotary pairs (o1, o2) of a (BLOCK_T, BLOCK_H) block of heads, fp32: channels
    LO .. LO + 2 HALF turned by the tables' rows at the tokens' positions (+ offsets);
    NaN where a row falls outside the table."""
    xh = (x_ptr + tok * sxt)[:, None] + heads[None, :] * sxh
    x1, x2 = _load_part(xh, LO, sxd, th_mask, HALF, BLOCK_HALF, IS_NEOX)
    row, _, valid = _token_rows(tok, t_mask, 1, pos_ptr, off_ptr, pos_ptr, stride_p, 0, 0, 1, 1, 1,
                                HAS_OFFSETS, BLOCK_T)
    c1, c2, s1, s2 = _tables(cos_ptr, sin_ptr, row, n_rows, stride_t_r, stride_t_f, valid,
                             HALF, BLOCK_HALF, IS_NEOX, REUSE, False)
    return _turn(x1, x2, c1, c2, s1, s2, valid[:, None, None], False)


@triton.jit
def _two_part_block(n_heads1, n_heads2, n_tokens, BLOCK_T: tl.constexpr, BLOCK_H: tl.constexpr,
                    INT64: tl.constexpr, pid0=0):
    """This program's place in a grid of token blocks, each the first tensor's head blocks
    then the second's: (in the first tensor, heads, tokens, token mask, token x head mask);
    the grid's first ``pid0`` programs are another part's."""
    n_blocks1 = tl.cdiv(n_heads1, BLOCK_H)
    pid_h, tok, t_mask = _token_block(n_blocks1 + tl.cdiv(n_heads2, BLOCK_H), n_tokens, BLOCK_T, INT64, pid0)
    first = pid_h < n_blocks1
    heads = tl.where(first, pid_h, pid_h - n_blocks1) * BLOCK_H + tl.arange(0, BLOCK_H)
    th_mask = t_mask[:, None] & (heads < tl.where(first, n_heads1, n_heads2))[None, :]
    return first, heads, tok, t_mask, th_mask


@triton.jit
def _turn_and_store(x_ptr, sx_t, sx_h, sx_d, out_ptr, so_t, so_h, so_d, o_min, o_max,
                    cache, w_mask, inv_scale, c_min, c_max, s_cx, s_c,
                    tok, t_mask, heads, th_mask, pos_ptr, off_ptr, cos_ptr, sin_ptr, n_rows, stride_t_r, stride_t_f,
                    head_dim, HAS_OFFSETS: tl.constexpr, IS_NEOX: tl.constexpr, REUSE: tl.constexpr,
                    O_FP8: tl.constexpr, C_FP8: tl.constexpr, SOFT_ROUND: tl.constexpr, TO_CACHE: tl.constexpr,
                    X: tl.constexpr, HALF: tl.constexpr, BLOCK_HALF: tl.constexpr, BLOCK_REST: tl.constexpr,
                    BLOCK_T: tl.constexpr, TO_OUT: tl.constexpr = True, DIV: tl.constexpr = False):
    """A (BLOCK_T, BLOCK_H) block of x's heads turned (rounded to x's dtype) into ``out``,
    channels past the rotary part copied; TO_CACHE: the same values times ``inv_scale``
    into the cache entries at ``cache`` where ``w_mask`` (TO_OUT False: into the cache only)."""
    o1, o2 = _rotated_heads(x_ptr, sx_t, sx_h, sx_d, tok, t_mask, heads, th_mask, pos_ptr, off_ptr, 1,
                            cos_ptr, sin_ptr, n_rows, stride_t_r, stride_t_f, 0, HAS_OFFSETS, IS_NEOX, REUSE,
                            HALF, BLOCK_HALF, BLOCK_T)
    # Rounded to x's dtype: out holds it unscaled, the cache scaled.
    o1, o2 = _rounded(o1, o2, x_ptr.dtype.element_ty)
    out = (out_ptr + tok * so_t)[:, None] + heads[None, :] * so_h
    o_ty = out_ptr.dtype.element_ty
    if TO_OUT:
        _store_pairs(out, 0, _cast(o1, 1.0, o_min, o_max, o_ty, O_FP8, SOFT_ROUND),
                     _cast(o2, 1.0, o_min, o_max, o_ty, O_FP8, SOFT_ROUND), th_mask, 1, so_d, 0,
                     HALF, BLOCK_HALF, IS_NEOX)
    c_ty = cache.dtype.element_ty
    if TO_CACHE:
        _store_pairs(cache, 0, _cast(o1, inv_scale, c_min, c_max, c_ty, C_FP8, SOFT_ROUND, DIV),
                     _cast(o2, inv_scale, c_min, c_max, c_ty, C_FP8, SOFT_ROUND, DIV), w_mask,
                     X, s_cx, s_c, HALF, BLOCK_HALF, IS_NEOX)
    if BLOCK_REST > 0:
        c = 2 * HALF + tl.arange(0, BLOCK_REST)
        m = th_mask[:, :, None] & (c < head_dim)[None, None, :]
        xh = (x_ptr + tok * sx_t)[:, None] + heads[None, :] * sx_h
        rest = tl.load(xh[:, :, None] + c[None, None, :] * sx_d, mask=m, other=0.0).to(tl.float32)
        if TO_OUT:
            _store_chans(out, c, _cast(rest, 1.0, o_min, o_max, o_ty, O_FP8, SOFT_ROUND), m, 1, so_d, 0)
        if TO_CACHE:
            _store_chans(cache, c, _cast(rest, inv_scale, c_min, c_max, c_ty, C_FP8, SOFT_ROUND, DIV),
                         m & w_mask[:, :, None], X, s_cx, s_c)


@triton.jit(do_not_specialize=["n_tokens", "n_slot_tokens", "n_cache_slots", "n_rows"])
def _rope_cache_kernel(
    q_ptr, k_ptr, v_ptr, q_out_ptr, k_out_ptr, zeros_ptr,
    kc_ptr, vc_ptr,               # key / value caches
    slot_ptr, pos_ptr, off_ptr,   # (n_slot_tokens,) slots; (n_tokens,) positions (+ offsets), unit stride
    cos_ptr, sin_ptr,             # (n_rows, F) tables
    k_scale_ptr, v_scale_ptr,     # fp32, one element each (HAS_K_SCALE / HAS_V_SCALE)
    sq_t, sq_h, sq_d, sk_t, sk_h, sk_d, sv_t, sv_h, sv_d,
    sqo_t, sqo_h, sqo_d, sko_t, sko_h, sko_d, sz_t, sz_h, sz_d,
    skc_blk, skc_off, skc_h, skc_cx, skc_c,   # key cache: block, offset, head, channel (x-chunk), in-chunk
    svc_blk, svc_off, svc_h, svc_cx, svc_ox,  # value cache (svc_ox: VC_X > 1, an offset's place in its chunk)
    stride_t_r, stride_t_f,
    n_tokens, n_slot_tokens, n_cache_slots, block_size, n_rows,
    n_q_heads, n_kv_heads, head_dim,
    qo_min, qo_max, ko_min, ko_max, c_min, c_max,  # fp8 ranges (fp32) of q_out, k_out, the caches
    HAS_OFFSETS: tl.constexpr,
    IS_NEOX: tl.constexpr,
    REUSE: tl.constexpr,          # a HALF-wide table serves both members of a pair
    HAS_K_SCALE: tl.constexpr,
    HAS_V_SCALE: tl.constexpr,
    Q_FP8: tl.constexpr, K_FP8: tl.constexpr, KC_FP8: tl.constexpr, VC_FP8: tl.constexpr,
    SOFT_ROUND: tl.constexpr,     # fp8 rounded in fp32 before the conversion (the interpreter)
    ZEROS: tl.constexpr,          # zero zeros_out (Q's shape)
    KC_X: tl.constexpr,           # the key cache's chunk width (1: flash layout)
    HALF: tl.constexpr,           # R / 2: channels 0 .. R rotate, R .. head_dim pass through
    BLOCK_HALF: tl.constexpr,
    BLOCK_REST: tl.constexpr,     # >= head_dim - R (0: none), power of 2
    BLOCK_D: tl.constexpr,        # >= head_dim, power of 2
    BLOCK_T: tl.constexpr,
    BLOCK_H: tl.constexpr,
    INT64: tl.constexpr,
    ROW_SLOTS: tl.constexpr = False,  # token t's cache row is row t (aiter's per-sequence cache), its slot the offset in it
    K_OUT: tl.constexpr = True,       # rotated K into k_out as well as the cache
    VC_X: tl.constexpr = 1,           # > 1: the value cache's offsets in chunks of VC_X (aiter's 5-D shuffled value cache)
    ROTATE: tl.constexpr = True,      # False: K and V written as they are (no Q heads, no tables)
    DIV_SCALE: tl.constexpr = False,  # cache values divided by the scales (IEEE) rather than times their inverse
    BS_SHIFT: tl.constexpr = -1,       # block_size = 2^BS_SHIFT (else -1)
    SLOT_TILES: tl.constexpr = False,  # classic caches (contiguous entries): a tile whose tokens are at most two runs
                                       # of consecutive slots stored run by run, tokens across the lanes (_slot_runs)
):
    # scalars to fp32 (inductor passes Python floats as fp64); tl.cast: a float has no .to in the interpreter
    qo_min = tl.cast(qo_min, tl.float32)
    qo_max = tl.cast(qo_max, tl.float32)
    ko_min = tl.cast(ko_min, tl.float32)
    ko_max = tl.cast(ko_max, tl.float32)
    c_min = tl.cast(c_min, tl.float32)
    c_max = tl.cast(c_max, tl.float32)
    first, heads, tok, t_mask, th_mask = _two_part_block(n_q_heads, n_kv_heads, n_tokens, BLOCK_T, BLOCK_H, INT64)
    if first:
        if ROTATE:  # else there are no Q heads
            _turn_and_store(q_ptr, sq_t, sq_h, sq_d, q_out_ptr, sqo_t, sqo_h, sqo_d, qo_min, qo_max,
                            q_out_ptr, th_mask, 1.0, qo_min, qo_max, 0, 0,
                            tok, t_mask, heads, th_mask, pos_ptr, off_ptr, cos_ptr, sin_ptr, n_rows, stride_t_r,
                            stride_t_f, head_dim, HAS_OFFSETS, IS_NEOX, REUSE, Q_FP8, Q_FP8, SOFT_ROUND, False, 1,
                            HALF, BLOCK_HALF, BLOCK_REST, BLOCK_T)
            if ZEROS:
                c = tl.arange(0, BLOCK_D)
                m = th_mask[:, :, None] & (c < head_dim)[None, None, :]
                z = (zeros_ptr + tok * sz_t)[:, None] + heads[None, :] * sz_h
                _store_chans(z, c, tl.zeros([BLOCK_T, BLOCK_H, BLOCK_D], zeros_ptr.dtype.element_ty), m, 1, sz_d, 0)
    else:
        if ROW_SLOTS:  # the wrapper keeps slot_mapping's tokens within the cache's rows
            blk, off, writes = _slots(slot_ptr, tok, t_mask, n_slot_tokens, block_size, block_size, BS_SHIFT)
            blk = tl.where(writes, tok.to(tl.int64), 0)
        else:
            blk, off, writes = _slots(slot_ptr, tok, t_mask, n_slot_tokens, n_cache_slots, block_size, BS_SHIFT)
        w_mask = writes[:, None] & th_mask
        if SLOT_TILES:
            runs, run1, b1, o1, run2, b2, o2 = _slot_runs(blk, off, writes)
        kc = (kc_ptr + blk * skc_blk + off * skc_off)[:, None] + heads[None, :] * skc_h
        k_inv = 1.0
        if HAS_K_SCALE:
            k_inv = tl.load(k_scale_ptr).to(tl.float32) if DIV_SCALE else tl.math.div_rn(1.0, tl.load(k_scale_ptr))
        c = tl.arange(0, BLOCK_D)
        m = th_mask[:, :, None] & (c < head_dim)[None, None, :]
        if ROTATE:
            _turn_and_store(k_ptr, sk_t, sk_h, sk_d, k_out_ptr, sko_t, sko_h, sko_d, ko_min, ko_max,
                            kc, w_mask, k_inv, c_min, c_max, skc_cx, skc_c,
                            tok, t_mask, heads, th_mask, pos_ptr, off_ptr, cos_ptr, sin_ptr, n_rows, stride_t_r,
                            stride_t_f, head_dim, HAS_OFFSETS, IS_NEOX, REUSE, K_FP8, KC_FP8, SOFT_ROUND, True, KC_X,
                            HALF, BLOCK_HALF, BLOCK_REST, BLOCK_T, K_OUT, DIV_SCALE)
        else:
            kh = (k_ptr + tok * sk_t)[:, None] + heads[None, :] * sk_h
            k = tl.load(kh[:, :, None] + c[None, None, :] * sk_d, mask=m & writes[:, None, None], other=0.0)
            k = _cast(k.to(tl.float32), k_inv, c_min, c_max, kc_ptr.dtype.element_ty, KC_FP8, SOFT_ROUND, DIV_SCALE)
            if not SLOT_TILES:
                _store_chans(kc, c, k, m & writes[:, None, None], KC_X, skc_cx, skc_c)
            elif runs:
                chunks = tl.reshape(k, (BLOCK_T, k.shape[1], BLOCK_D // KC_X, KC_X))
                _store_key_run(kc_ptr, chunks, run1, b1, o1, heads, heads < n_kv_heads, head_dim, skc_blk, skc_h,
                               skc_cx)
                if tl.sum(run2.to(tl.int32)) > 0:
                    _store_key_run(kc_ptr, chunks, run2, b2, o2, heads, heads < n_kv_heads, head_dim, skc_blk, skc_h,
                                   skc_cx)
            else:
                _store_chans(kc, c, k, m & writes[:, None, None], KC_X, skc_cx, skc_c)
        vh = (v_ptr + tok * sv_t)[:, None] + heads[None, :] * sv_h
        v = tl.load(vh[:, :, None] + c[None, None, :] * sv_d, mask=m & writes[:, None, None], other=0.0)
        v_inv = 1.0
        if HAS_V_SCALE:
            v_inv = tl.load(v_scale_ptr).to(tl.float32) if DIV_SCALE else tl.math.div_rn(1.0, tl.load(v_scale_ptr))
        if VC_X > 1:  # [blocks, heads, block_size // x, head_dim, x]
            vc = (vc_ptr + blk * svc_blk + (off // VC_X) * svc_off + (off % VC_X) * svc_ox)[:, None]
        else:
            vc = (vc_ptr + blk * svc_blk + off * svc_off)[:, None]
        vc = vc + heads[None, :] * svc_h
        v = _cast(v.to(tl.float32), v_inv, c_min, c_max, vc_ptr.dtype.element_ty, VC_FP8, SOFT_ROUND, DIV_SCALE)
        if not SLOT_TILES:
            _store_chans(vc, c, v, m & writes[:, None, None], 1, svc_cx, 0)
        elif runs:
            hd_mask = (heads < n_kv_heads)[None, :, None] & (c < head_dim)[None, None, :]
            _store_value_run(vc_ptr, v, run1, b1, o1, heads, hd_mask, c, svc_blk, svc_h, svc_cx)
            if tl.sum(run2.to(tl.int32)) > 0:
                _store_value_run(vc_ptr, v, run2, b2, o2, heads, hd_mask, c, svc_blk, svc_h, svc_cx)
        else:
            _store_chans(vc, c, v, m & writes[:, None, None], 1, svc_cx, 0)


@triton.jit(do_not_specialize=["n_rows"])  # n_cols specialized: a row's masks known whole 16-element runs
def _cache_convert_kernel(
    x_ptr, y_ptr,
    stride_x_r, stride_y_r,       # rows (cache blocks); each row's n_cols elements contiguous
    n_rows, n_cols,
    scale,                        # runtime fp32
    q_min, q_max,                 # y's fp8 range (QUANT)
    QUANT: tl.constexpr,          # y fp8: x / scale, saturated; else x (fp8) * scale
    SOFT_ROUND: tl.constexpr,
    BLOCK_N: tl.constexpr,
    INT64: tl.constexpr,
):
    """A cache converted to or from fp8 (vLLM's ``convert_fp8``): one program a BLOCK_N
    slice of one row."""
    scale = tl.cast(scale, tl.float32)
    q_min = tl.cast(q_min, tl.float32)
    q_max = tl.cast(q_max, tl.float32)
    pid = tl.program_id(0)
    if INT64:
        pid = pid.to(tl.int64)
    n_col_blocks = tl.cdiv(n_cols, BLOCK_N)
    row = pid // n_col_blocks
    c = (pid % n_col_blocks) * BLOCK_N + tl.arange(0, BLOCK_N)
    mask = c < n_cols
    x = tl.load(x_ptr + row * stride_x_r + c, mask=mask, other=0.0).to(tl.float32)
    y_ty = y_ptr.dtype.element_ty
    if QUANT:
        y = _cast(x, scale, q_min, q_max, y_ty, True, SOFT_ROUND, True)
    else:
        y = (x * scale).to(y_ty)
    tl.store(y_ptr + row * stride_y_r + c, y, mask=mask)
