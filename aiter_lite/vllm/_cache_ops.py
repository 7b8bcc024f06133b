"""vLLM's KV-cache ops (``vllm._custom_ops``) on this project's cache kernels: vLLM's names,
argument orders and defaults; each writes its cache and returns None.

* ``kv_cache_dtype`` is vLLM's string: ``"auto"`` (the cache has the inputs' dtype, written
  unscaled), ``"fp8"`` / ``"fp8_e4m3"`` (the e4m3 the device computes in: e4m3fnuz on
  MI300-class GPUs, e4m3fn elsewhere) or ``"fp8_e5m2"``. An fp8 cache is what vLLM
  allocates, a uint8 tensor (viewed here as the fp8 dtype), or already an fp8 tensor of
  that format.
* fp8 values are written as vLLM's kernels write them: ``x / scale`` in fp32 (an IEEE
  division), saturated to the format's range; ``convert_fp8`` decodes as ``x * scale``.
* A negative slot writes nothing; slot_mapping may be shorter than the tokens (CUDA-graph
  padding: the rest write nothing, vLLM V1's reading); a slot past the cache raises a
  ValueError where slot_mapping is on the host (or with ``AITER_KV_CACHE_CHECK_SLOTS=1``)
  and writes nothing otherwise.
* key / value may be strided views (vLLM's views of a qkv tensor): any strides.
* Not supported (a ValueError): ``"fp8_ds_mla"``, ``"fp8_inc"`` and the other formats, and
  per-head scales.
"""

from __future__ import annotations

import torch

from aiter_lite.ops.triton.fusions.fused_kv_cache import (
    _launch_cache_convert,
    _launch_cat_and_cache_mla,
    _launch_kv_cache_write,
    _mla_cache,
    check_kv_cache_convert,
    check_kv_cache_write,
)
from aiter_lite.ops.triton.fusions._common import check_heads, check_scale, check_slots
from aiter_lite.spec.quant import get_fp8_e4m3_dtype
from aiter_lite.utils.fast_launch import planned

__all__ = ["reshape_and_cache", "reshape_and_cache_flash", "concat_and_cache_mla", "convert_fp8"]

KV_CACHE_DTYPES = ("auto", "fp8", "fp8_e4m3", "fp8_e5m2")
_E4M3 = (torch.float8_e4m3fn, torch.float8_e4m3fnuz)


def _kv_format(op: str, name: str, kv_cache_dtype, device: torch.device) -> torch.dtype | None:
    """The fp8 dtype ``kv_cache_dtype`` names on ``device``, None for "auto"."""
    if not isinstance(kv_cache_dtype, str):
        raise TypeError(f"{op}: {name} must be a str, one of {KV_CACHE_DTYPES}, got {type(kv_cache_dtype).__name__}")
    if kv_cache_dtype not in KV_CACHE_DTYPES:
        raise ValueError(f"{op}: {name} must be one of {KV_CACHE_DTYPES}, got {kv_cache_dtype!r}")
    if kv_cache_dtype == "auto":
        return None
    return torch.float8_e5m2 if kv_cache_dtype == "fp8_e5m2" else get_fp8_e4m3_dtype(device)


def _cache_view(op: str, name: str, cache, fmt: torch.dtype | None, kv_cache_dtype: str, ref_name: str,
                ref: torch.Tensor):
    """The cache as the kernels write it: with "auto", ``ref``'s dtype; with an fp8 format, a
    uint8 cache viewed as it (or a tensor of that format already)."""
    if not isinstance(cache, torch.Tensor):
        raise TypeError(f"{op}: {name} must be a torch.Tensor, got {type(cache).__name__}")
    if fmt is None:
        if cache.dtype != ref.dtype:
            raise TypeError(f"{op}: {name} must have {ref_name}'s dtype {ref.dtype} with kv_cache_dtype='auto' "
                            f"(for an fp8 cache pass 'fp8', 'fp8_e4m3' or 'fp8_e5m2'), got {cache.dtype}")
        return cache
    if cache.dtype == torch.uint8:
        return cache.view(fmt)
    same = cache.dtype in _E4M3 if fmt in _E4M3 else cache.dtype == fmt
    if not same:
        raise TypeError(f"{op}: {name} must be uint8 (vLLM's fp8 cache) or {fmt} with kv_cache_dtype="
                        f"{kv_cache_dtype!r}, got {cache.dtype}")
    return cache


def _write(op: str, key, value, key_cache, value_cache, slot_mapping, kv_cache_dtype, k_scale, v_scale,
           flash_layout: bool) -> None:
    check_heads(op, "key", key)
    fmt = _kv_format(op, "kv_cache_dtype", kv_cache_dtype, key.device)
    key_cache = _cache_view(op, "key_cache", key_cache, fmt, kv_cache_dtype, "key", key)
    value_cache = _cache_view(op, "value_cache", value_cache, fmt, kv_cache_dtype, "key", key)
    if fmt is None:  # vLLM reads no scale with "auto"
        k_scale = v_scale = None
    else:
        for name, s in (("k_scale", k_scale), ("v_scale", v_scale)):
            if not isinstance(s, torch.Tensor):
                raise TypeError(f"{op}: {name} must be a one-element fp32 torch.Tensor with kv_cache_dtype="
                                f"{kv_cache_dtype!r}, got {type(s).__name__}")
    key, value, slot_mapping, geometry = check_kv_cache_write(op, key, value, key_cache, value_cache, slot_mapping,
                                                              k_scale, v_scale, flash_layout)
    _no_grad(op, key=key, value=value)
    _launch_kv_cache_write(key, value, key_cache, value_cache, slot_mapping, k_scale, v_scale, geometry, flash_layout)


def _no_grad(op: str, **tensors) -> None:
    if torch.is_grad_enabled():
        for name, t in tensors.items():
            if isinstance(t, torch.Tensor) and t.requires_grad:
                raise ValueError(f"{op}: {name} requires grad, but a cache write records no gradient; call it under "
                                 f"torch.no_grad() / torch.inference_mode(), or pass {name}.detach()")


@planned
def reshape_and_cache(key: torch.Tensor, value: torch.Tensor, key_cache: torch.Tensor, value_cache: torch.Tensor,
                      slot_mapping: torch.Tensor, kv_cache_dtype: str, k_scale: torch.Tensor,
                      v_scale: torch.Tensor) -> None:
    """vLLM's ``reshape_and_cache``: key and value (T, heads, head_size) written at their slots
    of the classic paged caches, key_cache [num_blocks, heads, head_size / x, block_size, x],
    value_cache [num_blocks, heads, head_size, block_size]."""
    _write("reshape_and_cache", key, value, key_cache, value_cache, slot_mapping, kv_cache_dtype, k_scale, v_scale,
           False)


@planned
def reshape_and_cache_flash(key: torch.Tensor, value: torch.Tensor, key_cache: torch.Tensor,
                            value_cache: torch.Tensor, slot_mapping: torch.Tensor, kv_cache_dtype: str,
                            k_scale: torch.Tensor, v_scale: torch.Tensor) -> None:
    """vLLM's ``reshape_and_cache_flash``: key and value (T, heads, head_size) written at their
    slots of caches [num_blocks, block_size, heads, head_size], any strides (vLLM's HND
    caches arrive as the permuted view of [num_blocks, heads, block_size, head_size])."""
    _write("reshape_and_cache_flash", key, value, key_cache, value_cache, slot_mapping, kv_cache_dtype, k_scale,
           v_scale, True)


@planned
def concat_and_cache_mla(kv_c: torch.Tensor, k_pe: torch.Tensor, kv_cache: torch.Tensor,
                         slot_mapping: torch.Tensor, kv_cache_dtype: str, scale: torch.Tensor) -> None:
    """vLLM's ``concat_and_cache_mla``: cat(kv_c [T, kv_lora_rank], k_pe [T, pe_dim]) written
    at each token's slot of kv_cache [num_blocks, block_size, kv_lora_rank + pe_dim]."""
    op = "concat_and_cache_mla"
    for name, t in (("kv_c", kv_c), ("k_pe", k_pe)):
        if isinstance(t, torch.Tensor) and t.dim() != 2:
            raise ValueError(f"{op}: {name} must be 2-D (tokens, channels), got shape {tuple(t.shape)}")
    check_heads(op, "kv_c", kv_c[:, None, :] if isinstance(kv_c, torch.Tensor) else kv_c,
                dims="(tokens, kv_lora_rank)")
    check_heads(op, "k_pe", k_pe[:, None, :] if isinstance(k_pe, torch.Tensor) else k_pe, "kv_c", kv_c,
                dims="(tokens, pe_dim)")
    if k_pe.dtype != kv_c.dtype:
        raise TypeError(f"{op}: k_pe must have kv_c's dtype {kv_c.dtype}, got {k_pe.dtype}")
    if k_pe.shape[0] != kv_c.shape[0]:
        raise ValueError(f"{op}: k_pe must have kv_c's {kv_c.shape[0]} tokens, got shape {tuple(k_pe.shape)}")
    fmt = _kv_format(op, "kv_cache_dtype", kv_cache_dtype, kv_c.device)
    kv_cache = _cache_view(op, "kv_cache", kv_cache, fmt, kv_cache_dtype, "kv_c", kv_c)
    d1, d2 = kv_c.shape[1], k_pe.shape[1]
    if kv_cache.dim() != 3 or kv_cache.shape[2] != d1 + d2:
        raise ValueError(f"{op}: kv_cache must be (num_blocks, block_size, {d1 + d2}) for kv_c of {d1} and k_pe of "
                         f"{d2} channels, got {tuple(kv_cache.shape)}")
    if fmt is None:
        scale = None
    else:
        if not isinstance(scale, torch.Tensor):
            raise TypeError(f"{op}: scale must be a one-element fp32 torch.Tensor with kv_cache_dtype="
                            f"{kv_cache_dtype!r}, got {type(scale).__name__}")
        check_scale(op, "scale", scale, kv_c, "kv_c")
    k_nope, k_pe3 = kv_c[:, None, :], k_pe[:, None, :]
    n_cache_slots, block_size, strides, _ = _mla_cache(op, kv_cache[:, :, None, :], k_nope, k_pe3, False)
    slot_mapping = check_slots(op, slot_mapping, kv_c.shape[0], n_cache_slots, kv_c, "kv_c")
    _no_grad(op, kv_c=kv_c, k_pe=k_pe)
    n = slot_mapping.shape[0]
    _launch_cat_and_cache_mla(k_nope[:n], k_pe3[:n], kv_cache[:, :, None, :], slot_mapping, scale,
                              [n_cache_slots, block_size, *strides], None, 0, True)


@planned
def convert_fp8(output: torch.Tensor, input: torch.Tensor, scale: float = 1.0, kv_dtype: str = "fp8") -> None:
    """vLLM's ``convert_fp8``: a bf16 / fp16 / fp32 ``input`` into the fp8 cache ``output``
    (uint8, or the fp8 dtype ``kv_dtype`` names) as ``input / scale``, saturated; or an fp8
    ``input`` into a bf16 / fp16 / fp32 ``output`` as ``input * scale``. ``kv_dtype`` "auto"
    names no fp8 format and raises (vLLM's kernel has no conversion for it)."""
    op = "convert_fp8"
    for name, t in (("output", output), ("input", input)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{op}: {name} must be a torch.Tensor, got {type(t).__name__}")
    fmt = _kv_format(op, "kv_dtype", kv_dtype, input.device)
    if fmt is None:
        raise ValueError(f"{op}: kv_dtype must name an fp8 format ('fp8', 'fp8_e4m3' or 'fp8_e5m2'), got 'auto'")
    floats = (torch.bfloat16, torch.float16, torch.float32)
    if input.dtype in floats:
        output = _cache_view(op, "output", output, fmt, kv_dtype, "input", input)
    else:
        input = _cache_view(op, "input", input, fmt, kv_dtype, "output", output)
    out2, in2, scale = check_kv_cache_convert(op, output, input, scale)
    _no_grad(op, input=input)
    _launch_cache_convert(out2, in2, scale)
