"""Rotary position embedding in plain PyTorch (fp32 math), also the "native" backend."""

from aiter_lite.ops.native.rope import rope  # noqa: F401
