"""The forward launch-config picker: every choice it makes is launchable and covers the row."""

import pytest

from aiter_lite.ops.triton.normalization import norm as nm
from aiter_lite.spec.device import H100, PROFILES
from aiter_lite.utils.launch import cdiv

WIDTHS = [1, 64, 127, 512, 769, 4096, 5120, 7168, 8192, 12288, 16384, 24576, 32768, 40000, 65536, 65537,
          131072, 262144]
ROWS = [1, 16, 131, 132, 1000, 4096, 32768]


@pytest.mark.parametrize("profile", PROFILES.values(), ids=PROFILES)
@pytest.mark.parametrize("is_rms", [True, False])
@pytest.mark.parametrize("residual", [False, True])
def test_forward_configs_cover_the_row(is_rms, residual, profile):
    warp = profile.warp_size
    for n in WIDTHS:
        for m in ROWS:
            c = nm.norm_launch_config(m, n, profile, residual, is_rms)
            where = f"{profile.name} {m}x{n} residual={residual} rms={is_rms}: {c}"
            assert c.BLOCK_N & (c.BLOCK_N - 1) == 0, where
            assert 1 <= c.num_warps and c.num_warps * warp <= 1024, where
            if c.SPLIT:  # every segment of a row resident at once
                assert cdiv(n, c.BLOCK_N) <= profile.sms, where
            if c.LOOPED or c.SPLIT:
                assert c.BLOCK_M == 1, where
            else:
                assert c.BLOCK_N >= n, where
            if c.STATIC:
                assert c.LOOPED and cdiv(n, c.BLOCK_N) <= 32, where
                # Narrowed to a chunk that divides the row whenever one of at least 2048 does.
                divisors = [b for b in (2048, 4096, 8192, 16384) if n % b == 0]
                assert n % c.BLOCK_N == 0 or not divisors, where
                assert c.BLOCK_N // (c.num_warps * warp) >= 8 or c.num_warps == 4, where


def test_static_chunks_follow_the_row():
    # LayerNorm + residual at 12288: 4096-wide chunks with 16 warps, not a partial 8192-wide one.
    c = nm.norm_launch_config(4096, 12288, H100, True, False)
    assert (c.STATIC, c.BLOCK_N, c.num_warps) == (True, 4096, 16)
    # 16384 divides into the table's 8192-wide chunks, kept as they are.
    c = nm.norm_launch_config(4096, 16384, H100, True, False)
    assert (c.STATIC, c.BLOCK_N, c.num_warps) == (True, 8192, 32)
    # Fewer rows than SMs: a row in registers (decode), not a loop.
    assert not nm.norm_launch_config(16, 16384, H100, True, False).LOOPED
