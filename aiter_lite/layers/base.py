"""The backend contract every layer follows.

A layer has two implementations of one signature: ``forward_native`` (the plain-PyTorch
ops of ``aiter_lite.ops.native``, fp32 math) and ``forward_triton`` (the Triton ops of
``aiter_lite.ops.triton``). ``forward`` runs the one picked when the layer is built: the
layer's ``backend`` argument, else :func:`aiter_lite.envs.backend` of its op family
(AITER_<FAMILY>_BACKEND, then AITER_BACKEND). The pick is the read-only string attribute
``backend`` ("triton" or "native"), shown in the repr.

``forward`` branches on that string: no op module or bound method is stored on the
instance, so a layer pickles, deep-copies and loads a state dict like any nn.Module, and
torch.compile(fullgraph=True) folds the branch into a constant.
"""

from __future__ import annotations

from torch import nn

from aiter_lite import envs


class BackendLayer(nn.Module):
    """An nn.Module whose ``forward`` runs ``forward_triton`` or ``forward_native``, as
    :attr:`backend` says. Subclasses set :attr:`family` (an ``envs.OP_FAMILIES`` name)."""

    family: str = ""

    def __init__(self, backend: str | None = None) -> None:
        super().__init__()
        self._backend = envs.layer_backend(type(self).__name__, self.family, backend)

    @property
    def backend(self) -> str:
        """The implementation ``forward`` runs, "triton" or "native", fixed when the layer is built."""
        return self._backend
