"""Rows split over programs that wait for each other (the "split" paths of the row
reductions): each program takes a ticket, in start order, naming its (row, segment)."""

import triton
import triton.language as tl


@triton.jit
def _segment_ticket(slot_ptr, n_rows, n_segs, PHASE: tl.constexpr):
    """(row, segment) of this program, int64. With PHASE 0 programs take them in start
    order from the ticket word after the n_rows * n_segs statistics slots, so the
    siblings a program waits for have started or start as earlier rows finish; the
    interpreter's phases 1 / 2 (programs run one after another) take the program id."""
    if PHASE == 0:
        ticket = tl.atomic_add(slot_ptr + n_rows * n_segs, 1, sem="relaxed", scope="gpu")
        if ticket == n_rows * n_segs - 1:  # the last ticket taken: the word left zeroed
            tl.atomic_xchg(slot_ptr + n_rows * n_segs, 0, sem="relaxed", scope="gpu")
    else:
        ticket = tl.program_id(0).to(tl.int64)
    return ticket // n_segs, ticket % n_segs


@triton.jit
def _segment_release(slot_ptr, row, n_rows, n_segs, BLOCK_S: tl.constexpr):
    """After a program has read its row's published statistics: the row's last program to
    get here (a count a row after the ticket word) zeroes them and the count, so the slots
    are left as they were given (a buffer reused launch after launch)."""
    done = slot_ptr + n_rows * n_segs + 1 + row
    if tl.atomic_add(done, 1, sem="acq_rel", scope="gpu") == n_segs - 1:
        g = tl.arange(0, BLOCK_S)
        tl.atomic_xchg(slot_ptr + row * n_segs + g, tl.zeros([BLOCK_S], tl.int64), mask=g < n_segs, sem="relaxed",
                       scope="gpu")
        tl.atomic_xchg(done, 0, sem="relaxed", scope="gpu")
