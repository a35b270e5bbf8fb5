"""Saved conversation states through engine.api.Engine (EngineOptions.prefix_disk_bytes), on the demo model
(reference backend): after the engine is unloaded and a new one loaded (a restart), a long conversation's next
turn resumes from disk and gives the logits and reply of a full recompute. A conversation set aside is saved too; a
damaged file, changed weights or the store turned off mean a recompute, never a wrong state."""

from __future__ import annotations

import os

import pytest
import torch

from engine.api import Engine, EngineOptions
from turn_helpers import first_logits, greedy_reply, history_end

SYSTEM = {"role": "system", "content": "You are a careful assistant. " * 12}
A = [SYSTEM, {"role": "user", "content": "Name a long railway."}]
B = [{"role": "system", "content": "Another system prompt. " * 10}, {"role": "user", "content": "Question B?"}]


def _then(messages, reply, question):
    return messages + [{"role": "assistant", "content": reply}, {"role": "user", "content": question}]


@pytest.fixture()
def data_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("MONORAIL_DATA_DIR", str(tmp_path / "data"))
    return tmp_path / "data"


def _saving(**kw) -> Engine:
    opts = dict(max_context=4096, prefix_reuse_min_tokens=0, prefix_disk_bytes=1 << 30, prefix_disk_min_tokens=16)
    opts.update(kw)
    return Engine.load("demo", EngineOptions(**opts))


@pytest.fixture(scope="module")
def fresh(tmp_path_factory):
    mp = pytest.MonkeyPatch()
    mp.setenv("MONORAIL_DATA_DIR", str(tmp_path_factory.mktemp("fresh")))
    try:
        yield Engine.load("demo", EngineOptions(max_context=4096, prefix_reuse=False))
    finally:
        mp.undo()


def _saved_files(data_dir):
    return sorted((data_dir / "cache" / "states").rglob("*.state"))


def test_after_a_restart_the_conversation_resumes_from_disk_and_answers_the_same(data_dir, fresh):
    first = _saving()
    text1, _ = greedy_reply(first, A)
    turn2 = _then(A, text1, "And a short one?")
    text2, fin2 = greedy_reply(first, turn2)
    assert fin2.cached_tokens > 0
    first.unload()                                   # the app closing: the newest state is written
    assert len(_saved_files(data_dir)) == 1
    second = _saving()                               # a new process, the same model
    turn3 = _then(turn2, text2, "Thanks.")
    resumed, cached = first_logits(second, turn3)
    whole, none = first_logits(fresh, turn3)
    assert cached == history_end(second, turn2) and none == 0
    assert torch.allclose(resumed, whole, rtol=1e-4, atol=1e-4), float((resumed - whole).abs().max())
    text3, fin3 = greedy_reply(second, turn3)       # (first_logits moved the snapshot to turn 3's history end)
    assert fin3.cached_tokens == history_end(second, turn3) and text3 == greedy_reply(fresh, turn3)[0]


def test_a_conversation_set_aside_is_saved_and_resumes_after_a_restart(data_dir, fresh):
    first = _saving()
    text_a, _ = greedy_reply(first, A)
    text_b, _ = greedy_reply(first, B)               # A set aside: written by the writer thread
    first.unload()                                   # B, the newest, written here
    assert len(_saved_files(data_dir)) == 2
    second = _saving()
    a2 = _then(A, text_a, "More?")
    text_a2, fin_a2 = greedy_reply(second, a2)
    assert fin_a2.cached_tokens == history_end(second, A) and text_a2 == greedy_reply(fresh, a2)[0]
    b2 = _then(B, text_b, "Go on.")
    text_b2, fin_b2 = greedy_reply(second, b2)
    assert fin_b2.cached_tokens == history_end(second, B) and text_b2 == greedy_reply(fresh, b2)[0]


def test_a_damaged_saved_state_is_recomputed_and_removed(data_dir, fresh):
    first = _saving()
    text1, _ = greedy_reply(first, A)
    first.unload()
    (path,) = _saved_files(data_dir)
    raw = bytearray(path.read_bytes())
    raw[-100] ^= 0xFF
    path.write_bytes(bytes(raw))
    second = _saving()
    a2 = _then(A, text1, "More?")
    text2, fin2 = greedy_reply(second, a2)
    assert fin2.cached_tokens == 0 and text2 == greedy_reply(fresh, a2)[0]
    assert path not in _saved_files(data_dir)


def test_changed_weights_do_not_resume_a_state_saved_with_the_old_ones(data_dir):
    first = _saving()
    text1, _ = greedy_reply(first, A)
    first.unload()
    weights = sorted((data_dir / "models").rglob("*.safetensors"))
    assert weights
    st = weights[0].stat()
    os.utime(weights[0], ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))   # the checkpoint replaced in place
    second = _saving()
    assert greedy_reply(second, _then(A, text1, "More?"))[1].cached_tokens == 0


def test_short_conversations_and_a_store_turned_off_write_nothing(data_dir):
    off = _saving(prefix_disk_bytes=0)
    greedy_reply(off, A)
    off.unload()
    short = _saving(prefix_disk_min_tokens=10_000)
    greedy_reply(short, A)
    short.unload()
    assert _saved_files(data_dir) == []


def test_the_worker_saves_the_conversation_when_it_shuts_down(data_dir):
    """The app's path: Settings' prefix_disk_bytes reaches the engine through the worker, and the Shutdown the
    app sends when it closes writes the current conversation (long enough: the default 2048-token minimum)."""
    import queue

    from engine import protocol as P
    from engine.worker import _Worker, load_engine

    events = queue.Queue()
    worker = _Worker(events, load_engine)
    worker.handle(P.LoadModel("load", "demo", {"backend": "reference", "max_context": 8192,
                                               "prefix_disk_bytes": 1 << 30}))
    long_system = {"role": "system", "content": "Keep every answer short and exact. " * 300}
    worker.handle(P.Generate("gen", [long_system, {"role": "user", "content": "Hello?"}],
                             {"temperature": 0.0, "max_tokens": 2}, False))
    worker.gen_thread.join(120)
    assert any(isinstance(e, P.Finished) and e.reason != "error" for e in list(events.queue))
    assert _saved_files(data_dir) == []              # kept on the GPU / in memory until the model goes
    assert worker.handle(P.Shutdown()) is False
    (path,) = _saved_files(data_dir)
    assert path.stat().st_size > 0


def test_turning_saved_states_off_in_the_app_frees_the_disk(data_dir):
    """Settings → Conversation cache (disk) set to 0 reaches the worker as prefix_disk_bytes=0 on the next load: the
    states already saved are deleted (the library's default 0 touches nothing: only the app's load does this)."""
    import queue

    from engine import protocol as P
    from engine.worker import _Worker, load_engine

    first = _saving()
    greedy_reply(first, A)
    first.unload()
    assert len(_saved_files(data_dir)) == 1
    Engine.load("demo", EngineOptions(max_context=4096))           # the library's default: nothing removed
    assert len(_saved_files(data_dir)) == 1
    worker = _Worker(queue.Queue(), load_engine)
    worker.handle(P.LoadModel("load", "demo", {"backend": "reference", "max_context": 4096, "prefix_disk_bytes": 0}))
    assert _saved_files(data_dir) == []
