"""Every registered op captures into a CUDA graph and replays with eager's results: no
host sync, no allocation the capture cannot hold, and replays read the inputs' current
values (a graph replayed twice on new inputs, so nothing a first replay leaves behind
changes the second)."""

from __future__ import annotations

import pytest
import torch

from op_tests.utils import ON_GPU
from op_tests.utils.registry import OPS, SIZES, assert_same_bits, clone_args, sample

pytestmark = pytest.mark.skipif(not ON_GPU, reason="CUDA graphs need a GPU")


def _refill(static: tuple, fresh: tuple) -> None:
    for a, b in zip(static, fresh):
        if isinstance(a, torch.Tensor):
            a.copy_(b)


@pytest.mark.parametrize("size", list(SIZES))
@pytest.mark.parametrize("name", sorted(OPS))
def test_capture_and_replay(name, size):
    fn, dims = OPS[name].triton, SIZES[size]
    static = sample(name, dims)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # compile and warm up off the capture, as torch.cuda.graphs asks
        fn(*clone_args(static))
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = fn(*static)
    for replay in range(2):
        fresh = sample(name, dims)
        _refill(static, fresh)
        graph.replay()
        want = fn(*fresh)
        torch.cuda.synchronize()
        assert_same_bits(out, want, f"{name} ({size}), replay {replay + 1}")
        assert_same_bits(static, fresh, f"{name} ({size}) arguments, replay {replay + 1}")
