"""engine.prefix_store: saved conversation states on disk. A state comes back exactly as saved; a damaged,
truncated or foreign file is removed and never returned; the store keeps within its byte budget (least recently
used first) and the disk's free reserve; a conversation that went on replaces its earlier saved states."""

from __future__ import annotations

import os
import time

import numpy as np
import pytest

from engine.prefix_store import PrefixStore, state_name

MB = 1 << 20


def _arrays(n: int, seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(1000).astype(np.float32), rng.integers(0, 255, n * 1000, dtype=np.uint8)]


def _store(tmp_path, budget=64 * MB, identity="model-a"):
    return PrefixStore(tmp_path / "states", identity, budget, free_reserve=0)


def test_a_saved_state_reads_back_exactly_and_is_found_by_a_longer_prompt(tmp_path):
    store = _store(tmp_path)
    ids = list(range(100, 400))
    arrays = _arrays(300)
    assert store.save(ids, {"seq_len": 300, "rope_delta": 0}, arrays) is not None
    # a new store over the same folder (another process after a restart) finds it from the headers
    again = _store(tmp_path)
    found = again.longest_prefix(ids + [7, 8, 9])
    assert found is not None and found.ids == ids
    assert again.longest_prefix(ids) is None                    # nothing would be left to compute
    assert again.longest_prefix([1] + ids) is None              # not a prefix
    meta, back = again.load(found)
    assert meta == {"seq_len": 300, "rope_delta": 0}
    assert [a.dtype for a in back] == [a.dtype for a in arrays]
    assert all(np.array_equal(a, b) for a, b in zip(arrays, back))


def test_a_damaged_file_is_removed_and_never_returned(tmp_path):
    store = _store(tmp_path)
    ids = list(range(50))
    entry = store.save(ids, {"seq_len": 50}, _arrays(50))
    with open(entry.path, "r+b") as f:     # one byte of the KV flipped
        f.seek(entry.nbytes - 200)
        b = f.read(1)
        f.seek(entry.nbytes - 200)
        f.write(bytes([b[0] ^ 0xFF]))
    assert store.load(entry) is None
    assert not entry.path.exists() and store.longest_prefix(ids + [1]) is None


def test_truncated_foreign_and_half_written_files_are_cleared_when_the_store_opens(tmp_path):
    store = _store(tmp_path)
    kept = store.save(list(range(40)), {}, _arrays(40))
    cut = store.save(list(range(1000, 1040)), {}, _arrays(40, seed=1))
    with open(cut.path, "r+b") as f:
        f.truncate(100)                                          # inside the header
    (store.folder / "junk.state").write_bytes(b"not a state at all")
    stale = store.folder / (state_name([5, 6]) + ".tmp")   # a write a killed process did not finish
    stale.write_bytes(b"x" * 10)
    past = time.time() - 2 * 3600
    os.utime(stale, (past, past))
    live = store.folder / (state_name([7, 8]) + ".tmp")    # a write another process has in progress
    live.write_bytes(b"x" * 10)
    renamed = store.folder / state_name([9, 9, 9])               # a state under another state's name
    renamed.write_bytes(kept.path.read_bytes())
    again = _store(tmp_path)
    assert [e.ids for e in again.entries()] == [kept.ids]
    assert sorted(p.name for p in again.folder.iterdir()) == sorted([kept.path.name, live.name])


def test_a_state_of_another_model_is_not_offered(tmp_path):
    a = _store(tmp_path, identity="model-a")
    a.save(list(range(60)), {}, _arrays(60))
    b = _store(tmp_path, identity="model-b")
    assert b.longest_prefix(list(range(61))) is None
    moved = b.folder / a.entries()[0].path.name                  # model-a's file copied into model-b's folder
    b.folder.mkdir(parents=True, exist_ok=True)
    moved.write_bytes(a.entries()[0].path.read_bytes())
    assert _store(tmp_path, identity="model-b").entries() == [] and not moved.exists()


def test_the_least_recently_used_states_leave_to_keep_within_the_budget(tmp_path):
    store = _store(tmp_path, budget=int(2.5 * MB))
    first = store.save([1] * 10, {}, _arrays(1000, seed=1))      # ~1 MB each
    second = store.save([2] * 10, {}, _arrays(1000, seed=2))
    past = time.time() - 100
    os.utime(second.path, (past, past))                          # second is now the least recently used
    assert store.load(first) is not None                         # and reading first back touches it
    third = store.save([3] * 10, {}, _arrays(1000, seed=3))
    assert third is not None
    assert {tuple(e.ids) for e in store.entries()} == {(1,) * 10, (3,) * 10}
    assert not second.path.exists()
    # a state over the whole budget is refused, and removes nothing
    assert store.save([4] * 10, {}, _arrays(3000)) is None
    assert {tuple(e.ids) for e in store.entries()} == {(1,) * 10, (3,) * 10}


def test_the_budget_counts_every_models_states(tmp_path):
    a = _store(tmp_path, budget=int(1.5 * MB), identity="model-a")
    old = a.save([1] * 10, {}, _arrays(1000))
    b = _store(tmp_path, budget=int(1.5 * MB), identity="model-b")
    assert b.save([2] * 10, {}, _arrays(1000)) is not None
    assert not old.path.exists()


def test_no_state_is_written_into_the_disks_reserve(tmp_path):
    store = PrefixStore(tmp_path / "states", "model-a", 64 * MB, free_reserve=1 << 62)
    assert store.save(list(range(10)), {}, _arrays(10)) is None
    assert store.entries() == []


def test_a_conversation_that_went_on_replaces_its_earlier_saved_state(tmp_path):
    store = _store(tmp_path)
    turn1 = list(range(200))
    other = list(range(500, 700))
    store.save(turn1, {}, _arrays(200))
    store.save(other, {}, _arrays(200))
    turn2 = turn1 + list(range(900, 950))
    store.save(turn2, {}, _arrays(250))
    assert sorted(len(e.ids) for e in store.entries()) == [200, 250]
    assert store.longest_prefix(turn2 + [1]).ids == turn2
    assert store.holds(other) and not store.holds(turn1)


@pytest.mark.parametrize("bad_meta_arrays", ["missing", "short"])
def test_a_header_that_lies_about_its_arrays_is_removed(tmp_path, bad_meta_arrays):
    store = _store(tmp_path)
    entry = store.save(list(range(30)), {}, _arrays(30))
    raw = bytearray(entry.path.read_bytes())
    if bad_meta_arrays == "missing":
        raw = raw[:-1000]                                        # the last array cut short
    else:
        raw = raw.replace(b'"nbytes": 30000', b'"nbytes": 90000')   # longer than the file
    entry.path.write_bytes(bytes(raw))
    assert store.load(entry) is None and not entry.path.exists()


def test_a_lowered_budget_holds_when_the_store_opens_and_remove_all_frees_everything(tmp_path):
    from engine.prefix_store import remove_all
    store = _store(tmp_path, budget=8 * MB)
    old = store.save([1] * 10, {}, _arrays(1000, seed=1))
    past = time.time() - 100
    os.utime(old.path, (past, past))
    store.save([2] * 10, {}, _arrays(1000, seed=2))
    smaller = _store(tmp_path, budget=int(1.5 * MB))
    assert [e.ids for e in smaller.entries()] == [[2] * 10] and not old.path.exists()
    other = _store(tmp_path, identity="model-b")
    other.save([3] * 10, {}, _arrays(10))
    assert remove_all(tmp_path / "states") > 0
    assert list((tmp_path / "states").rglob("*")) == []
