"""Rotary position embeddings on the Triton backend (aiter's names)."""

from aiter_lite.ops.triton.rope import rope  # noqa: F401
