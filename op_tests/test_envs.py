"""AITER_* variables: defaults, every allowed value, and clear errors for the rest."""

import logging
import os

import pytest
import torch

from aiter_lite import envs
from aiter_lite.ops.triton import activation as act
from aiter_lite.utils import logger
from op_tests.utils import DEVICE

import subprocess
import sys

ALL_VARS = ["AITER_LOG_LEVEL", "AITER_BACKEND", "AITER_ROPE_TRITON_BACKEND", "AITER_ROPE_NATIVE_BACKEND",
            "AITER_ROPE_CHECK_POSITIONS", "AITER_KV_CACHE_CHECK_SLOTS", "AITER_SAMPLING_CHECK_INDICES",
            "AITER_CROSS_ENTROPY_CHECK_TARGETS", "AITER_FAST_LAUNCH", "AITER_TEST_COMPILE"] + [
    f"AITER_{f.upper()}_BACKEND" for f in envs.OP_FAMILIES
]


@pytest.fixture(autouse=True)
def clean_env(monkeypatch):
    for name in ALL_VARS:
        monkeypatch.delenv(name, raising=False)


def test_defaults():
    auto = "triton" if torch.cuda.is_available() else "native"
    assert envs.log_level() == "WARNING"
    assert envs.rope_check_positions() is False
    assert envs.default_backend() == auto
    assert all(envs.backend(f) == auto for f in envs.OP_FAMILIES)


@pytest.mark.parametrize("value", ["triton", "native", "TRITON", " native "])
def test_global_backend(monkeypatch, value):
    monkeypatch.setenv("AITER_BACKEND", value)
    assert envs.backend("activation") == value.strip().lower()


def test_family_backend_wins_over_global(monkeypatch):
    monkeypatch.setenv("AITER_BACKEND", "native")
    monkeypatch.setenv("AITER_ACTIVATION_BACKEND", "triton")
    assert envs.backend("activation") == "triton"
    assert envs.backend("softmax") == "native"
    monkeypatch.setenv("AITER_ACTIVATION_BACKEND", "auto")
    assert envs.backend("activation") == "native"


@pytest.mark.parametrize("triton_flag,native_flag,expected", [("1", "0", "triton"), ("0", "1", "native"), ("", "1", "native")])
def test_rope_flags(monkeypatch, triton_flag, native_flag, expected):
    monkeypatch.setenv("AITER_BACKEND", "triton" if expected == "native" else "native")
    monkeypatch.setenv("AITER_ROPE_TRITON_BACKEND", triton_flag)
    monkeypatch.setenv("AITER_ROPE_NATIVE_BACKEND", native_flag)
    assert envs.backend("rope") == expected
    monkeypatch.setenv("AITER_ROPE_BACKEND", "triton")
    assert envs.backend("rope") == "triton"


def test_rope_check_positions(monkeypatch):
    monkeypatch.setenv("AITER_ROPE_CHECK_POSITIONS", "1")
    assert envs.rope_check_positions() is True
    monkeypatch.setenv("AITER_ROPE_CHECK_POSITIONS", "0")
    assert envs.rope_check_positions() is False


def test_rope_flags_both_set(monkeypatch):
    monkeypatch.setenv("AITER_ROPE_TRITON_BACKEND", "1")
    monkeypatch.setenv("AITER_ROPE_NATIVE_BACKEND", "1")
    with pytest.raises(ValueError, match="both set"):
        envs.backend("rope")


@pytest.mark.parametrize(
    "name,value,call",
    [
        ("AITER_BACKEND", "cuda", lambda: envs.backend("activation")),
        ("AITER_ACTIVATION_BACKEND", "tritonn", lambda: envs.backend("activation")),
        ("AITER_ROPE_TRITON_BACKEND", "yes", lambda: envs.backend("rope")),
        ("AITER_LOG_LEVEL", "verbose", envs.log_level),
        ("AITER_ROPE_CHECK_POSITIONS", "on", envs.rope_check_positions),
    ],
)
def test_unknown_value_names_variable_and_choices(monkeypatch, name, value, call):
    monkeypatch.setenv(name, value)
    with pytest.raises(ValueError, match=rf"{name}='{value}' is not valid; allowed values: "):
        call()


# A bad value of each variable, and a reader that is never called on some paths (a GPU
# path's flag on a CPU run): validate() and the import read them all.
BAD = {"AITER_LOG_LEVEL": "verbose", "AITER_BACKEND": "cuda", "AITER_ROPE_TRITON_BACKEND": "yes",
       "AITER_ROPE_NATIVE_BACKEND": "2", "AITER_ROPE_CHECK_POSITIONS": "2", "AITER_KV_CACHE_CHECK_SLOTS": "maybe",
       "AITER_SAMPLING_CHECK_INDICES": "yes", "AITER_CROSS_ENTROPY_CHECK_TARGETS": "on", "AITER_FAST_LAUNCH": "2", "AITER_TEST_COMPILE": "true",
       **{f"AITER_{f.upper()}_BACKEND": "tritonn" for f in envs.OP_FAMILIES}}


def test_every_variable_has_a_bad_value_case():
    assert sorted(BAD) == sorted(ALL_VARS)


@pytest.mark.parametrize("name", sorted(BAD))
def test_validate_reads_every_variable(monkeypatch, name):
    monkeypatch.setenv(name, BAD[name])
    with pytest.raises(ValueError, match=rf"{name}='{BAD[name]}' is not valid; allowed values: "):
        envs.validate()


@pytest.mark.parametrize("name", ["AITER_FAST_LAUNCH", "AITER_KV_CACHE_CHECK_SLOTS", "AITER_ROPE_CHECK_POSITIONS",
                                  "AITER_CROSS_ENTROPY_CHECK_TARGETS"])
def test_import_refuses_a_bad_value(name):
    env = {k: v for k, v in os.environ.items() if not k.startswith("AITER_")} | {name: BAD[name]}
    run = subprocess.run([sys.executable, "-c", "import aiter_lite"], env=env, capture_output=True, text=True)
    assert run.returncode != 0 and f"ValueError: {name}='{BAD[name]}' is not valid" in run.stderr


def test_unknown_family():
    with pytest.raises(ValueError, match="unknown op family 'attention'"):
        envs.backend("attention")


def test_log_level_debug_logs_calls(monkeypatch, caplog):
    monkeypatch.setenv("AITER_LOG_LEVEL", "debug")
    logger.configure()
    try:
        x = torch.randn(3, 8, device=DEVICE)
        with caplog.at_level(logging.DEBUG, logger="aiter_lite"):
            act.silu_and_mul(torch.empty(3, 4, device=DEVICE), x)
        assert any("silu_and_mul(out=float32[3, 4]" in r.getMessage() for r in caplog.records)
    finally:
        monkeypatch.delenv("AITER_LOG_LEVEL")
        logger.configure()
    assert logger.LOGGER.level == logging.WARNING
    caplog.clear()
    act.silu_and_mul(torch.empty(3, 4, device=DEVICE), x)
    assert not caplog.records
