"""The ``aiter_lite`` logger, levelled by AITER_LOG_LEVEL.

Wrappers guard each call log with :func:`debug_on`, a cached level check, so logging
costs nothing measurable when it is off (and nothing at all inside torch.compile's
traced code, which does not log).
"""

from __future__ import annotations

import logging

import torch

from aiter_lite import envs

LOGGER = logging.getLogger("aiter_lite")
DEBUG = logging.DEBUG


def configure() -> None:
    """(Re)read AITER_LOG_LEVEL; called once at import, and again by whoever changes it."""
    LOGGER.setLevel(envs.log_level())
    if not LOGGER.handlers:
        handler = logging.StreamHandler()
        handler.setFormatter(logging.Formatter("[aiter_lite %(levelname)s] %(message)s"))
        LOGGER.addHandler(handler)


def _describe(value) -> str:
    if isinstance(value, torch.Tensor):
        dtype = str(value.dtype).replace("torch.", "")
        return f"{dtype}{list(value.shape)} stride={list(value.stride())} {value.device}"
    return repr(value)


def debug_on() -> bool:
    """Whether op calls are logged: DEBUG enabled, and not inside torch.compile's tracing."""
    return not torch.compiler.is_compiling() and LOGGER.isEnabledFor(DEBUG)


def log_call(op: str, **args) -> None:
    """Log one op call at DEBUG: each argument's dtype, shape, strides and device."""
    LOGGER.debug("%s(%s)", op, ", ".join(f"{k}={_describe(v)}" for k, v in args.items()))


configure()
