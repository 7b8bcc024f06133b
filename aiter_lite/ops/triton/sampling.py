"""Sampling from a batch of distributions without sorting the vocabulary: FlashInfer's
``flashinfer.sampling`` names, arguments and results.

    samples = top_k_top_p_sampling_from_logits(logits, top_k, top_p, generator=g)   # int32 (batch,)
    probs = top_p_renorm_probs(probs, 0.9)                                         # fp32, renormalized

* ``top_k`` / ``top_p`` / ``min_p``: a Python number for every row, or a tensor of one per
  row. ``top_k`` <= 0 or >= the vocabulary keeps every token; ``top_p`` >= 1 keeps every
  token, ``top_p`` <= 0 the largest group alone, a NaN ``top_p`` (in a tensor) none (its row
  renormalizes to NaN and samples -1); ``min_p`` keeps ``p >= min_p * max(p)``.
* Ties: a threshold keeps or drops whole groups of equal values. Top-k keeps every
  token equal to the k-th largest; top-p keeps the fewest largest values (whole groups)
  whose mass reaches ``top_p`` of the row's (of what top-k kept, with
  ``filter_apply_order="top_k_first"``; of the whole row with ``"joint"``).
* Draws: one uniform number a row, from ``generator`` (or a generator seeded by
  ``seed`` / ``offset``; else torch's default generator of the device), the token the
  inverse CDF of the kept, renormalized distribution gives it. The same generator state
  gives the same tokens. The draws are torch's uniform numbers, not FlashInfer's Philox
  stream: the same seed samples differently from FlashInfer.
* A row holding NaN (or, from probabilities, a negative value), or with no mass left,
  samples -1 and renormalizes / masks to NaN: visible, never a silently wrong token.
* ``indices`` (int, (n,)): output i draws from row ``indices[i]`` (requests sharing a row).
* ``temperature`` (the logits forms; this project's keyword): ``softmax(logits / t)``, a
  number or one a row; below 1e-5 the row's greedy token (its first largest logit), as
  vLLM's sampler.

Complexity: O(vocab) a pass, no sort of a row. A row is cut into slices spread over the GPU
(a batch of one fills every SM). A threshold is a 16-way search of the values' keys (the
logits' own, or the probabilities'), a launch a step: 8 for fp32 values, 5 for fp16, 4 for
bf16 (top-k's counts by a histogram a step). Top-k when drawing (``top_k_first``) takes no
search: a pass finds a lower bound of each row's k-th largest value (the k-th largest of
the largest values of 2k groups or more), a second lists the values at or above it (the
top-k and a few more) where they fit (2k, at least 256; 1024 for a top_k a row), and
top-k, top-p and the draw run over the list, one program a row: top-k + top-p from logits
is 4 launches, two of them a pass over the rows. A row whose candidates do not fit (ties at
the k-th value): with a top_k number its list program draws from the whole row; with a
top_k a row (one may keep everything), the searches and whole-row launches follow for such
rows (the row's softmax stats, top-k's and top-p's searches, the draw). Top-p alone from
fp32 probabilities: 8 search launches and the draw (the kept mass is the search's last
weighing). A repeated call (a serving loop's) replays its launches from a launch plan.
torch.compile does not trace the launches: the registered forms (renorm, mask,
``sampling_from_uniform``) compile whole as their registered op, and a drawing form with
torch's default generator as ``torch.rand`` and ``sampling_from_uniform`` (one that takes a
generator or seed / offset, or checks for NaN, is a graph break). No op here records a
gradient.
"""

from __future__ import annotations

import torch

from aiter_lite.ops.triton._triton_kernels.sampling import (_bound_kernel, _clear_kernel, _compact_kernel,
                                                            _finish_kernel, _list_kernel, _mass_kernel, _search_kernel,
                                                            _stats_kernel)
from aiter_lite import envs
from aiter_lite.utils.checks import (check_bool, check_choice, check_int, check_real, check_same_device,
                                     check_triton_device, host_check_wanted)
from aiter_lite.spec.device import device_profile
from aiter_lite.utils.fast_launch import launch, planned
from aiter_lite.utils.launch import cdiv, next_power_of_2
from aiter_lite.utils.registry import public_op

__all__ = ["sampling_from_probs", "sampling_from_logits", "top_p_sampling_from_probs", "top_k_sampling_from_probs",
           "min_p_sampling_from_probs", "top_k_top_p_sampling_from_logits", "top_k_top_p_sampling_from_probs",
           "top_k_renorm_probs", "top_p_renorm_probs", "top_k_mask_logits", "sampling_from_uniform"]

_FLOATS = (torch.float32, torch.float16, torch.bfloat16)
_BLOCK = 1024  # a chunk of the one-value-a-column passes (stats, mass, writes); a slice is a multiple of it
_BLOCK_TEST = 512  # a search's chunk, its keys tested against the interval at once
_SEARCH_WARPS = 4  # the H200's best (8 with 1024-value chunks was slower); every target builds clean under it
_BLOCK_SEARCH = 128  # the part of a chunk a search weighs at once: x _WAYS candidates' sums in registers
_BLOCK_SCAN = 512  # the draw's running-sum chunk
_BLOCK_WHOLE = 512  # the list program's whole-row path: its chunk
# A threshold search weighs _WAYS candidate keys a launch (4 bits each): 8 launches for fp32
# keys, fewer where the values' keys leave low bits alone (bf16: 16 bits, fp16: 19).
_WAYS = 16
_STEPS = {torch.float32: 8, torch.float16: 5, torch.bfloat16: 4}
# Top-k's survivors (k + ties, with mass) listed a row where they fit, top-p and the draw over the list:
_LIST_K = 1024  # a top_k number up to it lists (a list of 2k, at least _LIST_MIN)
_LIST_MIN = 256
_LIST_ROWS = 1024  # the list of a top_k a row
_LIST_ROWS_INTERPRETER = 64  # the interpreter's (its sort of a list is slow; the tests' rows of ties overflow it)
# Top-k's bound (``_bound_kernel``): the k-th largest of the largest values of G groups of a row
_GROUPS_MIN, _GROUPS_MAX, _GROUPS_ROWS = 256, 2048, 512
_BLOCK_CLEAR = 1024
# The bound's and the candidates' passes: a step's values in bytes, and warps (H200: bigger
# steps or 8 warps 1.1-2x slower; 2 warps 1.1-1.7x slower)
_PASS_BYTES, _PASS_WARPS = 2048, 4
_BOUND_BYTES, _BOUND_WARPS = 1024, 4
_MAX_PARTS = 256  # slices a row at most
_PROGRAMS_PER_SM = 4  # rows x slices aimed at (a program's passes wait on their loads: more slices, more
_MANY_ROWS = 64        # in flight); from 64 rows twice as many (H200: 5-10% faster there, 1-6% slower at 16)


def _sm_count(profile) -> int:
    return 8 if profile.interpreter else profile.sms  # the interpreter: a few slices a row, the tests cross them


def _list_cap(k_t, k_v, profile) -> int:
    """The list a row's top-k candidates go to (0: none): 2k, at least 256; a top_k a row,
    1024 (the interpreter: 32 and 64, its sort of a list being slow, and the tests' rows
    short: their rows of ties then overflow the list, as long rows do on a GPU)."""
    if k_t is not None:
        return min(_LIST_ROWS, _LIST_ROWS_INTERPRETER) if profile.interpreter else _LIST_ROWS
    least = 32 if profile.interpreter else _LIST_MIN
    return max(least, next_power_of_2(2 * k_v)) if k_v <= _LIST_K else 0


def _groups(k_t, k_v) -> int:
    """The top-k bound's groups a row (``_bound_kernel``): twice k's power of 2, at least 256 (a
    row's candidates then about 1.05-1.4 k on random rows); 512 for a top_k a row (such rows up
    to k of about 400 fit the list of 1024; larger ones take the searches)."""
    if k_t is not None:
        return _GROUPS_ROWS
    return min(_GROUPS_MAX, max(_GROUPS_MIN, 2 * next_power_of_2(max(k_v, 1))))


@planned
def _launch_all(x, out, idx, u, k_t, p_t, m_t, t_t, k_v, p_v, m_v, t_v, mode, from_logits, top_k, top_p, min_p,
                joint, temp):
    """The launches of one call (see the kernels' module), over work buffers of its own. Planned:
    a serving loop's repeated call replays them directly."""
    n_out = out.shape[0]
    n = x.shape[1]
    block = min(_BLOCK, next_power_of_2(n))
    profile = device_profile(x.device)
    per_sm = _PROGRAMS_PER_SM if n_out < _MANY_ROWS else 2 * _PROGRAMS_PER_SM
    parts = max(1, min(cdiv(per_sm * _sm_count(profile), n_out), cdiv(n, block), _MAX_PARTS))
    slice_len = cdiv(cdiv(n, parts), block) * block
    parts = cdiv(n, slice_len)
    pb = next_power_of_2(parts)
    steps = _STEPS[x.dtype]
    sums = from_logits and mode == "sample"  # the softmax's max and sum
    cap = _list_cap(k_t, k_v, profile) if mode == "sample" and top_k and not joint else 0
    # _list_kernel draws every row whose top-k filters (a row whose candidates overflow its list, by
    # one program over it); with a top_k a row, the other rows (a k that keeps everything is common)
    # take the whole-row launches, top-k filtering none of them
    whole = cap > 0 and k_t is None
    f32 = torch.empty(parts * n_out * (4 + 2 * steps * _WAYS + 1), dtype=torch.float32, device=x.device)
    bounds = torch.empty(2 * steps * n_out * 2, dtype=torch.int64, device=x.device)
    stats, kpart, ppart, mass = f32.split([parts * n_out * 4, steps * n_out * parts * _WAYS,
                                           steps * n_out * parts * _WAYS, n_out * parts])
    kbounds, pbounds = bounds.split(steps * n_out * 2)
    grid = (n_out, parts)
    flags = dict(HAS_TEMP=temp, T_TENSOR=t_t is not None, HAS_INDICES=idx is not None)
    keyed = dict(WAYS=_WAYS, STEPS=steps, PB=pb)
    if cap:
        # top-k's candidates listed first: the bound's groups (each row's largest keys) and the count, cleared
        groups = _groups(k_t, k_v)
        pass_block = min(_PASS_BYTES // x.element_size(), next_power_of_2(slice_len))
        work = torch.empty(n_out * (groups + 1 + cap), dtype=torch.int32, device=x.device)
        gmax, cnt, listed = work.split([n_out * groups, n_out, n_out * cap])
        cleared = n_out * (groups + 1)
        launch(_clear_kernel, (cdiv(cleared, _BLOCK_CLEAR),), work, cleared, BLOCK=_BLOCK_CLEAR,
               num_warps=4)
        launch(_bound_kernel, grid, x, gmax, idx, t_t, x.stride(0), n, slice_len, t_v, FROM_LOGITS=from_logits,
               **flags, G=groups, R=max(1, min(_BOUND_BYTES // x.element_size(), pass_block) // groups),
               num_warps=_BOUND_WARPS)
        launch(_compact_kernel, grid, x, gmax, cnt, listed, idx, k_t, t_t, x.stride(0), n, slice_len, k_v,
               t_v, FROM_LOGITS=from_logits, K_TENSOR=k_t is not None, **flags, G=groups, CAP=cap,
               BLOCK=pass_block, KEY_BITS=4 * steps, num_warps=_PASS_WARPS)
    if (sums or min_p or mode == "mask") and not whole:
        launch(_stats_kernel, grid, x, stats, idx, t_t, k_t, x.stride(0), n, slice_len, parts, t_v, k_v,
               SUMS=sums, **flags, LIST=cap > 0, K_TENSOR=k_t is not None, BLOCK=block,
               num_warps=4)
    for count, on, goal, goal_t in ((True, top_k, k_v, k_t), (False, top_p, p_v, p_t)):
        if not on or whole or (count and cap):
            continue
        # top-p's floor: the top-k search (top-k's own search has none: top-p's buffers, unread, so that
        # no kernel is handed the buffer it writes a second time)
        part, bnd, fpart, fbnd = (kpart, kbounds, ppart, pbounds) if count else (ppart, pbounds, kpart, kbounds)
        fgoal_t = None if count else k_t
        for step in range(steps):
            launch(_search_kernel, grid, x, stats, part, bnd, fpart, fbnd, idx, t_t, goal_t, fgoal_t,
                   x.stride(0), n, slice_len, parts, step, goal, k_v, t_v, COUNT=count,
                   FLOOR=not count and top_k and not joint and not cap, LIST=cap > 0, FROM_LOGITS=from_logits,
                   GOAL_TENSOR=goal_t is not None, FGOAL_TENSOR=fgoal_t is not None, **flags, **keyed,
                   BLOCK=min(_BLOCK_TEST, block), SB=min(_BLOCK_SEARCH, block), num_warps=_SEARCH_WARPS)
    common = dict(FROM_LOGITS=from_logits, TOP_K=top_k and not cap, TOP_P=top_p, MIN_P=min_p,
                  K_TENSOR=k_t is not None, P_TENSOR=p_t is not None, MINP_TENSOR=m_t is not None, **flags,
                  LIST=cap > 0, **keyed, BLOCK=block)
    # top-p's search weighed the kept mass already where its threshold is the last (not joint, no min-p)
    searched = top_p and not min_p and not (top_k and joint)
    if mode != "mask" and not searched and not whole:
        launch(_mass_kernel, grid, x, stats, kpart, kbounds, ppart, pbounds, mass, idx, k_t, p_t, m_t, t_t,
               x.stride(0), n, slice_len, parts, k_v, p_v, m_v, t_v, **common, num_warps=4)
    if not whole:
        launch(_finish_kernel, grid, x, out, stats, kpart, kbounds, ppart, pbounds, mass, idx, u, k_t,
               p_t, m_t, t_t, x.stride(0), 1 if mode == "sample" else n, n, slice_len, parts, k_v, p_v, m_v, t_v,
               MODE=mode, SEARCHED_MASS=searched, **common, BLOCK_S=min(_BLOCK_SCAN, block), num_warps=4)
    if cap:
        launch(_list_kernel, (n_out,), x, out, cnt, listed, idx, u, k_t, p_t, t_t, x.stride(0), n, k_v, p_v,
               t_v, FROM_LOGITS=from_logits, TOP_P=top_p, K_TENSOR=k_t is not None, P_TENSOR=p_t is not None,
               **flags, WAYS=_WAYS, STEPS=steps, CAP=cap,
               # the whole-row path's chunks: halved beside a top_k a row's list of 1024 (registers)
               BLOCK=block if whole else min(_BLOCK_WHOLE, block), SB=min(_BLOCK_SEARCH // (1 if whole else 2), block),
               KEY_BITS=4 * steps,
               num_warps=max(8 if whole else 4, min(16, cap // (4 * profile.warp_size))))  # 4 entries a lane


# torch.compile does not trace the launches: Inductor, handed the searches' chain of kernels that
# write and read one work buffer's views, returned other thresholds than the launches make. Traced,
# a call is a graph break (fullgraph: an error); the registered forms compile whole as their
# registered op, one opaque node (_opaque, _drawn_opaque).
_launch_all = torch.compiler.disable(_launch_all)


def _one_a_row(value, rows: int, integer: bool, device) -> torch.Tensor:
    """A number as the registered ops' schemas take it: one a row (int32 / fp32)."""
    return torch.full((rows,), value, dtype=torch.int32 if integer else torch.float32, device=device)


def _opaque(op: str, x: torch.Tensor, param, integer: bool) -> torch.Tensor:
    """``op`` as its registered op (under torch.compile): a number as one a row, as the schema
    takes it. (``import aiter_lite`` registered the ops before this module ran a call.)"""
    if not isinstance(param, torch.Tensor):
        rows = x.shape[0] if isinstance(x, torch.Tensor) and x.dim() else 1
        param = _one_a_row(param, rows, integer, getattr(x, "device", None))
    return getattr(torch.ops.aiter_lite, op)(x, param)


def _rows(op: str, name: str, x) -> torch.Tensor:
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{op}: {name} must be a torch.Tensor, got {type(x).__name__}")
    if x.dtype not in _FLOATS:
        raise TypeError(f"{op}: {name} must be float32, float16 or bfloat16, got {x.dtype}")
    if x.dim() != 2:
        raise ValueError(f"{op}: {name} must be 2-D (batch, vocab), got shape {tuple(x.shape)}")
    check_triton_device(op, name, x)
    if x.requires_grad and torch.is_grad_enabled():
        raise ValueError(f"{op}: {name} requires grad, but sampling records no gradient; pass {name}.detach()")
    if x.shape[1] and x.stride(1) != 1:
        x = x.contiguous()
    return x


def _param(op: str, name: str, value, rows: int, ref: torch.Tensor, integer: bool):
    """A per-row tensor (int32 / int64 / fp32, (rows,)) or a Python number: (tensor or None, number)."""
    if isinstance(value, torch.Tensor):
        if value.dim() > 1 or value.numel() != rows:
            raise ValueError(f"{op}: {name} must be a number or a tensor of one value a row ({rows}), got shape "
                             f"{tuple(value.shape)}")
        if integer and (value.dtype.is_floating_point or value.dtype == torch.bool):
            raise TypeError(f"{op}: {name} must be an integer tensor, got {value.dtype}")
        if not integer and not value.dtype.is_floating_point:
            raise TypeError(f"{op}: {name} must be a floating-point tensor, got {value.dtype}")
        check_same_device(op, name, value, "the probabilities", ref)
        # one a row, contiguous (the kernels read row i's at i); int32, int64 and fp32 read as they are
        keep = (torch.int32, torch.int64) if integer else (torch.float32,)
        value = value.reshape(-1)
        return (value if value.dtype in keep else value.to(torch.int32 if integer else torch.float32)).contiguous(), 0
    if integer:
        return None, check_int(op, name, value)
    v = check_real(op, name, value)
    if v != v:
        raise ValueError(f"{op}: {name} must not be NaN")
    return None, v


def _temperature(op: str, temperature, rows: int, ref: torch.Tensor):
    """``_param`` of a temperature: a number must be >= 0."""
    t_t, t_v = _param(op, "temperature", temperature, rows, ref, False)
    if t_t is None and t_v < 0:
        raise ValueError(f"{op}: temperature must be >= 0 (below 1e-5: the row's argmax), got {temperature}")
    return t_t, t_v


def _indices(op: str, indices, rows: int, ref: torch.Tensor) -> tuple[torch.Tensor | None, int]:
    if indices is None:
        return None, rows
    if not isinstance(indices, torch.Tensor) or indices.dtype not in (torch.int32, torch.int64) or indices.dim() != 1:
        raise TypeError(f"{op}: indices must be a 1-D int32 / int64 tensor or None, got "
                        f"{getattr(indices, 'dtype', type(indices).__name__)}")
    check_same_device(op, "indices", indices, "the probabilities", ref)
    if host_check_wanted(indices, switch=envs.sampling_check_indices) and indices.numel():
        lo, hi = int(indices.min()), int(indices.max())
        if lo < 0 or hi >= rows:
            raise ValueError(f"{op}: indices must be rows of the batch, in [0, {rows}), got {lo if lo < 0 else hi}")
    return indices.contiguous(), indices.shape[0]


def _uniform_arg(op: str, uniform, n: int, ref: torch.Tensor) -> torch.Tensor:
    """The caller's draws: a floating-point tensor of one value an output row (fp32, contiguous)."""
    if not isinstance(uniform, torch.Tensor):
        raise TypeError(f"{op}: uniform must be a torch.Tensor, got {type(uniform).__name__}")
    if not uniform.dtype.is_floating_point:
        raise TypeError(f"{op}: uniform must be a floating-point tensor, got {uniform.dtype}")
    if uniform.dim() != 1 or uniform.shape[0] != n:
        raise ValueError(f"{op}: uniform must be 1-D with one value an output row ({n}), got shape "
                         f"{tuple(uniform.shape)}")
    check_same_device(op, "uniform", uniform, "the probabilities", ref)
    return uniform.to(torch.float32).contiguous()


def _uniform(op: str, n: int, device, generator, seed, offset) -> torch.Tensor:
    """One draw in [0, 1) a row: from ``generator``, a generator seeded by (seed, offset), or
    the device's default."""
    if seed is not None or offset is not None:
        if generator is not None:
            raise ValueError(f"{op}: pass a generator or seed / offset, not both")
        s = check_int(op, "seed", 0 if seed is None else seed, 0)
        o = check_int(op, "offset", 0 if offset is None else offset, 0)
        generator = torch.Generator(device=device).manual_seed((s * 1_000_003 + o) % (1 << 63))
    elif generator is not None and not isinstance(generator, torch.Generator):
        raise TypeError(f"{op}: generator must be a torch.Generator or None, got {type(generator).__name__}")
    return torch.rand(n, device=device, dtype=torch.float32, generator=generator)


def _run(op: str, x: torch.Tensor, mode: str, *, from_logits: bool, indices=None, top_k=None, top_p=None,
         min_p=None, temperature=None, joint: bool = False, draw: tuple | None = None, uniform=None,
         out_dtype=None) -> torch.Tensor:
    """``x``'s rows thresholded and sampled ("sample": one uniform number an output row, from
    ``draw`` = (generator, seed, offset), or without a draw the caller's ``uniform``),
    renormalized or masked."""
    rows, n = x.shape
    idx, n_out = _indices(op, indices, rows, x)
    k_t, k_v = _param(op, "top_k", top_k, n_out, x, True) if top_k is not None else (None, 0)
    p_t, p_v = _param(op, "top_p", top_p, n_out, x, False) if top_p is not None else (None, 1.0)
    m_t, m_v = _param(op, "min_p", min_p, n_out, x, False) if min_p is not None else (None, 0.0)
    t_t, t_v = _temperature(op, temperature, n_out, x) if temperature is not None else (None, 1.0)
    if mode != "sample":
        u = None
    elif draw is None:  # the caller's numbers
        u = _uniform_arg(op, uniform, n_out, x)
    else:
        u = _uniform(op, n_out, x.device, *draw)
    if mode == "sample":
        out = torch.empty(n_out, dtype=torch.int32, device=x.device)
    else:
        out = torch.empty((n_out, n), dtype=out_dtype, device=x.device)
    if n_out == 0:
        return out
    if n == 0:
        return out.fill_(-1) if mode == "sample" else out
    # a number that keeps every token filters nothing: its search is not launched
    top_k_on = top_k is not None and (k_t is not None or 0 < k_v < n)
    top_p_on = top_p is not None and (p_t is not None or p_v < 1.0)
    _launch_all(x, out, idx, u, k_t, p_t, m_t, t_t, k_v, p_v, m_v, t_v, mode, from_logits, top_k_on, top_p_on,
                min_p is not None, joint, temperature is not None)
    return out


def _sample(op: str, x, from_logits: bool, indices, deterministic, generator, check_nan, seed, offset,
            **filters) -> torch.Tensor:
    check_bool(op, "deterministic", deterministic)  # accepted: every draw here is deterministic
    if torch.compiler.is_compiling() and generator is None and seed is None and offset is None and not check_nan:
        return _drawn_opaque(op, x, from_logits, indices, **filters)
    x = _rows(op, "logits" if from_logits else "probs", x)
    if check_bool(op, "check_nan", check_nan) and bool(torch.isnan(x).any()):
        raise ValueError(f"{op}: {'logits' if from_logits else 'probs'} hold NaN")
    return _run(op, x, "sample", from_logits=from_logits, indices=indices, draw=(generator, seed, offset), **filters)


def _drawn_opaque(op: str, x, from_logits: bool, indices, top_k=None, top_p=None, min_p=None, temperature=None,
                  joint: bool = False) -> torch.Tensor:
    """A drawing form under torch.compile with torch's default generator: the draws taken by
    ``torch.rand`` in the graph, the rest the registered ``sampling_from_uniform`` (one opaque
    node: no graph break). A number is checked as the eager call checks it and becomes one a
    row, as the schema takes it, or None where it filters nothing (as the eager call, which
    launches no search for it)."""
    rows, n = x.shape if isinstance(x, torch.Tensor) and x.dim() == 2 else (0, 0)
    n_out = indices.shape[0] if isinstance(indices, torch.Tensor) and indices.dim() == 1 else rows
    device = getattr(x, "device", None)

    def per_row(name, value, integer, keeps_all):
        if value is None or isinstance(value, torch.Tensor):
            return value
        _t, v = (_temperature(op, value, n_out, x) if name == "temperature" else
                 _param(op, name, value, n_out, x, integer))
        return None if keeps_all(v) else _one_a_row(v, n_out, integer, device)

    u = torch.rand(n_out, device=device, dtype=torch.float32)
    return torch.ops.aiter_lite.sampling_from_uniform(
        x, u, per_row("top_k", top_k, True, lambda k: k <= 0 or k >= n),
        per_row("top_p", top_p, False, lambda p: p >= 1), per_row("min_p", min_p, False, lambda m: m <= 0),
        per_row("temperature", temperature, False, lambda t: False), indices, from_logits, joint)


def sampling_from_probs(probs: torch.Tensor, indices: torch.Tensor | None = None, deterministic: bool = True,
                        generator: torch.Generator | None = None, check_nan: bool = False, seed: int | None = None,
                        offset: int | None = None) -> torch.Tensor:
    """A token a row drawn from ``probs`` (batch, vocab), int32 (batch,)."""
    return _sample("sampling_from_probs", probs, False, indices, deterministic, generator, check_nan,
                   seed, offset)


def sampling_from_logits(logits: torch.Tensor, indices: torch.Tensor | None = None, deterministic: bool = True,
                         generator: torch.Generator | None = None, check_nan: bool = False, seed: int | None = None,
                         offset: int | None = None, *, temperature=None) -> torch.Tensor:
    """A token a row drawn from ``softmax(logits / temperature)``, int32 (batch,);
    ``temperature`` (this project's keyword: a number or one a row; below 1e-5 the row's
    argmax, as vLLM's sampler)."""
    return _sample("sampling_from_logits", logits, True, indices, deterministic, generator, check_nan,
                   seed, offset, temperature=temperature)


def top_p_sampling_from_probs(probs: torch.Tensor, top_p, indices: torch.Tensor | None = None,
                              deterministic: bool = True, generator: torch.Generator | None = None,
                              check_nan: bool = False, seed: int | None = None,
                              offset: int | None = None) -> torch.Tensor:
    """Nucleus sampling: a token drawn from the fewest largest probabilities whose mass
    reaches ``top_p``, renormalized."""
    return _sample("top_p_sampling_from_probs", probs, False, indices, deterministic, generator, check_nan,
                   seed, offset, top_p=top_p)


def top_k_sampling_from_probs(probs: torch.Tensor, top_k, indices: torch.Tensor | None = None,
                              deterministic: bool = True, generator: torch.Generator | None = None,
                              check_nan: bool = False, seed: int | None = None,
                              offset: int | None = None) -> torch.Tensor:
    """A token drawn from the ``top_k`` largest probabilities (ties kept), renormalized."""
    return _sample("top_k_sampling_from_probs", probs, False, indices, deterministic, generator, check_nan,
                   seed, offset, top_k=top_k)


def min_p_sampling_from_probs(probs: torch.Tensor, min_p, indices: torch.Tensor | None = None,
                              deterministic: bool = True, generator: torch.Generator | None = None,
                              check_nan: bool = False, seed: int | None = None,
                              offset: int | None = None) -> torch.Tensor:
    """A token drawn from the probabilities of at least ``min_p`` times the row's largest."""
    return _sample("min_p_sampling_from_probs", probs, False, indices, deterministic, generator, check_nan,
                   seed, offset, min_p=min_p)


def _order(op: str, filter_apply_order) -> bool:
    return check_choice(op, "filter_apply_order", filter_apply_order, ("top_k_first", "joint")) == "joint"


def top_k_top_p_sampling_from_logits(logits: torch.Tensor, top_k, top_p, indices: torch.Tensor | None = None,
                                     filter_apply_order: str = "top_k_first", deterministic: bool = True,
                                     generator: torch.Generator | None = None, check_nan: bool = False,
                                     seed: int | None = None, offset: int | None = None, *,
                                     temperature=None) -> torch.Tensor:
    """Top-k, then top-p over what it kept (``"joint"``: both over the whole row), of
    ``softmax(logits / temperature)`` (``temperature`` as in :func:`sampling_from_logits`);
    a token drawn from the rest, renormalized."""
    op = "top_k_top_p_sampling_from_logits"
    return _sample(op, logits, True, indices, deterministic, generator, check_nan,
                   seed, offset, top_k=top_k, top_p=top_p,
                   temperature=temperature, joint=_order(op, filter_apply_order))


def top_k_top_p_sampling_from_probs(probs: torch.Tensor, top_k, top_p, indices: torch.Tensor | None = None,
                                    filter_apply_order: str = "top_k_first", deterministic: bool = True,
                                    generator: torch.Generator | None = None, check_nan: bool = False,
                                    seed: int | None = None, offset: int | None = None) -> torch.Tensor:
    """Top-k, then top-p over what it kept (``"joint"``: both over the whole row); a token
    drawn from the rest, renormalized."""
    op = "top_k_top_p_sampling_from_probs"
    return _sample(op, probs, False, indices, deterministic, generator, check_nan,
                   seed, offset, top_k=top_k, top_p=top_p,
                   joint=_order(op, filter_apply_order))


@public_op(no_grad="a sampling op")
def top_k_renorm_probs(probs: torch.Tensor, top_k: int | torch.Tensor) -> torch.Tensor:
    """The ``top_k`` largest probabilities of each row (ties kept) over their sum, 0
    elsewhere: fp32 (batch, vocab)."""
    op = "top_k_renorm_probs"
    if torch.compiler.is_compiling():
        return _opaque(op, probs, top_k, True)
    return _run(op, _rows(op, "probs", probs), "renorm", from_logits=False, top_k=top_k, out_dtype=torch.float32)


@public_op(no_grad="a sampling op")
def top_p_renorm_probs(probs: torch.Tensor, top_p: float | torch.Tensor) -> torch.Tensor:
    """The fewest largest probabilities (whole tie groups) whose mass reaches ``top_p``,
    over their sum, 0 elsewhere: fp32 (batch, vocab)."""
    op = "top_p_renorm_probs"
    if torch.compiler.is_compiling():
        return _opaque(op, probs, top_p, False)
    return _run(op, _rows(op, "probs", probs), "renorm", from_logits=False, top_p=top_p, out_dtype=torch.float32)


@public_op(no_grad="a sampling op")
def top_k_mask_logits(logits: torch.Tensor, top_k: int | torch.Tensor) -> torch.Tensor:
    """The logits of each row's ``top_k`` largest (ties kept), -inf elsewhere; logits' dtype."""
    op = "top_k_mask_logits"
    if torch.compiler.is_compiling():
        return _opaque(op, logits, top_k, True)
    x = _rows(op, "logits", logits)
    return _run(op, x, "mask", from_logits=True, top_k=top_k, out_dtype=x.dtype)


@public_op(no_grad="a sampling op")
def sampling_from_uniform(x: torch.Tensor, uniform: torch.Tensor, top_k: torch.Tensor | None = None,
                          top_p: torch.Tensor | None = None, min_p: torch.Tensor | None = None,
                          temperature: torch.Tensor | None = None, indices: torch.Tensor | None = None,
                          from_logits: bool = False, joint: bool = False) -> torch.Tensor:
    """One token a row drawn with the caller's uniform numbers: the drawing forms' registered
    op (``torch.ops.aiter_lite.sampling_from_uniform``; under torch.compile a drawing form
    with torch's default generator draws its numbers in the graph and calls it), and a form
    for callers that hold their own draws. int32 tokens (n,), -1 as the drawing forms give it.

    ``x``: (batch, vocab) probabilities, or logits with ``from_logits``; ``uniform``: one value
    an output row, in [0, 1) (a value at or past 1 draws the last kept token, below 0 the
    first); ``top_k`` (int), ``top_p``, ``min_p``, ``temperature`` (float; logits only):
    one value an output row, or None for no filter; ``indices``: output i draws from row
    ``indices[i]``; ``joint``: top-k and top-p both over the whole row (else top-p over what
    top-k kept). The filters and the draw are the drawing forms' (module doc)."""
    op = "sampling_from_uniform"
    if torch.compiler.is_compiling():  # one opaque node, as the other sampling ops
        return torch.ops.aiter_lite.sampling_from_uniform(x, uniform, top_k, top_p, min_p, temperature, indices,
                                                          from_logits, joint)
    from_logits = check_bool(op, "from_logits", from_logits)
    joint = check_bool(op, "joint", joint)
    for name, value in (("top_k", top_k), ("top_p", top_p), ("min_p", min_p), ("temperature", temperature)):
        if value is not None and not isinstance(value, torch.Tensor):
            raise TypeError(f"{op}: {name} must be a tensor of one value a row or None, got {type(value).__name__}")
    if temperature is not None and not from_logits:
        raise ValueError(f"{op}: temperature applies to logits (from_logits=True), not to probabilities")
    x = _rows(op, "x", x)
    return _run(op, x, "sample", from_logits=from_logits, indices=indices, top_k=top_k, top_p=top_p, min_p=min_p,
                temperature=temperature, joint=joint, uniform=uniform)
