"""bench/step_probe.py's A/B switches: each value is set, the step's graph recaptured and timed under its label, and
the switch restored afterwards (the step timing itself needs a GPU; a fake engine stands in for it here)."""

from __future__ import annotations

import importlib.util
from pathlib import Path


def _probe():
    path = Path(__file__).resolve().parents[1] / "bench" / "step_probe.py"
    spec = importlib.util.spec_from_file_location("step_probe", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)  # its engine imports are inside main()
    return mod


class _FakeEngine:
    def __init__(self, log):
        self.log = log

    def reset_graphs(self):
        self.log.append("reset")

    def time_steps(self, lane, depth, steps):
        self.log.append(f"time {depth}")
        return 4.0


def test_time_switch_sets_recaptures_times_and_restores(capsys):
    log = []
    _probe().time_switch(_FakeEngine(log), lambda v: log.append(f"set {v}"), "0, 1,", True, [0], 2, "step x")
    assert log == ["set 0", "reset", "time 0", "time 0", "time 0",
                   "set 1", "reset", "time 0", "time 0", "time 0", "set True"]
    out = capsys.readouterr().out.splitlines()
    assert out == ["step x 0 depth 0: 4.000 ms = 250.0 tok/s", "step x 1 depth 0: 4.000 ms = 250.0 tok/s"]


def test_time_switch_without_values_only_restores():
    log = []
    _probe().time_switch(_FakeEngine(log), lambda v: log.append(f"set {v}"), "", -1, [0], 2, "step x")
    assert log == ["set -1"]
