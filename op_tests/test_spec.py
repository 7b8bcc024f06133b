"""The spec layer (aiter_lite.spec) on its own, and the layout it keeps: the native reference
and the Triton backend each import the spec, never each other, and mirror each other file
for file and signature for signature.

* quant: every quantized dtype's range against torch.finfo / iinfo, the dynamic-scale
  floor, which e4m3 a device wants (CPU only, and MI300-class against the rest with the
  arch faked);
* rope: the rotate styles, the style check both backends run, the rotary width of a
  table and the KV-cache ops' reuse rule, accepted and rejected, with their messages;
* boundaries: an AST scan of every import under aiter_lite/ops/native and
  aiter_lite/ops/triton (absolute, relative, ``from aiter_lite.ops import ...``,
  ``importlib.import_module``);
* mirror: every public Triton module has a native one at the same relative path, every
  registered op the same parameters (names, order, kinds, defaults) on both sides, and the
  native quant and fusions packages offer the ops their Triton packages offer.
"""

from __future__ import annotations

import ast
import functools
import importlib
import inspect
import re
from pathlib import Path

import pytest
import torch

import aiter_lite
from op_tests.utils import DEVICE
from aiter_lite.library import OPS
from aiter_lite.ops.native.rope import rope as native_rope
from aiter_lite.ops.triton.rope import rope as triton_rope
from aiter_lite.spec import device as device_mod
from aiter_lite.spec.quant import (
    FP8_DTYPES,
    GROUP_EPS,
    QUANT_DTYPES,
    get_fp8_e4m3_dtype,
    min_scale,
    quant_range,
)
from aiter_lite.spec.rope import RotateStyle, cache_rotary_reuse, check_rotate_style, rotary_width

PACKAGE = Path(aiter_lite.__file__).parent
OPS_DIR = PACKAGE / "ops"
# Triton modules with no native counterpart: what a device can store is the Triton
# backend's concern; norm.py is the launcher rmsnorm.py and layernorm.py share (no op of its own).
TRITON_ONLY = {"quant/dtypes.py", "normalization/norm.py"}


# ---------------------------------------------------------------------------
# quant


@pytest.mark.parametrize("dtype", QUANT_DTYPES)
def test_quant_range(dtype):
    info = torch.finfo(dtype) if dtype.is_floating_point else torch.iinfo(dtype)
    assert quant_range(dtype) == (float(info.min), float(info.max))


def test_quant_range_values():
    assert quant_range(torch.float8_e4m3fn) == (-448.0, 448.0)
    assert quant_range(torch.float8_e4m3fnuz) == (-240.0, 240.0)
    assert quant_range(torch.float8_e5m2) == (-57344.0, 57344.0)
    assert quant_range(torch.int8) == (-128.0, 127.0)


def test_dtype_sets():
    assert set(FP8_DTYPES) == {d for d in QUANT_DTYPES if d.is_floating_point}
    assert set(QUANT_DTYPES) - set(FP8_DTYPES) == {torch.int8}
    assert 0 < GROUP_EPS < 1e-6


@pytest.mark.parametrize("dtype", QUANT_DTYPES)
def test_min_scale(dtype):
    q_max = quant_range(dtype)[1]
    assert min_scale(dtype) == 1.0 / (q_max * 512.0)
    assert 0 < min_scale(dtype) < 1e-4  # a finite, positive floor far below any real scale


def test_fp8_e4m3_dtype_without_a_gpu(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    for device in (None, 0, "cpu", torch.device("cpu"), torch.device("cuda", 0)):
        assert get_fp8_e4m3_dtype(device) == torch.float8_e4m3fn


@pytest.mark.skipif(torch.cuda.is_available(), reason="a CPU-only machine")
def test_fp8_e4m3_dtype_on_this_cpu_machine():
    assert get_fp8_e4m3_dtype() == torch.float8_e4m3fn


class _Props:
    """What torch.cuda.get_device_properties reports of a GPU (the fields profiles read)."""

    def __init__(self, name, arch="", major=9, minor=0, sms=132):
        self.name, self.gcnArchName, self.major, self.minor = name, arch, major, minor
        self.multi_processor_count, self.warp_size = sms, 64 if arch else 32


@pytest.fixture
def fake_gpu(monkeypatch):
    """A GPU of the given properties as the current device (torch.version.hip as the props say)."""
    def use(props):
        monkeypatch.setattr(torch.version, "hip", "6.3" if props.gcnArchName else None, raising=False)
        monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
        monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
        monkeypatch.setattr(torch.cuda, "get_device_properties", lambda index: props)
        device_mod._live.cache_clear()
    yield use
    device_mod._live.cache_clear()


@pytest.mark.parametrize("arch,want", [("gfx942:sramecc+:xnack-", torch.float8_e4m3fnuz),
                                       ("gfx940", torch.float8_e4m3fnuz),
                                       ("gfx950", torch.float8_e4m3fn),
                                       ("gfx1201", torch.float8_e4m3fn)])
def test_fp8_e4m3_dtype_by_amd_arch(fake_gpu, arch, want):
    fake_gpu(_Props("AMD Instinct", arch, sms=304))
    assert get_fp8_e4m3_dtype(0) == want
    assert get_fp8_e4m3_dtype(torch.device("cuda", 1)) == want
    assert get_fp8_e4m3_dtype() == want


@pytest.mark.parametrize("major,minor,stores_e4m3", [(8, 0, False), (8, 6, False), (8, 9, True), (9, 0, True),
                                                     (10, 0, True), (12, 0, True)])
def test_fp8_e4m3_dtype_on_nvidia(fake_gpu, major, minor, stores_e4m3):
    fake_gpu(_Props("NVIDIA GPU", major=major, minor=minor))
    assert get_fp8_e4m3_dtype(0) == torch.float8_e4m3fn  # what torch holds; sm_80's kernels refuse it
    profile = device_mod.device_profile(torch.device("cuda", 0))
    assert profile.arch == f"sm_{major}{minor}"
    assert (torch.float8_e4m3fn in profile.quant_dtypes) == stores_e4m3
    assert torch.float8_e5m2 in profile.quant_dtypes and torch.int8 in profile.quant_dtypes


def test_fp8_e4m3_dtype_of_a_profile_in_use():
    with device_mod.use_profile(device_mod.MI300X):
        assert get_fp8_e4m3_dtype() == get_fp8_e4m3_dtype("cpu") == torch.float8_e4m3fnuz
    with device_mod.use_profile(device_mod.A100):
        assert device_mod.A100.fp8_e4m3 is None and get_fp8_e4m3_dtype() == torch.float8_e4m3fn
    assert get_fp8_e4m3_dtype("cpu") == torch.float8_e4m3fn


# ---------------------------------------------------------------------------
# rope


def test_rotate_style_values():
    assert (RotateStyle.NEOX, RotateStyle.GPTJ) == (0, 1)
    assert [s.name for s in RotateStyle] == ["NEOX", "GPTJ"]
    assert triton_rope.RotateStyle is RotateStyle and native_rope.RotateStyle is RotateStyle


@pytest.mark.parametrize("style,want", [(0, 0), (1, 1), (RotateStyle.NEOX, 0), (RotateStyle.GPTJ, 1)])
def test_rotate_style_accepted(style, want):
    got = check_rotate_style("op", style)
    assert got == want and type(got) is int


@pytest.mark.parametrize("style", [2, -1, True, False, None, "neox"])
def test_rotate_style_rejected(style):
    msg = f"op: rotate_style must be RotateStyle.NEOX (0) or RotateStyle.GPTJ (1), got {style!r}"
    with pytest.raises(ValueError, match=f"^{re.escape(msg)}$"):
        check_rotate_style("op", style)


@pytest.mark.parametrize("style", [2, True])
def test_both_backends_check_the_style_alike(style):
    """The native reference and the Triton op refuse a bad style with the same message."""
    x = torch.randn(2, 1, 1, 8, device=DEVICE)
    cos = sin = torch.randn(2, 1, 1, 4, device=DEVICE)
    messages = []
    for op in (native_rope.rope_cached_fwd, triton_rope.rope_cached_fwd):
        with pytest.raises(ValueError) as err:
            op(x, cos, sin, style, False, False)
        messages.append(str(err.value))
    assert messages[0] == messages[1] == (f"rope_cached_fwd: rotate_style must be RotateStyle.NEOX (0) or "
                                          f"RotateStyle.GPTJ (1), got {style!r}")


@pytest.mark.parametrize("head_dim,width,reuse,want", [(64, 32, True, 64), (64, 32, False, 32), (64, 64, False, 64),
                                                       (80, 20, False, 20), (96, 24, True, 48), (8, 1, True, 2),
                                                       (2, 2, False, 2)])
def test_rotary_width_accepted(head_dim, width, reuse, want):
    assert rotary_width("op", head_dim, width, reuse) == want


@pytest.mark.parametrize("head_dim,width,reuse,r", [(64, 64, True, 128), (64, 33, False, 33), (64, 0, True, 0),
                                                    (64, 1, False, 1), (6, 4, True, 8)])
def test_rotary_width_rejected(head_dim, width, reuse, r):
    msg = (f"op: a table {width} wide (reuse_freqs_front_part={reuse}) rotates {r} channels; expected an even "
           f"count from 2 up to the head dim {head_dim}")
    with pytest.raises(ValueError, match=f"^{re.escape(msg)}$"):
        rotary_width("op", head_dim, width, reuse)


@pytest.mark.parametrize("head_dim,width,want", [(64, 64, False), (64, 32, True), (64, 16, True), (80, 40, True),
                                                 (80, 80, False), (64, 1, True)])
def test_cache_rotary_reuse_accepted(head_dim, width, want):
    assert cache_rotary_reuse("op", head_dim, width) is want


@pytest.mark.parametrize("head_dim,width", [(64, 33), (64, 48), (64, 0), (64, 65), (64, 128)])
def test_cache_rotary_reuse_rejected(head_dim, width):
    msg = (f"op: cos / sin must be {head_dim} wide (full) or at most {head_dim // 2} (reused for both members of a "
           f"pair) for a head dim of {head_dim}, got {width}")
    with pytest.raises(ValueError, match=f"^{re.escape(msg)}$"):
        cache_rotary_reuse("op", head_dim, width)


# ---------------------------------------------------------------------------
# import boundaries


def _imported(path: Path, source: str | None = None) -> set[str]:
    """Every module name ``path`` imports: absolute and relative imports (resolved against
    its package), ``from pkg import name`` as ``pkg.name`` too, and the constant argument of
    ``importlib.import_module`` / ``__import__``."""
    tree = ast.parse(path.read_text() if source is None else source)
    package = list(path.relative_to(PACKAGE.parent).parent.parts)  # a module's, or an __init__'s own
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[:len(package) - node.level + 1]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module
            names.add(module)
            names |= {f"{module}.{alias.name}" for alias in node.names}
        elif isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant):
            fn = node.func
            name = fn.attr if isinstance(fn, ast.Attribute) else getattr(fn, "id", "")
            if name in ("import_module", "__import__") and isinstance(node.args[0].value, str):
                names.add(node.args[0].value)
    return names


def _reaches(names: set[str], target: str) -> list[str]:
    return sorted(n for n in names if n == target or n.startswith(target + "."))


def _py_files(root: Path) -> list[Path]:
    return sorted(root.rglob("*.py"))


@pytest.mark.parametrize("source,found", [
    ("from aiter_lite.ops.triton.quant.dtypes import quant_range", True),
    ("import aiter_lite.ops.triton.rope.rope as r", True),
    ("import aiter_lite.ops.triton", True),
    ("from aiter_lite.ops import triton", True),
    ("from ...triton import quant", True),
    ("from ...triton.rope.rope import RotateStyle", True),
    ("import importlib\nimportlib.import_module('aiter_lite.ops.triton.topk')", True),
    ("from .. import rope", False),
    ("from ..rope.rope import rotate", False),
    ("from aiter_lite.spec.quant import quant_range", False),
    ("from aiter_lite.ops.tritonic import x", False),
])
def test_the_import_scan_sees_every_form(source, found):
    """The scan itself, on a file at aiter_lite/ops/native/quant/quant.py."""
    names = _imported(OPS_DIR / "native" / "quant" / "quant.py", source)
    assert bool(_reaches(names, "aiter_lite.ops.triton")) is found, names


@pytest.mark.parametrize("path", _py_files(OPS_DIR / "native"), ids=lambda p: str(p.relative_to(OPS_DIR)))
def test_native_never_imports_triton(path):
    assert not _reaches(_imported(path), "aiter_lite.ops.triton"), f"{path} imports the Triton backend"


@pytest.mark.parametrize("path", _py_files(OPS_DIR / "triton"), ids=lambda p: str(p.relative_to(OPS_DIR)))
def test_triton_never_imports_native(path):
    assert not _reaches(_imported(path), "aiter_lite.ops.native"), f"{path} imports the native reference"


@pytest.mark.parametrize("path", _py_files(PACKAGE / "spec"), ids=lambda p: p.name)
def test_spec_imports_nothing_of_the_project_but_itself(path):
    own = {n for n in _imported(path) if n.split(".")[0] == "aiter_lite"}
    assert not {n for n in own if not n.startswith("aiter_lite.spec")}, f"{path} imports {sorted(own)}"


# ---------------------------------------------------------------------------
# mirror


def _public_triton_modules() -> list[str]:
    """Relative paths of the Triton backend's public modules (no ``_`` prefix, no kernels)."""
    root = OPS_DIR / "triton"
    return sorted(str(p.relative_to(root)) for p in _py_files(root)
                  if not p.name.startswith("_") and "_triton_kernels" not in p.relative_to(root).parts)


def test_native_mirrors_triton_file_for_file():
    public = _public_triton_modules()
    assert "rope/rope.py" in public and "fusions/fused_kv_cache.py" in public
    assert TRITON_ONLY <= set(public), "a backend-only module was renamed or removed: update TRITON_ONLY"
    missing = [rel for rel in public if rel not in TRITON_ONLY and not (OPS_DIR / "native" / rel).is_file()]
    assert not missing, f"no native module at the path of: {missing}"


def _module_name(rel: str, backend: str) -> str:
    return f"aiter_lite.ops.{backend}." + rel.removesuffix(".py").replace("/", ".")


@functools.cache
def _defined_ops() -> dict[str, str]:
    """Each registered op's name and the relative path of the Triton module that defines it."""
    where = {}
    for rel in _public_triton_modules():
        module = importlib.import_module(_module_name(rel, "triton"))
        for name in OPS:
            fn = getattr(module, name, None)
            if fn is not None and inspect.unwrap(fn).__module__ == module.__name__:
                where[name] = rel
    return where


def _params(fn, skip=()) -> list[tuple]:
    return [(p.name, p.kind, p.default) for p in inspect.signature(fn).parameters.values() if p.name not in skip]


def test_every_op_is_defined_in_a_mirrored_triton_module():
    where = _defined_ops()
    assert set(where) == set(OPS), f"ops defined outside the public Triton modules: {sorted(set(OPS) - set(where))}"
    assert not set(where.values()) & TRITON_ONLY


@pytest.mark.parametrize("name", sorted(OPS))
def test_native_signature_matches_triton(name):
    """Same name, parameter names, order, kinds and defaults, in the module at the same
    path; the Triton side's launch config (``config``) aside."""
    rel = _defined_ops()[name]
    triton_fn = getattr(importlib.import_module(_module_name(rel, "triton")), name)
    native_module = importlib.import_module(_module_name(rel, "native"))
    native_fn = getattr(native_module, name, None)
    assert native_fn is not None, f"{name}: no native function in {native_module.__name__}"
    assert inspect.unwrap(native_fn).__module__ == native_module.__name__, \
        f"{name}: the native function is defined in {native_fn.__module__}, not {native_module.__name__}"
    assert _params(native_fn) == _params(triton_fn, skip=("config",))


@pytest.mark.parametrize("package", ["quant", "fusions"])
def test_native_packages_export_what_triton_packages_export(package):
    """``from aiter_lite.ops.native import quant; quant.<op>(...)`` works wherever the Triton
    package offers the op by that name."""
    triton_pkg = importlib.import_module(f"aiter_lite.ops.triton.{package}")
    native_pkg = importlib.import_module(f"aiter_lite.ops.native.{package}")
    offered = [name for name in OPS if callable(getattr(triton_pkg, name, None))]
    assert offered
    missing = [name for name in offered if not callable(getattr(native_pkg, name, None))]
    assert not missing, f"aiter_lite.ops.native.{package} lacks {missing}"
