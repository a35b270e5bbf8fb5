"""engine.api's prefix reuse on a model whose snapshots leave their KV where it was written, as the native engine's
do (one lane; a fresh sequence overwrites it from slot 0, a resumed one from its own end). The reference model is
wrapped to behave that way, so the bookkeeping that keeps such snapshots valid is checked on the CPU: a
conversation set aside is detached (its KV copied) before another sequence takes the lane, and resuming an
earlier point of the same conversation drops the snapshots past it, whose slots get overwritten. Each reply is
compared with an engine that recomputes every prompt: a snapshot resumed over overwritten slots would differ."""

from __future__ import annotations

from dataclasses import dataclass, replace

import pytest

from engine.api import Engine, EngineOptions
from turn_helpers import greedy_reply, history_end

CAPACITY = 4096


@dataclass(eq=False)
class LaneSnapshot:
    epoch: int
    seq_len: int
    rope_delta: int
    gdn: list             # clones of the GDN states
    lane: object          # the lane's ModelState (its KV slots below seq_len, as long as nothing overwrote them)
    kv: list | None = None  # (k, v) copies once detached


class OneLaneModel:
    """The reference model with one lane: every sequence runs in the same ModelState."""

    def __init__(self, ref):
        self.ref, self.epoch, self.lane, self.detaches = ref, 0, None, 0

    def __getattr__(self, name):
        return getattr(self.ref, name)

    def new_state(self, max_tokens):
        self.epoch += 1
        self.lane = self.ref.new_state(CAPACITY)
        return self.lane

    def snapshot(self, state):
        return LaneSnapshot(self.epoch, state.seq_len, state.rope_delta, [g.clone() for g in state.gdn], state)

    @staticmethod
    def snapshot_needs_lane(snap):
        return snap.kv is None

    def snapshot_bytes(self, snap, *, detached=False):
        n = sum(g.conv.nbytes + g.recurrent.nbytes for g in snap.gdn)
        if snap.kv is not None or detached:
            n += sum(c.k[:, :snap.seq_len].nbytes * 2 for c in snap.lane.kv)
        return n

    def rebase(self, snap, onto):
        if onto.kv is not None or onto.epoch != self.epoch or onto.seq_len < snap.seq_len:
            return None
        return replace(snap, epoch=onto.epoch, lane=onto.lane, kv=None)

    def detach(self, snap):
        self.detaches += 1
        if snap.kv is not None:
            return snap
        if snap.epoch != self.epoch:
            return None
        return replace(snap, kv=[(c.k[:, :snap.seq_len].clone(), c.v[:, :snap.seq_len].clone()) for c in snap.lane.kv])

    def resume(self, snap, max_tokens):
        if snap.kv is not None:
            state = self.new_state(max_tokens)
            for c, (k, v) in zip(state.kv, snap.kv):
                c.k[:, :snap.seq_len], c.v[:, :snap.seq_len] = k, v
        elif snap.epoch != self.epoch:
            return None
        else:
            state = self.lane                     # the same slots: those past seq_len get written again
        for dst, src in zip(state.gdn, snap.gdn):
            dst.conv.copy_(src.conv)
            dst.recurrent.copy_(src.recurrent)
        for c in state.kv:
            c.length = snap.seq_len
        state.seq_len, state.rope_delta = snap.seq_len, snap.rope_delta
        return state


@pytest.fixture(scope="module")
def engines(tmp_path_factory):
    mp = pytest.MonkeyPatch()
    mp.setenv("MONORAIL_DATA_DIR", str(tmp_path_factory.mktemp("data")))
    try:
        lane = Engine.load("demo", EngineOptions(max_context=CAPACITY, prefix_reuse_min_tokens=0))
        lane._model = OneLaneModel(lane._model)
        fresh = Engine.load("demo", EngineOptions(max_context=CAPACITY, prefix_reuse=False))
        yield lane, fresh
    finally:
        mp.undo()


SYSTEM = {"role": "system", "content": "You answer in short sentences about railways. " * 10}


def test_switching_conversations_detaches_the_one_set_aside(engines):
    lane, fresh = engines
    lane._prefixes = []
    a = [SYSTEM, {"role": "user", "content": "Which railway is longest?"}]
    text_a, _ = greedy_reply(lane, a)
    b = [{"role": "system", "content": "Another assistant entirely. " * 10}, {"role": "user", "content": "Hi?"}]
    greedy_reply(lane, b)                                 # overwrites the lane from slot 0
    assert lane._prefixes[1].state.kv is not None   # conversation A was copied off the lane first
    a2 = a + [{"role": "assistant", "content": text_a}, {"role": "user", "content": "And the oldest?"}]
    text, fin = greedy_reply(lane, a2)
    assert fin.cached_tokens == history_end(lane, a) and text == greedy_reply(fresh, a2)[0]


def test_editing_the_last_message_resumes_from_the_turn_before_and_drops_what_it_overwrites(engines):
    lane, fresh = engines
    lane._prefixes = []
    t1 = [SYSTEM, {"role": "user", "content": "Name a long railway."}]
    text1, _ = greedy_reply(lane, t1)
    t2 = t1 + [{"role": "assistant", "content": text1}, {"role": "user", "content": "How long is it?"}]
    greedy_reply(lane, t2)
    assert [len(p.ids) for p in lane._prefixes] == [history_end(lane, t2), history_end(lane, t1)]
    edited = t1 + [{"role": "assistant", "content": text1}, {"role": "user", "content": "Who built it, and when?"}]
    text_e, fin_e = greedy_reply(lane, edited)           # resumes turn 1's snapshot; the lane is rewritten past it
    assert fin_e.cached_tokens == history_end(lane, t1) and text_e == greedy_reply(fresh, edited)[0]
    # the original turn 2 again: its snapshot's slots were overwritten, so it must not be resumed from
    text2, fin2 = greedy_reply(lane, t2)
    assert fin2.cached_tokens == history_end(lane, t1) and text2 == greedy_reply(fresh, t2)[0]


def test_editing_after_a_switch_back_resumes_on_the_lane_without_copies(engines):
    """Back in a conversation (resumed from a detached snapshot), its next turn's snapshot extends the detached one;
    editing that turn resumes the detached one where the lane already holds its KV: no KV is copied either way."""
    lane, fresh = engines
    lane._prefixes = []
    a = [SYSTEM, {"role": "user", "content": "Which railway is longest?"}]
    _reply_text, _ = greedy_reply(lane, a)
    greedy_reply(lane, [{"role": "system", "content": "Another assistant entirely. " * 10},
                        {"role": "user", "content": "Hi?"}])
    a2 = a + [{"role": "assistant", "content": "The Trans-Siberian."}, {"role": "user", "content": "How old is it?"}]
    assert greedy_reply(lane, a2)[1].cached_tokens == history_end(lane, a)      # from the detached snapshot
    detaches, epoch = lane._model.detaches, lane._model.epoch
    edited = a2[:-1] + [{"role": "user", "content": "Who built it?"}]
    text, fin = greedy_reply(lane, edited)
    assert fin.cached_tokens == history_end(lane, a) and text == greedy_reply(fresh, edited)[0]
    assert (lane._model.detaches, lane._model.epoch) == (detaches, epoch)       # no copy, no fresh claim
    text, fin = greedy_reply(lane, a2)             # the original turn again: a2's snapshot was overwritten
    assert fin.cached_tokens == history_end(lane, a) and text == greedy_reply(fresh, a2)[0]
