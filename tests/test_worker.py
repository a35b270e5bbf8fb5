"""The engine worker process over real spawn queues, with the scripted fake engine."""

from __future__ import annotations

import multiprocessing as mp
import time

import pytest

from engine import protocol as P
from engine.worker import resolve_factory, worker_main
from test_worker_fakes import collect_events

FAKE = "test_worker_fakes:fake_factory"



@pytest.fixture(scope="module")
def worker():
    ctx = mp.get_context("spawn")
    requests, events = ctx.Queue(), ctx.Queue()
    proc = ctx.Process(target=worker_main, args=(requests, events, FAKE), daemon=True)
    proc.start()
    ready = collect_events(events, lambda e: isinstance(e, P.WorkerReady))[-1]
    assert ready.protocol_version == P.PROTOCOL_VERSION and ready.pid == proc.pid
    yield requests, events, proc
    requests.put(P.Shutdown())
    proc.join(10)


def test_load_reports_progress_then_model_info(worker):
    requests, events, _ = worker
    requests.put(P.LoadModel("l1", "fake-a", {"max_context": 2048}))
    got = collect_events(events, lambda e: isinstance(e, (P.ModelLoaded, P.WorkerError)))
    fractions = [e.fraction for e in got if isinstance(e, P.Progress)]
    assert fractions == pytest.approx([1 / 3, 2 / 3, 1.0])
    loaded = got[-1]
    assert isinstance(loaded, P.ModelLoaded)
    assert (loaded.name, loaded.context_limit, loaded.random_weights) == ("fake-a", 2048, True)


def test_generate_streams_reasoning_then_content(worker):
    requests, events, _ = worker
    requests.put(P.LoadModel("l2", "fake", {}))
    collect_events(events, lambda e: isinstance(e, P.ModelLoaded))
    requests.put(P.Generate("g1", [{"role": "user", "content": "hello"}], {"temperature": 0.0}, True))
    got = collect_events(events, lambda e: isinstance(e, P.Finished))
    deltas = [e for e in got if isinstance(e, P.Delta)]
    assert all(e.request_id == "g1" for e in deltas)
    channels = [e.channel for e in deltas]
    assert channels.index("content") > channels.index("reasoning")
    assert "reasoning" not in channels[channels.index("content"):]
    assert "".join(e.text for e in deltas if e.channel == "content") == "You said: hello"
    fin = got[-1]
    assert fin.reason == "stop" and fin.completion_tokens == len(deltas) and fin.decode_tok_s == pytest.approx(56.7)


def test_cancel_stops_a_long_reply(worker):
    requests, events, _ = worker
    requests.put(P.LoadModel("l3", "fake", {}))
    collect_events(events, lambda e: isinstance(e, P.ModelLoaded))
    requests.put(P.Generate("g2", [{"role": "user", "content": "SLOW please"}], {}, False))
    collect_events(events, lambda e: isinstance(e, P.Delta) and e.channel == "content")
    requests.put(P.Cancel("g2"))
    got = collect_events(events, lambda e: isinstance(e, P.Finished))
    assert got[-1].reason == "cancelled"
    assert got[-1].completion_tokens < 400


def test_stats_report_the_worker_process(worker):
    requests, events, proc = worker
    requests.put(P.LoadModel("l4", "fake-stats", {}))
    collect_events(events, lambda e: isinstance(e, P.ModelLoaded))
    requests.put(P.GetStats("s1"))
    st = collect_events(events, lambda e: isinstance(e, P.WorkerStats))[-1]
    assert st.pid == proc.pid and st.model == "fake-stats" and st.backend == "fake" and not st.generating
    assert st.rss_bytes and st.rss_bytes > 1 << 20


def test_load_failure_is_a_typed_error_and_worker_survives(worker):
    requests, events, proc = worker
    requests.put(P.LoadModel("bad", "broken", {}))
    err = collect_events(events, lambda e: isinstance(e, P.WorkerError))[-1]
    assert err.request_id == "bad" and err.kind == "RuntimeError" and "config.json" in err.message
    requests.put(P.Generate("g3", [{"role": "user", "content": "x"}], {}, True))
    got = collect_events(events, lambda e: isinstance(e, P.Finished))
    assert any(isinstance(e, P.WorkerError) and e.kind == "NoModel" for e in got)
    assert proc.is_alive()


def test_crash_kills_the_process():
    ctx = mp.get_context("spawn")
    requests, events = ctx.Queue(), ctx.Queue()
    proc = ctx.Process(target=worker_main, args=(requests, events, FAKE), daemon=True)
    proc.start()
    requests.put(P.LoadModel("l", "fake", {"delay": 0.0}))
    collect_events(events, lambda e: isinstance(e, P.ModelLoaded))
    requests.put(P.Generate("g", [{"role": "user", "content": "CRASH now"}], {}, True))
    proc.join(20)
    assert proc.exitcode == 3


def test_bad_factory_spec_is_refused():
    with pytest.raises(ValueError, match="package.module:function"):
        resolve_factory("no_colon_here")


def test_worker_exits_when_its_parent_dies(tmp_path):
    """A GUI killed with SIGKILL cannot say goodbye; its worker must not keep the GPU."""
    import os
    import signal
    import subprocess
    import sys
    from pathlib import Path

    pidfile = tmp_path / "worker.pid"
    code = f"""
import multiprocessing as mp, sys, time
sys.path.insert(0, {str(Path(__file__).parent)!r})
from engine.worker import worker_main
if __name__ == '__main__':
    ctx = mp.get_context('spawn')
    rq, ev = ctx.Queue(), ctx.Queue()
    p = ctx.Process(target=worker_main, args=(rq, ev, {FAKE!r}))
    p.start()
    ev.get(timeout=30)
    open({str(pidfile)!r}, 'w').write(str(p.pid))
    time.sleep(60)
"""
    gui = subprocess.Popen([sys.executable, "-c", code])
    deadline = time.monotonic() + 30
    while not pidfile.exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    worker_pid = int(pidfile.read_text())
    os.kill(gui.pid, signal.SIGKILL)
    gui.wait()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            os.kill(worker_pid, 0)
        except ProcessLookupError:
            return
        if Path(f"/proc/{worker_pid}/stat").exists() and \
                Path(f"/proc/{worker_pid}/stat").read_text().split()[2] == "Z":
            return   # exited, waiting to be reaped
        time.sleep(0.2)
    os.kill(worker_pid, signal.SIGKILL)
    raise AssertionError("the worker outlived its parent")


def test_a_request_right_after_finished_waits_for_the_engines_clean_up_instead_of_busy():
    """The worker reports Finished before its generation thread has returned (the engine still closes its decode
    loop and releases the model). A request sent at once must be served, not refused as Busy: the GPU test of
    session 38 sent its next reply right after a cancelled one and got an empty answer."""
    import queue
    import threading

    from engine.worker import _Worker

    cleaning = threading.Event()

    class SlowToCloseEngine:
        info = None

        def generate(self, messages, sampling, *, enable_thinking=True, cancel=None):
            yield P.Finished(request_id="", reason="stop")
            cleaning.set()
            time.sleep(0.3)                  # the clean-up after the last event

    events = queue.Queue()
    worker = _Worker(events, lambda *a: None)
    worker.engine = SlowToCloseEngine()
    worker.handle(P.Generate("a", [{"role": "user", "content": "hi"}], {}, False))
    while not any(isinstance(e, P.Finished) for e in list(events.queue)):
        time.sleep(0.001)
    assert not cleaning.is_set() or worker.gen_thread.is_alive()
    worker.handle(P.Generate("b", [{"role": "user", "content": "again"}], {}, False))
    worker.gen_thread.join(5)
    got = list(events.queue)
    assert not [e for e in got if isinstance(e, P.WorkerError)], got
    assert [e.request_id for e in got if isinstance(e, P.Finished)] == ["a", "b"]
