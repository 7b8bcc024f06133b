"""Launch configs chosen per device: the named profiles, what a config may ask of each, and
the answers a profile in use gives on meta tensors (no GPU needed). The builds themselves
are scripts/check_targets.py's (CI runs its fast form)."""

import importlib

import pytest
import torch

from aiter_lite.library import OPS
from aiter_lite.ops.triton import softmax as sm_mod
from aiter_lite.ops.triton.activation import act_launch_config
from aiter_lite.ops.triton.quant.quant import dynamic_per_tensor_launch_config, per_token_launch_config
from aiter_lite.ops.triton.rope.rope import RopeLaunchConfig
from aiter_lite.ops.triton.topk import topk_launch_config
from aiter_lite.spec.device import A100, H100, H200, INTERPRETER, MI300X, PROFILES, device_profile, use_profile
from aiter_lite.utils.launch import next_power_of_2
from op_benchmarks.utils.op_args import TINY, op_args


def test_named_profiles():
    assert (MI300X.sms, MI300X.warp_size, MI300X.max_warps, MI300X.smem_per_block) == (304, 64, 16, 65536)
    assert (H200.sms, H200.warp_size, H200.max_warps) == (132, 32, 32)
    assert MI300X.fp8_e4m3 == torch.float8_e4m3fnuz and H100.fp8_e4m3 == torch.float8_e4m3fn
    assert A100.fp8_e4m3 is None and torch.float8_e4m3fn not in A100.quant_dtypes
    assert [p.backend for p in PROFILES.values()].count("hip") == 2
    assert MI300X.gpu_target().backend == "hip" and H100.gpu_target().arch == 90


def test_resident_programs():
    # 8 warps, 64 registers a lane: 4 programs an SM on an H100 (65536 registers) and on an
    # MI300X CU (4 SIMDs x 512 VGPRs: 8 waves a SIMD, 2 a program's share)
    assert H100.resident_programs(8, 64, 0) == 4 and MI300X.resident_programs(8, 64, 0) == 4
    assert MI300X.resident_programs(16, 128, 0) == 1 and MI300X.resident_programs(16, 256, 0) == 0
    assert MI300X.resident_programs(32, 32, 0) == 0  # 2048 lanes: more than a program may have
    assert H100.resident_programs(4, 32, 200 * 1024) == 1 and MI300X.resident_programs(4, 32, 65 * 1024) == 0


@pytest.mark.parametrize("profile", PROFILES.values(), ids=PROFILES)
def test_configs_fit_each_profile(profile):
    for m in (1, 16, 4096, 32768):
        for n in (64, 4096, 7168, 16384, 65536, 262144):
            for cfg in (act_launch_config(m, n, profile), per_token_launch_config(m, n, profile),
                        dynamic_per_tensor_launch_config(m, n, profile), topk_launch_config(m, n, 50, profile),
                        sm_mod.softmax_launch_config(m, n, profile)):
                assert cfg.num_warps * profile.warp_size <= 1024, (profile.name, m, n, cfg)


def test_grids_sized_by_the_profile():
    # softmax rows of 2^17: 32 segments of 4096 split while under half the SMs
    assert sm_mod.softmax_launch_config(4, 1 << 17, MI300X).SPLIT
    assert not sm_mod.softmax_launch_config(4, 1 << 17, INTERPRETER).SPLIT
    # per-token split: a wave of rows or more (304 on an MI300X, 132 on an H100)
    assert per_token_launch_config(200, 1 << 17, H100).SPLIT and not per_token_launch_config(200, 1 << 17, MI300X).SPLIT


def test_profile_in_use():
    meta = torch.device("meta")
    assert device_profile(meta) is INTERPRETER
    with use_profile(MI300X):
        assert device_profile(meta) is MI300X and device_profile(torch.device("cpu")) is MI300X
        with use_profile(A100):
            assert device_profile(meta) is A100
        assert device_profile(meta) is MI300X
    assert device_profile(meta) is INTERPRETER


@pytest.mark.parametrize("name", ["static_per_tensor_quant_fp8_i8", "rms_norm_dynamic_per_token_quant"])
def test_a100_refuses_e4m3fn_by_name(name, monkeypatch):
    from aiter_lite.utils import checks

    monkeypatch.setattr(checks, "LAUNCH_DEVICES", checks.LAUNCH_DEVICES | {"meta"})  # as check_targets records
    args = op_args(name, TINY, "meta", torch.bfloat16, torch.float8_e4m3fn)
    with use_profile(A100), pytest.raises(ValueError, match=rf"{name}: .*float8_e4m3fn cannot be written .*"
                                                            r"torch.float8_e5m2, torch.int8; it has no e4m3 fp8 \(sm_80\)"):
        OPS[name].triton(*args)


def test_waiting_kernels_declare_what_must_be_resident():
    from aiter_lite.ops.triton._triton_kernels.normalization.norm import _norm_fwd_split_kernel
    from aiter_lite.ops.triton._triton_kernels.quant.quant import _dynamic_per_tensor_kernel, _per_token_split_kernel
    from aiter_lite.ops.triton._triton_kernels.softmax import _softmax_split_kernel
    from aiter_lite.ops.triton._triton_kernels.topk import _topk_filter_kernel

    for k in (_norm_fwd_split_kernel, _per_token_split_kernel, _softmax_split_kernel, _topk_filter_kernel):
        assert k.co_resident({"n_segs": 7, "PHASE": 0, "grid": 700}) == 7
        assert k.co_resident({"n_segs": 7, "PHASE": 1, "grid": 700}) == 1
    assert _dynamic_per_tensor_kernel.co_resident({"PHASE": 0, "grid": 300}) == 300


@pytest.mark.parametrize("profile", PROFILES.values(), ids=PROFILES)
def test_swa_write_configs_fit_each_profile(profile):
    swa = importlib.import_module("aiter_lite.ops.triton.fusions.fused_reduce_qk_norm_rope_swa_write")
    for m in (1, 16, 2048, 65536):
        for heads in (1, 3, 32, 128):
            for e in (33, 192, 576, 4160, 65600):  # padded head widths, up to a head wider than a program's lanes
                for padded in (False, True):
                    cfg = swa.swa_launch_config(m, heads, e, profile, padded)
                    assert cfg.num_warps * profile.warp_size <= 1024, (profile.name, m, heads, e, cfg)
                    assert cfg.BLOCK_H <= 8 and cfg.BLOCK_T * cfg.BLOCK_H * e <= max(4096, cfg.BLOCK_H * e), (
                        m, heads, e, padded, cfg)
    if profile.backend == "cuda":  # measured best on the H200 (the config's docstring)
        assert swa.swa_launch_config(16384, 128, 576, profile) == RopeLaunchConfig(1, 8, 2)  # DeepSeek-V3
        assert swa.swa_launch_config(16384, 64, 576, profile, True) == RopeLaunchConfig(1, 2, 1)  # 448 + 64 channels
        assert swa.swa_launch_config(16384, 8, 320, profile, True) == RopeLaunchConfig(1, 4, 1)  # 192 + 64


@pytest.mark.parametrize("profile", PROFILES.values(), ids=PROFILES)
def test_mla_configs_fit_each_profile(profile):
    from aiter_lite.ops.triton.fusions.fused_kv_cache import mla_launch_config

    for m in (1, 16, 2048, 65536):
        for heads in (1, 3, 16, 128):
            for d in (32, 576, 1024, 8192):  # the parts' padded width: up to a head wider than the tile
                cfg = mla_launch_config(m, heads, d, profile)
                assert cfg.num_warps * profile.warp_size <= 1024 and cfg.BLOCK_H <= next_power_of_2(heads), cfg
                assert cfg.BLOCK_T * cfg.BLOCK_H * d <= max(2304, d), (m, heads, d, cfg)
    if profile.backend == "cuda":  # measured best on the H200 (the config's docstring)
        assert mla_launch_config(16384, 128, 576, profile) == RopeLaunchConfig(1, 4, 2)  # DeepSeek-V3's Q heads
        assert mla_launch_config(32768, 1, 576, profile) == RopeLaunchConfig(4, 1, 2)  # its latent write


def test_halve_until_filled():
    """Halves a power-of-2 block, not below its floor, until the grid has two programs an SM."""
    from aiter_lite.utils.launch import halve_until_filled

    sms = H100.sms
    assert halve_until_filled(16, lambda b: 8192 // b, H100) == 16  # 512 programs already fill 2 x 132
    assert halve_until_filled(16, lambda b: 64 // b, H100) == 1  # never filled: down to 1
    assert halve_until_filled(16, lambda b: 64 // b, H100, floor=4) == 4
    assert halve_until_filled(8, lambda b: (2 * sms * 4) // b, H100) == 4  # filled at 4
    assert halve_until_filled(8, lambda b: 1, INTERPRETER) == 1  # the interpreter's own small count


def test_fill_tile():
    """Heads, then tokens, powers of 2 within the tile; at least one of each."""
    from aiter_lite.utils.launch import fill_tile, prev_power_of_2

    assert [prev_power_of_2(n) for n in (0, 1, 2, 3, 1280, 2304)] == [1, 1, 2, 2, 1024, 2048]
    assert fill_tile(16384, 128, 576, 2304) == (1, 4)  # DeepSeek-V3's Q heads
    assert fill_tile(32768, 1, 576, 2304) == (4, 1)  # its latent write
    assert fill_tile(16384, 64, 576, 1280, 8) == (1, 2)
    assert fill_tile(16384, 128, 32, 2304, 8) == (8, 8)
    assert fill_tile(3, 1, 32, 2304) == (4, 1)  # tokens: as many as there are, rounded up
    assert fill_tile(1, 3, 8192, 2304) == (1, 1)  # a head wider than the tile
