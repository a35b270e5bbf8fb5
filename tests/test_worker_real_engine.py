"""The worker with the real engine modules: conversion of a Hugging Face folder with progress, and the
memory plan of the result. (Loading and chatting with the demo model through the default factory is
covered end to end by tests/test_app_real_demo.py.)"""

from __future__ import annotations

import multiprocessing as mp


import pytest

from engine import protocol as P
from engine.worker import DEFAULT_FACTORY, worker_main
from test_worker_fakes import collect_events


@pytest.mark.slow   # about 25 s plus the shared tiny checkpoint fixture
def test_worker_converts_a_checkpoint_with_progress_then_plans_it(tiny_checkpoint, tmp_path, monkeypatch):
    monkeypatch.setenv("MONORAIL_ALLOW_TEST_SHAPES", "1")     # tiny test shapes, inherited by the child
    ctx = mp.get_context("spawn")
    requests, events = ctx.Queue(), ctx.Queue()
    proc = ctx.Process(target=worker_main, args=(requests, events, DEFAULT_FACTORY), daemon=True)
    proc.start()
    try:
        collect_events(events, lambda e: isinstance(e, P.WorkerReady), 60)
        out = tmp_path / "models" / "tiny.monorail"
        requests.put(P.Convert("c", str(tiny_checkpoint), str(out)))
        got = collect_events(events, lambda e: isinstance(e, (P.Converted, P.WorkerError)), 240)
        assert isinstance(got[-1], P.Converted), got[-1]
        fractions = [e.fraction for e in got if isinstance(e, P.Progress)]
        assert fractions and fractions == sorted(fractions) and fractions[-1] == 1.0
        assert out.exists()
        requests.put(P.ComputePlan("p", str(out), {"kv_dtype": "bf16", "max_context": 2048}))
        plan = collect_events(events, lambda e: isinstance(e, (P.PlanResult, P.WorkerError)), 120)[-1]
        assert isinstance(plan, P.PlanResult), plan
        from engine.worker import _free_device_bytes
        assert "KV bf16" in plan.text                   # the first line says where the budget came from
        assert plan.text.startswith("budget: no GPU found here, so a 24 GiB card" if _free_device_bytes() is None
                                    else "budget: the GPU's free memory now")
        from engine.api import choose_backend
        # no backend in the options: "auto"; where that is the reference, the text says the plan is not its own
        assert ("use the reference backend" in plan.text) == (choose_backend("auto")[0] == "reference")
        # the plan a native load of this artifact would use: its stored formats, and no vision tower (not run yet)
        assert plan.plan["recipe"].startswith("artifact:") and plan.plan["kv_dtype"] == "bf16"
        assert not any("vision" in line["label"] for line in plan.plan["lines"])
        requests.put(P.Convert("bad", str(tmp_path / "nowhere"), str(tmp_path / "x.monorail")))
        err = collect_events(events, lambda e: isinstance(e, (P.Converted, P.WorkerError)), 60)[-1]
        assert isinstance(err, P.WorkerError) and "not a folder" in err.message
    finally:
        requests.put(P.Shutdown())
        proc.join(30)
        if proc.is_alive():
            proc.terminate()
