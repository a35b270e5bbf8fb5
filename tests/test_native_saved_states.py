"""Saved conversation states on the native engine (GPU): a detached snapshot written by engine.prefix_store and
read back (its arrays mapped read-only from the file) resumes the lane exactly; a state of other sizes is refused;
and engine.api resumes a conversation from disk after the engine is unloaded and loaded again (a restart)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from native_helpers import requires_gpu
from turn_helpers import first_logits, greedy_reply, history_end

pytestmark = [pytest.mark.gpu, requires_gpu]

SYSTEM = {"role": "system", "content": "You are a careful assistant. " * 12}
A = [SYSTEM, {"role": "user", "content": "Name a long railway."}]


@pytest.fixture()
def data_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("MONORAIL_DATA_DIR", str(tmp_path / "data"))
    return tmp_path / "data"


def _load(**kw):
    from engine.api import Engine, EngineOptions
    opts = dict(backend="native", max_context=2048, prefix_reuse_min_tokens=0, prefix_disk_bytes=1 << 30,
                prefix_disk_min_tokens=16)
    opts.update(kw)
    return Engine.load("demo", EngineOptions(**opts))


def _ids(n, seed):
    return torch.randint(0, 2000, (n,), generator=torch.Generator().manual_seed(seed))


def test_a_state_read_back_from_disk_resumes_the_lane_exactly(data_dir, tmp_path):
    from engine.prefix_store import PrefixStore
    engine = _load()
    m = engine._model
    prefix, suffix = _ids(90, 21), _ids(17, 22)
    s = m.new_state(512)
    m.forward(prefix, s, last_only=True)
    detached = m.detach(m.snapshot(s))
    straight = m.forward(suffix, s, last_only=True).logits.clone()
    m.release(s)
    store = PrefixStore(tmp_path / "states", "test", 1 << 30, free_reserve=0)
    entry = store.save(prefix.tolist(), *m.export_snapshot(detached))
    assert entry is not None
    meta, arrays = store.load(entry)
    assert all(isinstance(a, np.memmap) or isinstance(a.base, np.memmap) for a in arrays)   # mapped, not copied
    back = m.import_snapshot(meta, arrays)
    assert back is not None and back.seq_len == 90 and not m.snapshot_needs_lane(back)
    state = m.resume(back, 512)
    resumed = m.forward(suffix, state, last_only=True).logits
    assert torch.allclose(resumed, straight, rtol=1e-5, atol=1e-5), float((resumed - straight).abs().max())
    m.release(state)
    # sizes that are not this engine's: refused, never loaded into a lane
    assert m.import_snapshot({**meta, "seq_len": 91}, arrays) is None
    assert m.import_snapshot(meta, [arrays[0][:-1], arrays[1]]) is None
    assert m.import_snapshot({"seq_len": 90}, arrays) is None
    engine.unload()


def test_the_native_engine_resumes_a_conversation_from_disk_after_a_restart(data_dir):
    from engine.api import Engine, EngineOptions
    first = _load()
    text1, _ = greedy_reply(first, A)
    turn2 = A + [{"role": "assistant", "content": text1}, {"role": "user", "content": "And a short one?"}]
    text2, _ = greedy_reply(first, turn2)
    first.unload()
    assert len(sorted((data_dir / "cache" / "states").rglob("*.state"))) == 1
    del first
    second = _load()
    turn3 = turn2 + [{"role": "assistant", "content": text2}, {"role": "user", "content": "Thanks."}]
    resumed, cached = first_logits(second, turn3)
    assert cached == history_end(second, turn2)
    second.unload()
    del second
    fresh = Engine.load("demo", EngineOptions(backend="native", max_context=2048, prefix_reuse=False))
    whole, none = first_logits(fresh, turn3)
    assert none == 0
    rel = float((resumed - whole).norm() / whole.norm())   # chunked differently: as test_native_prefix_reuse
    assert rel < 1e-2, rel
