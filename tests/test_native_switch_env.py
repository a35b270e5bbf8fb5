"""The environment switches engine/native.py applies to the native module once, at its first import (CPU: a recording
stand-in for the module), so that a device call can run the GPU tests under a candidate form without a rebuild."""

from __future__ import annotations

import pytest

import engine.native as native


class Recorder:
    def __init__(self):
        self.calls = []

    def __getattr__(self, name):
        if not name.startswith("set_qgemv_mma"):
            raise AttributeError(name)
        return lambda *args: self.calls.append((name, args))


@pytest.fixture
def fresh(monkeypatch):
    monkeypatch.setattr(native, "_configured_once", False)
    for var in ("MONORAIL_QGEMV_MMA", "MONORAIL_QGEMV_MMA_SHAPE", "MONORAIL_QGEMV_MMA_LOADS_FIRST",
                "MONORAIL_QGEMV_MMA_BLOCK_WARPS"):
        monkeypatch.delenv(var, raising=False)
    return monkeypatch


def test_nothing_set_changes_nothing(fresh):
    mod = Recorder()
    assert native._configured(mod) is mod and mod.calls == []


@pytest.mark.parametrize("value, args", [("8,4", (8, 4)), ("8, 0, 16", (8, 0, 16)), (" 16,2,32 ", (16, 2, 32))])
def test_the_shape_takes_two_or_three_fields(fresh, value, args):
    fresh.setenv("MONORAIL_QGEMV_MMA_SHAPE", value)
    fresh.setenv("MONORAIL_QGEMV_MMA_LOADS_FIRST", "0")
    mod = Recorder()
    native._configured(mod)
    assert mod.calls == [("set_qgemv_mma_shape", args), ("set_qgemv_mma_loads_first", (False,))]


@pytest.mark.parametrize("var, value", [("MONORAIL_QGEMV_MMA_SHAPE", v) for v in ("8", "8,4,16,1", "eight,4", "8;4")]
                         + [("MONORAIL_QGEMV_MMA_BLOCK_WARPS", v) for v in ("3", "8", "one", "0")])
def test_a_malformed_value_is_refused_by_name(fresh, var, value):
    fresh.setenv(var, value)
    with pytest.raises(ValueError, match=var):
        native._configured(Recorder())


def test_loads_first_takes_only_0_or_1(fresh):
    fresh.setenv("MONORAIL_QGEMV_MMA_LOADS_FIRST", "yes")   # neither 0 nor 1: left alone
    mod = Recorder()
    native._configured(mod)
    assert mod.calls == []
    fresh.setattr(native, "_configured_once", False)
    fresh.setenv("MONORAIL_QGEMV_MMA_LOADS_FIRST", "1")
    native._configured(mod)
    assert mod.calls == [("set_qgemv_mma_loads_first", (True,))]


@pytest.mark.parametrize("value", ["1", "2", " 4 "])
def test_the_block_warps_are_set(fresh, value):
    fresh.setenv("MONORAIL_QGEMV_MMA_BLOCK_WARPS", value)
    mod = Recorder()
    native._configured(mod)
    assert mod.calls == [("set_qgemv_mma_block_warps", (int(value),))]


def test_applied_once_per_process(fresh):
    fresh.setenv("MONORAIL_QGEMV_MMA", "0")
    first, second = Recorder(), Recorder()
    native._configured(first)
    native._configured(second)
    assert first.calls == [("set_qgemv_mma", (False,))] and second.calls == []
