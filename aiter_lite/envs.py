"""Every AITER_* environment variable, read in one place.

Each variable is read by a function, at the moment it is needed, so tests can
monkeypatch ``os.environ``. An unknown value is a ``ValueError`` that names the
variable and the allowed values; an unset or empty variable takes its default.

| variable | values | default |
|---|---|---|
| AITER_LOG_LEVEL | DEBUG, INFO, WARNING, ERROR, CRITICAL | WARNING |
| AITER_BACKEND | triton, native, auto | auto: triton where a GPU is present, else native |
| AITER_<FAMILY>_BACKEND | triton, native, auto | AITER_BACKEND |
| AITER_ROPE_TRITON_BACKEND | 0, 1 | 0 (1 selects triton for rope) |
| AITER_ROPE_NATIVE_BACKEND | 0, 1 | 0 (1 selects native for rope) |
| AITER_ROPE_CHECK_POSITIONS | 0, 1 | 0 (1: RoPE checks positions / offsets / cu_seqlens against the table on the host) |
| AITER_KV_CACHE_CHECK_SLOTS | 0, 1 | 0 (1: the KV-cache ops check GPU slot_mapping against the cache on the host) |
| AITER_SAMPLING_CHECK_INDICES | 0, 1 | 0 (1: the sampling ops check GPU indices against the rows on the host) |
| AITER_FAST_LAUNCH | 0, 1 | 1 (0: every eager call checks its arguments and launches through Triton) |
| AITER_TEST_COMPILE | 0, 1 | 0 (1: the op tests call every public Triton op through torch.compile(fullgraph=True)) |
| AITER_INT8_ROUNDING | nearest, truncate | nearest (ties to even, as vLLM; truncate: toward zero, aiter's kernels' bits; read once) |

``<FAMILY>`` is one of :data:`OP_FAMILIES` in upper case, e.g. AITER_ACTIVATION_BACKEND.

Importing ``aiter_lite`` reads them all (:func:`validate`), so a bad value raises even where
the code path that reads it is never taken (a flag of the GPU path on a CPU run).
"""

from __future__ import annotations

import functools
import os

BACKENDS = ("triton", "native")
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")
OP_FAMILIES = (
    "activation",
    "normalization",
    "rope",
    "fusions",
    "quant",
    "softmax",
    "topk",
    "cross_entropy",
)


def _read_choice(name: str, allowed: tuple[str, ...], default: str, *, upper: bool = False) -> str:
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    value = raw.upper() if upper else raw.lower()
    if value not in allowed:
        raise ValueError(f"{name}={raw!r} is not valid; allowed values: {', '.join(allowed)}")
    return value


def _read_flag(name: str) -> bool:
    return _read_choice(name, ("0", "1"), "0") == "1"


@functools.lru_cache(maxsize=None)
def gpu_available() -> bool:
    """True when torch sees a CUDA or ROCm device (cached: device presence does not change)."""
    import torch

    return torch.cuda.is_available()


def log_level() -> str:
    """AITER_LOG_LEVEL: level of the ``aiter_lite`` logger; op calls are logged at DEBUG."""
    return _read_choice("AITER_LOG_LEVEL", LOG_LEVELS, "WARNING", upper=True)


def default_backend() -> str:
    """AITER_BACKEND: the backend of every op family that names none of its own."""
    value = _read_choice("AITER_BACKEND", BACKENDS + ("auto",), "auto")
    if value == "auto":
        return "triton" if gpu_available() else "native"
    return value


def rope_backend_flags() -> str | None:
    """aiter's AITER_ROPE_TRITON_BACKEND / AITER_ROPE_NATIVE_BACKEND (0/1); None when neither is 1."""
    triton_on = _read_flag("AITER_ROPE_TRITON_BACKEND")
    native_on = _read_flag("AITER_ROPE_NATIVE_BACKEND")
    if triton_on and native_on:
        raise ValueError(
            "AITER_ROPE_TRITON_BACKEND=1 and AITER_ROPE_NATIVE_BACKEND=1 are both set; set at most one of them to 1"
        )
    if triton_on:
        return "triton"
    if native_on:
        return "native"
    return None


def rope_check_positions() -> bool:
    """AITER_ROPE_CHECK_POSITIONS=1: the Triton RoPE ops check GPU positions, offsets and
    cu_seqlens against the table's rows before launching (a ValueError instead of NaN
    rows; the check waits for the GPU). Indices on the CPU are always checked."""
    return _read_flag("AITER_ROPE_CHECK_POSITIONS")


def kv_cache_check_slots() -> bool:
    """AITER_KV_CACHE_CHECK_SLOTS=1: the Triton KV-cache ops check a GPU slot_mapping against
    the cache's slots before launching (a ValueError for a slot past the cache, instead of
    the kernel skipping it; the check waits for the GPU). A CPU slot_mapping is always checked."""
    return _read_flag("AITER_KV_CACHE_CHECK_SLOTS")


def sampling_check_indices() -> bool:
    """AITER_SAMPLING_CHECK_INDICES=1: the Triton sampling ops check GPU ``indices`` against
    the rows before launching (a ValueError for a row past the batch, instead of a read past
    it; the check waits for the GPU). Indices on the CPU are always checked."""
    return _read_flag("AITER_SAMPLING_CHECK_INDICES")


def cross_entropy_check_targets() -> bool:
    """AITER_CROSS_ENTROPY_CHECK_TARGETS=1: cross_entropy and fused_linear_cross_entropy check
    GPU targets against the vocabulary before launching (a ValueError instead of a NaN loss
    row; the check waits for the GPU). Targets on the CPU are always checked."""
    return _read_flag("AITER_CROSS_ENTROPY_CHECK_TARGETS")


def fast_launch() -> bool:
    """AITER_FAST_LAUNCH (default 1): eager calls that repeat an earlier call's argument
    shapes launch from a cached plan (``aiter_lite.utils.fast_launch``); 0 turns it off.
    Read once, on the first launch."""
    return _read_choice("AITER_FAST_LAUNCH", ("0", "1"), "1") == "1"


def int8_rounding() -> str:
    """AITER_INT8_ROUNDING: how every int8 quantized output rounds, "nearest" (ties to even:
    vLLM's, torch.round's; the default) or "truncate" (toward zero: aiter's Triton kernels'
    conversion, for callers that need aiter's bits). The quant code reads it once
    (``aiter_lite.spec.quant.int8_truncates``)."""
    return _read_choice("AITER_INT8_ROUNDING", ("nearest", "truncate"), "nearest")


@functools.lru_cache(maxsize=1)
def int8_truncates() -> bool:
    """Whether int8 outputs truncate toward zero (``AITER_INT8_ROUNDING=truncate``: aiter's
    bits) rather than round to nearest, ties to even. Read once, for every op and backend
    alike (launch plans hold the rounding they were made with); ``int8_truncates.cache_clear()``
    and ``utils.fast_launch.reset()`` read it again."""
    return int8_rounding() == "truncate"


def test_compile() -> bool:
    """AITER_TEST_COMPILE=1: ``op_tests`` swaps each public Triton op for
    ``torch.compile(op, fullgraph=True)`` before the tests import them, so the op tests
    run under the compiler (inductor on a GPU, aot_eager on the CPU)."""
    return _read_flag("AITER_TEST_COMPILE")


def backend(family: str) -> str:
    """The backend ("triton" or "native") the layers use for one op family.

    AITER_<FAMILY>_BACKEND wins; for rope, aiter's 0/1 flags come next; then AITER_BACKEND.
    """
    if family not in OP_FAMILIES:
        raise ValueError(f"backend: unknown op family {family!r}; known families: {', '.join(OP_FAMILIES)}")
    value = _read_choice(f"AITER_{family.upper()}_BACKEND", BACKENDS + ("auto",), "auto")
    if value != "auto":
        return value
    if family == "rope":
        flagged = rope_backend_flags()
        if flagged is not None:
            return flagged
    return default_backend()


def layer_backend(layer: str, family: str, choice: str | None) -> str:
    """The backend a layer uses: its own ``backend`` argument (``choice``), else :func:`backend`."""
    value = choice or backend(family)
    if value not in BACKENDS:
        raise ValueError(f"{layer}: backend must be one of {BACKENDS}, got {value!r}")
    return value


def validate() -> None:
    """Read every variable above: a ``ValueError`` for the first bad value."""
    log_level()
    _read_choice("AITER_BACKEND", BACKENDS + ("auto",), "auto")
    rope_backend_flags()
    rope_check_positions()
    kv_cache_check_slots()
    sampling_check_indices()
    cross_entropy_check_targets()
    fast_launch()
    int8_rounding()
    test_compile()
    for family in OP_FAMILIES:
        _read_choice(f"AITER_{family.upper()}_BACKEND", BACKENDS + ("auto",), "auto")
