"""NativeModel lane bookkeeping (CPU: the engine is a stub that records lane resets)."""

from __future__ import annotations

import gc

import pytest

from engine.native_backend import NativeBackendError, NativeModel


class StubEngine:
    def __init__(self):
        self.resets = []

    def reset_lane(self, lane):
        self.resets.append(lane)


def make(lanes=2):
    return NativeModel(config=None, engine=StubEngine(), plan=None, max_context=100, kv_dtype="int8", lanes=lanes)


def test_dropped_state_returns_its_lane():
    m = make(1)
    s = m.new_state(10)
    lane = s.lane
    del s
    gc.collect()
    assert m._free_lanes == [lane]
    assert m.new_state(10).lane == lane
    assert m.engine.resets == [lane, lane]  # every new sequence starts from a zeroed lane


def test_oldest_sequence_is_revoked_when_lanes_run_out():
    m = make(2)
    a, b = m.new_state(10), m.new_state(10)
    c = m.new_state(10)
    assert a.revoked and not b.revoked and c.lane == a.lane
    with pytest.raises(NativeBackendError, match="lane"):
        m.forward([1], a)


def test_release_and_limits():
    m = make(1)
    s = m.new_state(10)
    m.release(s)
    assert s.revoked and m._free_lanes == [s.lane]
    with pytest.raises(NativeBackendError, match="planned context"):
        m.new_state(101)
