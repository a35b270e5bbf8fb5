"""The app's engine process on the native backend, and the GPU readings the dashboard shows (GPU).

The app talks to a spawned worker (engine/worker.py) over two queues; these tests drive that same
worker, with the default factory, on the native backend and the demo model: what a user with an
NVIDIA GPU does from the app, without Qt (GPU machines here have no display stack). They also read
the GPU through app.nvml_source, the module behind the dashboard, before and after a reply.

With MONORAIL_NVML_SAMPLES_OUT set, the NVML samples taken during a reply are written there as
JSON, a record of what the dashboard would have shown (bench/results/nvml-samples-*.json)."""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import queue
import time
from dataclasses import asdict

import pytest

from engine import protocol as P
from engine.worker import DEFAULT_FACTORY, worker_main
from native_helpers import requires_gpu
from test_worker_fakes import collect_events

pytestmark = [pytest.mark.gpu, requires_gpu]

PROMPT = [{"role": "system", "content": "You are a terse assistant."},
          {"role": "user", "content": "Name three famous railway lines and say why each one matters."}]
GREEDY = {"temperature": 0.0, "max_tokens": 24}


@pytest.fixture(scope="module")
def worker():
    ctx = mp.get_context("spawn")
    requests, events = ctx.Queue(), ctx.Queue()
    proc = ctx.Process(target=worker_main, args=(requests, events, DEFAULT_FACTORY), daemon=True)
    proc.start()
    try:
        collect_events(events, lambda e: isinstance(e, P.WorkerReady), 120)
        yield requests, events, proc
    finally:
        requests.put(P.Shutdown())
        proc.join(60)
        if proc.is_alive():
            proc.terminate()


def _request(worker, req, done, timeout=300.0) -> list:
    requests, events, _ = worker
    requests.put(req)
    return collect_events(events, lambda e: isinstance(e, done) and getattr(e, "request_id", None) == req.request_id,
                          timeout)


def _load_native(worker, rid: str, **options) -> list:
    opts = {"backend": "native", "kv_dtype": "int8", "max_context": 4096, **options}
    return _request(worker, P.LoadModel(rid, "demo", opts), (P.ModelLoaded, P.WorkerError))


def _reply(worker, rid: str, messages=PROMPT, sampling=GREEDY) -> tuple[str, P.Finished, list]:
    got = _request(worker, P.Generate(rid, messages, dict(sampling), enable_thinking=False), P.Finished)
    text = "".join(e.text for e in got if isinstance(e, P.Delta) and e.request_id == rid)
    return text, got[-1], [e for e in got if isinstance(e, P.WorkerError)]


def test_worker_loads_the_native_engine_within_its_plan(worker):
    got = _load_native(worker, "load")
    loaded = got[-1]
    assert isinstance(loaded, P.ModelLoaded), loaded
    assert loaded.backend == "native" and loaded.random_weights and loaded.context_limit == 4096
    # the demo has a vision tower, which the native engine does not run: the app must say so, not "no tower"
    assert loaded.vision_tower and not loaded.has_vision
    fractions = [e.fraction for e in got if isinstance(e, P.Progress)]
    assert fractions and fractions == sorted(fractions) and fractions[-1] == 1.0
    plan = loaded.plan
    assert plan and plan["fits"] and plan["total"] <= plan["budget"]
    assert sum(line["bytes"] for line in plan["lines"]) == plan["total"]
    assert any(line["label"] == "KV pool" for line in plan["lines"])
    # Settings' "Show memory plan" computes, for the same options and an explicit budget, the very plan a load uses
    opts = {"backend": "native", "kv_dtype": "int8", "max_context": 4096, "vram_budget_bytes": 6 << 30}
    loaded = _request(worker, P.LoadModel("load-budget", "demo", opts), (P.ModelLoaded, P.WorkerError))[-1]
    shown = _request(worker, P.ComputePlan("plan", "demo", opts), (P.PlanResult, P.WorkerError))[-1]
    assert isinstance(loaded, P.ModelLoaded) and isinstance(shown, P.PlanResult), (loaded, shown)
    assert shown.plan == loaded.plan and loaded.plan["budget"] == 6 << 30


def test_worker_replies_cancels_and_refuses_images_on_the_native_backend(worker):
    assert isinstance(_load_native(worker, "load2")[-1], P.ModelLoaded)
    text1, fin1, errors = _reply(worker, "g1")
    assert not errors and fin1.reason in ("stop", "length") and fin1.completion_tokens >= 1
    assert fin1.prompt_tokens > 16 and fin1.decode_tok_s and fin1.decode_tok_s > 0 and fin1.ttft_s is not None
    text2, fin2, _ = _reply(worker, "g2")
    assert (text2, fin2.completion_tokens) == (text1, fin1.completion_tokens)   # greedy replays exactly

    image = {"role": "user", "content": [{"type": "image", "image": b"\x89PNG not really"},
                                         {"type": "text", "text": "What is this?"}]}
    _, fin, errors = _reply(worker, "img", messages=[image])
    assert fin.reason == "error" and errors and "image" in errors[0].message.lower()

    # a long reply stopped after its first delta ends as "cancelled", and the engine serves the next one
    requests, events, _ = worker
    requests.put(P.Generate("long", PROMPT, {"temperature": 0.0, "max_tokens": 2000}, enable_thinking=False))
    collect_events(events, lambda e: isinstance(e, P.Delta) and e.request_id == "long", 120)
    requests.put(P.Cancel("long"))
    fin = collect_events(events, lambda e: isinstance(e, P.Finished) and e.request_id == "long", 120)[-1]
    assert fin.reason == "cancelled" and fin.completion_tokens < 2000
    text3, fin3, errors3 = _reply(worker, "g3")      # sent at once: the worker waits for the loop's clean-up
    assert not errors3, errors3[0].message
    assert text3 == text1 and fin3.reason == fin1.reason

    stats = _request(worker, P.GetStats("s"), P.WorkerStats)[-1]
    assert stats.backend == "native" and stats.model and not stats.generating and stats.rss_bytes


def test_an_impossible_budget_is_a_clear_error_and_the_worker_serves_on(worker):
    got = _load_native(worker, "tiny-budget", vram_budget_bytes=64 << 20)
    err = got[-1]
    assert isinstance(err, P.WorkerError), err
    assert err.message.startswith("The memory plan needs") and "DOES NOT FIT" in err.message, err.message
    _, fin, errors = _reply(worker, "after")
    assert fin.reason == "error" and "No model" in errors[0].message
    assert isinstance(_load_native(worker, "again")[-1], P.ModelLoaded)
    _, fin, errors = _reply(worker, "after2")
    assert not errors and fin.reason in ("stop", "length")


def test_nvml_readings_during_a_native_reply(worker):
    """What the dashboard shows, read from the real GPU while the engine decodes: name, memory, power,
    clocks, throttle reasons it can name, and an energy counter that advances."""
    from app.nvml_source import THROTTLE_NAMES, NvmlSource

    source = NvmlSource()
    assert source.available, source.reason
    assert isinstance(_load_native(worker, "load3")[-1], P.ModelLoaded)
    before = source.read()
    assert before.name and before.vram_total and 0 < before.vram_used <= before.vram_total
    requests, events, _ = worker
    requests.put(P.Generate("energy", PROMPT, {"temperature": 0.0, "max_tokens": 400}, enable_thinking=False))
    samples, got = [], []
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        samples.append(source.read())
        try:
            while True:
                got.append(events.get_nowait())
        except queue.Empty:
            pass
        if any(isinstance(e, P.Finished) and e.request_id == "energy" for e in got):
            break
        time.sleep(0.05)
    fin = next(e for e in got if isinstance(e, P.Finished) and e.request_id == "energy")
    assert fin.reason in ("stop", "length")
    # NVML refreshes the energy counter every few tens of ms (a demo reply can be shorter, session 35 call 2):
    # within the dashboard's own sampling period it must advance
    after = source.read()
    deadline = time.monotonic() + 2.0
    while before.energy_mj is not None and after.energy_mj <= before.energy_mj and time.monotonic() < deadline:
        time.sleep(0.05)
        after = source.read()
    if before.energy_mj is not None:
        assert after.energy_mj > before.energy_mj
    assert any(s.power_w for s in samples) and any(s.sm_clock_mhz for s in samples)
    for s in samples:
        assert s.throttle_reasons is None or set(s.throttle_reasons) <= set(THROTTLE_NAMES.values())
    out = os.environ.get("MONORAIL_NVML_SAMPLES_OUT")
    if out:
        with open(out, "w") as f:
            json.dump({"reply": asdict(fin), "samples": [asdict(s) for s in [before, *samples, after]]}, f, indent=1)
