"""The worker protocol: every message is a plain picklable dataclass with a version."""

from __future__ import annotations

import dataclasses
import pickle

from engine import protocol as P


def _samples():
    return [
        P.LoadModel("r1", "demo", {"kv_dtype": "int8"}),
        P.Generate("r2", [{"role": "user", "content": [{"type": "text", "text": "hi"},
                                                       {"type": "image", "image": b"\x89PNG"}]}],
                   {"temperature": 0.7}, False),
        P.Cancel("r2"), P.Unload("r3"), P.ComputePlan("r4", "demo", {}), P.Convert("r5", "/a", "/b"), P.Shutdown(),
        P.WorkerReady(P.PROTOCOL_VERSION, 123), P.Progress("r1", 0.5, "half"),
        P.ModelLoaded("r1", "demo", True, 4096, True, "reference", {"weights": 1}),
        P.Unloaded("r3"), P.Delta("r2", "reasoning", "hm"),
        P.Finished("r2", "stop", 3, 4, 0.1, 10.0, 20.0, 0.8, [{"name": "f"}]),
        P.PlanResult("r4", None, "table"), P.GetStats("r6"), P.WorkerStats("r6", 1, 2 << 20, "demo", "reference", False), P.Converted("r5", "/b"), P.WorkerError("r2", "PromptError", "too long"),
    ]


def test_messages_round_trip_through_pickle():
    for msg in _samples():
        assert dataclasses.is_dataclass(msg)
        back = pickle.loads(pickle.dumps(msg))
        assert back == msg and type(back) is type(msg)


def test_protocol_version_is_a_positive_int():
    assert isinstance(P.PROTOCOL_VERSION, int) and P.PROTOCOL_VERSION >= 1


def test_protocol_module_is_light():
    import subprocess
    import sys

    code = "import sys, engine.protocol, engine.worker; print('torch' in sys.modules, 'PySide6' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out == ["False", "False"]
