"""Rows split over programs that wait for each other (the "split" paths of the row
reductions): each program takes a ticket, in start order, naming its (row, segment)."""

import triton
import triton.language as tl


def co_resident(programs):
    """Mark a kernel whose programs wait for each other: ``programs(a)`` of a launch must
    be resident on the GPU at once, ``a`` its arguments and constexprs by name and
    ``a["grid"]`` the programs it launches (0 or 1 where a launch does not wait). The
    wrappers size such grids to the device's SMs (``DeviceProfile.sms``);
    ``scripts/check_targets.py`` checks each target's build holds that many programs an
    SM (registers, shared memory / LDS, warps)."""
    def mark(kernel):
        kernel.co_resident = programs
        return kernel
    return mark


def segments_waiting(a) -> int:
    """The programs of a split-row launch that may wait for each other: a row's segments
    (PHASE 0; tickets taken in start order make any n_segs resident programs enough)."""
    return a["n_segs"] if a["PHASE"] == 0 else 1


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
    are left as they were given (a buffer reused launch after launch). Plain stores: every
    sibling has read the row's words (its count is in), and the next reader is the next
    launch. (A vector atomic exchange does not build for AMD: Triton 3.6 lowers it to a
    buffer-atomic intrinsic LLVM does not have.)"""
    done = slot_ptr + n_rows * n_segs + 1 + row
    if tl.atomic_add(done, 1, sem="acq_rel", scope="gpu") == n_segs - 1:
        g = tl.arange(0, BLOCK_S)
        tl.store(slot_ptr + row * n_segs + g, tl.zeros([BLOCK_S], tl.int64), mask=g < n_segs)
        tl.store(done, tl.zeros([], tl.int64))
