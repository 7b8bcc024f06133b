"""What a launch config is chosen for: a :class:`DeviceProfile` of the GPU (compute units,
warp / wavefront width, shared memory / LDS, registers, which quantized dtypes it can
store), read from the live device or named (MI300X, MI355X, A100, H100, H200, B200,
RTX5090), so the config any target gets can be asked on a machine without it.

``device_profile(device)`` is the one question a wrapper asks: the live GPU's profile for
a CUDA / HIP tensor, :data:`INTERPRETER` for CPU tensors (Triton's interpreter runs
programs one after another: grids are sized for a few programs, not for SMs), and inside
``with use_profile(MI300X):`` that profile for every device, meta tensors included (how
``scripts/check_targets.py`` records the launches each target gets).
"""

from __future__ import annotations

import contextlib
import functools
import math
from dataclasses import dataclass, replace

import torch

from aiter_lite.spec.quant import storable_quant_dtypes

MAX_THREADS_PER_BLOCK = 1024  # CUDA and HIP alike: 32 warps of 32 lanes, 16 wavefronts of 64


@dataclass(frozen=True)
class DeviceProfile:
    """The facts of a GPU that launch configs and dtype checks depend on.

    ``arch``: ``"sm_90"`` / ``"gfx942"`` style (``"interpreter"`` for the CPU); ``sms``:
    streaming multiprocessors (compute units on AMD); ``warp_size``: 32 (NVIDIA) or 64
    (CDNA wavefronts); ``smem_per_block``: the shared memory / LDS one program may use
    (bytes, opt-in maximum); ``smem_per_sm``; ``regs_per_sm``: 32-bit registers an SM / CU
    holds (NVIDIA 65536; CDNA 4 SIMDs x 512 VGPRs x 64 lanes); ``reg_granule``: registers
    a lane is given in multiples of; ``max_threads_per_sm`` and ``max_blocks_per_sm``: the
    residency limits; ``elements_per_lane``: the elements a lane holds in a row tile (a 16
    byte vector of bf16 at a time); ``quant_dtypes``: the quantized dtypes its kernels can
    store; ``fp8_e4m3``: the e4m3 it computes in (None: none)."""

    name: str
    arch: str
    sms: int
    warp_size: int
    smem_per_block: int
    smem_per_sm: int
    regs_per_sm: int
    reg_granule: int
    max_threads_per_sm: int
    max_blocks_per_sm: int
    quant_dtypes: tuple
    fp8_e4m3: torch.dtype | None
    elements_per_lane: int = 16

    @property
    def backend(self) -> str:
        """``"hip"``, ``"cuda"`` or ``"interpreter"``."""
        return "hip" if self.arch.startswith("gfx") else "cuda" if self.arch.startswith("sm_") else "interpreter"

    @property
    def interpreter(self) -> bool:
        return self.backend == "interpreter"

    @property
    def device_math(self) -> int:
        """A kernel constexpr for the device's own math instructions: 0 the interpreter
        (numpy's), 1 AMD, 2 NVIDIA (PTX-only instructions such as cvt.rni, tanh.approx)."""
        return 0 if self.interpreter else 2 if self.backend == "cuda" else 1

    @property
    def tma(self) -> bool:
        """Tensor-memory-accelerator copies (Hopper and later NVIDIA GPUs)."""
        return self.backend == "cuda" and int(self.arch[3:]) >= 90

    @property
    def max_warps(self) -> int:
        """Warps (wavefronts) a program may have: 32 of 32 lanes, 16 of 64."""
        return MAX_THREADS_PER_BLOCK // self.warp_size

    def gpu_target(self):
        """Triton's ``GPUTarget`` for this device (``triton.compile(..., target=)``)."""
        from triton.backends.compiler import GPUTarget

        if self.backend == "hip":
            return GPUTarget("hip", self.arch, self.warp_size)
        if self.backend == "cuda":
            return GPUTarget("cuda", int(self.arch.removeprefix("sm_")), self.warp_size)
        raise ValueError(f"DeviceProfile {self.name}: the interpreter has no compile target")

    def warps_for(self, tile: int, per_lane: int | None = None, lo: int = 4, hi: int | None = None) -> int:
        """Warps for a tile of ``tile`` elements at ``per_lane`` elements a lane (the
        profile's by default), between ``lo`` and ``hi`` (the most a program may have)."""
        per_lane = per_lane or self.elements_per_lane
        return min(max(tile // (per_lane * self.warp_size), lo), min(hi or self.max_warps, self.max_warps))

    def fit(self, cfg):
        """A launch config (a dataclass with ``num_warps``) with its warps cut to what a
        program may have here: a table measured with 32 warps of 32 lanes runs 16
        wavefronts of 64 on AMD."""
        return cfg if cfg.num_warps <= self.max_warps else replace(cfg, num_warps=self.max_warps)

    def row_warps(self, tile: int) -> int:
        """Warps for a row tile held in registers: 4 up to 64 lanes' worth of 16 elements,
        then 16 elements a lane up to 8 warps, then 64 a lane (on NVIDIA: a 16384 row takes
        8 warps, 32768 takes 16); never more than a program may have."""
        if tile <= 16384:
            return min(max(tile // (16 * self.warp_size), 4), 8, self.max_warps)
        return min(tile // (64 * self.warp_size), 16, self.max_warps)

    def resident_programs(self, num_warps: int, regs_per_lane: int, smem: int) -> int:
        """Programs of ``num_warps`` warps using ``regs_per_lane`` registers a lane and
        ``smem`` bytes of shared memory that one SM / CU holds at once (0: none fits).
        On CDNA a program's wavefronts spread over the CU's 4 SIMDs, each of which holds
        ``regs_per_sm / 4 / 64`` VGPRs a lane."""
        threads = num_warps * self.warp_size
        if threads > MAX_THREADS_PER_BLOCK or smem > self.smem_per_block:
            return 0
        regs = max(math.ceil(max(regs_per_lane, 1) / self.reg_granule) * self.reg_granule, 1)
        if self.backend == "hip":
            simds = 4
            waves_by_regs = self.regs_per_sm // (simds * self.warp_size) // regs  # a SIMD's VGPRs a lane / a wave's
            waves_per_simd = min(waves_by_regs, self.max_threads_per_sm // (simds * self.warp_size))
            by_regs = waves_per_simd // math.ceil(num_warps / simds)
        else:
            by_regs = self.regs_per_sm // (regs * threads)
        by_smem = self.smem_per_sm // smem if smem else self.max_blocks_per_sm
        return max(min(by_regs, by_smem, self.max_threads_per_sm // threads, self.max_blocks_per_sm), 0)


def _profile(name: str, arch: str, sms: int, **kw) -> DeviceProfile:
    e4m3, dtypes = storable_quant_dtypes(arch)
    hip = arch.startswith("gfx")
    defaults = dict(warp_size=64 if hip else 32, regs_per_sm=4 * 512 * 64 if hip else 65536,
                    reg_granule=8, max_threads_per_sm=2048, max_blocks_per_sm=32 if not hip else 16)
    return DeviceProfile(name, arch, sms, quant_dtypes=dtypes, fp8_e4m3=e4m3, **{**defaults, **kw})


# Data sheets: AMD CDNA3 / CDNA4 ISA and Instinct specifications, NVIDIA's CUDA C
# Programming Guide (compute capabilities), the products' specifications.
MI300X = _profile("MI300X", "gfx942", 304, smem_per_block=65536, smem_per_sm=65536)
MI355X = _profile("MI355X", "gfx950", 256, smem_per_block=163840, smem_per_sm=163840)
A100 = _profile("A100", "sm_80", 108, smem_per_block=166912, smem_per_sm=167936)
H100 = _profile("H100", "sm_90", 132, smem_per_block=232448, smem_per_sm=233472)
H200 = _profile("H200", "sm_90", 132, smem_per_block=232448, smem_per_sm=233472)
B200 = _profile("B200", "sm_100", 148, smem_per_block=232448, smem_per_sm=233472)
RTX5090 = _profile("RTX5090", "sm_120", 170, smem_per_block=101376, smem_per_sm=102400, max_threads_per_sm=1536,
                   max_blocks_per_sm=24)
PROFILES = {p.name: p for p in (MI300X, MI355X, A100, H100, H200, B200, RTX5090)}

# CPU tensors: Triton's interpreter. Its grids are sized by each config's own interpreter
# rule (``grid_sms``), not by SMs; every quantized dtype converts in software.
INTERPRETER = _profile("interpreter", "interpreter", 4, smem_per_block=1 << 30, smem_per_sm=1 << 30)

_override: list[DeviceProfile] = []


@contextlib.contextmanager
def use_profile(profile: DeviceProfile):
    """Launch configs and dtype checks chosen for ``profile`` on every device while the
    block runs (recording a target's launches on meta tensors, or asking the CPU tests'
    kernels to run another target's configs in the interpreter)."""
    _override.append(profile)
    try:
        yield profile
    finally:
        _override.pop()


@functools.lru_cache(maxsize=16)
def _live(index: int) -> DeviceProfile:
    props = torch.cuda.get_device_properties(index)
    if torch.version.hip:
        arch = getattr(props, "gcnArchName", "gfx").split(":")[0]
    else:
        arch = f"sm_{props.major}{props.minor}"
    named = next((p for p in PROFILES.values() if p.name in props.name.replace(" ", "") and p.arch == arch), None)
    live = dict(sms=props.multi_processor_count, warp_size=getattr(props, "warp_size", 64 if torch.version.hip else 32))
    for field, attr in (("smem_per_block", "shared_memory_per_block_optin"),
                        ("smem_per_sm", "shared_memory_per_multiprocessor"),
                        ("regs_per_sm", "regs_per_multiprocessor"),
                        ("max_threads_per_sm", "max_threads_per_multi_processor")):
        value = getattr(props, attr, 0)
        if value:
            live[field] = value
    if named is not None:  # the data sheet's, with what the device says of itself
        return replace(named, **live)
    return replace(_profile(props.name, arch, live["sms"], smem_per_block=49152, smem_per_sm=65536), **live)


def device_profile(device: torch.device | None) -> DeviceProfile:
    """The profile launch configs are chosen for on ``device``: :func:`use_profile`'s while
    one is set, else the live GPU's for a CUDA / HIP device, else :data:`INTERPRETER`."""
    if _override:
        return _override[-1]
    if device is None or device.type != "cuda":
        return INTERPRETER
    return _live(device.index if device.index is not None else torch.cuda.current_device())

