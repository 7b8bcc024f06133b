"""vLLM's ``CustomOp`` base on aiter_lite: a module with ``forward_native`` (plain torch, vLLM's
reference), ``forward_cuda`` / ``forward_hip`` (this project's Triton kernels) and
``forward``, which takes the kernels' path where the inputs are on a device Triton launches
on (a GPU; the CPU under Triton's interpreter) and the native one elsewhere.

vLLM's constructor keywords (``enforce_enable``, ``compile_native``) are accepted and kept:
the kernels' path is always taken where it can run (``enforce_enable`` changes nothing), and
``compile_native`` wraps ``forward_native`` in ``torch.compile`` the first time the native
path runs, as vLLM does.
"""

from __future__ import annotations

import torch
import torch.nn as nn

from aiter_lite.utils.checks import LAUNCH_DEVICES

__all__ = ["CustomOp"]


class CustomOp(nn.Module):
    """vLLM's ``CustomOp``: subclasses define ``forward_native`` and ``forward_cuda``."""

    op_registry: dict[str, type] = {}

    def __init__(self, *, enforce_enable: bool = False, compile_native: bool = False) -> None:
        super().__init__()
        for name, value in (("enforce_enable", enforce_enable), ("compile_native", compile_native)):
            if not isinstance(value, bool):
                raise TypeError(f"{type(self).__name__}: {name} must be a bool, got {type(value).__name__}")
        self.enforce_enable = enforce_enable
        self.compile_native = compile_native
        self._native = None

    @classmethod
    def register(cls, name: str):
        """vLLM's ``@CustomOp.register(name)``: records the class under ``name``."""
        def decorator(op_cls: type) -> type:
            op_cls.name = name
            cls.op_registry[name] = op_cls
            return op_cls
        return decorator

    def forward_native(self, *args, **kwargs):
        raise NotImplementedError

    def forward_cuda(self, *args, **kwargs):
        raise NotImplementedError

    def forward_hip(self, *args, **kwargs):
        return self.forward_cuda(*args, **kwargs)

    def forward_cpu(self, *args, **kwargs):
        return self._forward_native(*args, **kwargs)

    def _forward_native(self, *args, **kwargs):
        if self.compile_native:
            if self._native is None:
                self._native = torch.compile(self.forward_native, dynamic=True)
            return self._native(*args, **kwargs)
        return self.forward_native(*args, **kwargs)

    def forward(self, *args, **kwargs):
        first = next((a for a in (*args, *kwargs.values()) if isinstance(a, torch.Tensor)), None)
        if first is None or first.device.type not in LAUNCH_DEVICES:
            return self.forward_cpu(*args, **kwargs)
        return self.forward_hip(*args, **kwargs) if torch.version.hip else self.forward_cuda(*args, **kwargs)
