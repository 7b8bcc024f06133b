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
    else:
        ticket = tl.program_id(0).to(tl.int64)
    return ticket // n_segs, ticket % n_segs
