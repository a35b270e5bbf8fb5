"""Prefix reuse on the native engine (GPU): a lane's recurrent state saved to host memory and loaded back
(NativeEngine.save_lane_state / load_lane_state) continues the sequence as if it had never stopped, a lane given
to a fresh sequence invalidates its snapshots, the cycle allocates no device memory, and engine.api resumes a
conversation's next turn from where the previous prompt's history ended."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
import torch

from native_helpers import requires_gpu
from turn_helpers import first_logits, greedy_reply, history_end

pytestmark = [pytest.mark.gpu, requires_gpu]


@pytest.fixture(scope="module")
def engines(tmp_path_factory):
    from engine.api import Engine, EngineOptions
    mp = pytest.MonkeyPatch()
    mp.setenv("MONORAIL_DATA_DIR", str(tmp_path_factory.mktemp("data")))
    try:
        reusing = Engine.load("demo", EngineOptions(backend="native", max_context=2048, prefix_reuse_min_tokens=0))
        fresh = Engine.load("demo", EngineOptions(backend="native", max_context=2048, prefix_reuse=False))
        yield reusing, fresh
    finally:
        mp.undo()


def _ids(n, seed):
    return torch.randint(0, 2000, (n,), generator=torch.Generator().manual_seed(seed))


def test_a_resumed_lane_continues_exactly(engines):
    m = engines[0]._model
    prefix, suffix = _ids(40, 1), _ids(23, 2)      # 40: the prefill path; 23: prefill again after the resume
    s = m.new_state(512)
    m.forward(prefix, s, last_only=True)
    snap = m.snapshot(s)
    assert snap.seq_len == 40 and snap.recurrent.size == m.engine.lane_state_floats()
    straight = m.forward(suffix, s, last_only=True).logits.clone()
    m.release(s)
    resumed_state = m.resume(snap, 512)
    assert resumed_state is not None and resumed_state.seq_len == 40
    resumed = m.forward(suffix, resumed_state, last_only=True).logits
    assert torch.allclose(resumed, straight, rtol=1e-5, atol=1e-5), float((resumed - straight).abs().max())
    # and a resume that did not restore the recurrent state would not: the check can fail
    m.release(resumed_state)
    zeroed = m.resume(snap, 512)
    m.engine.reset_lane(zeroed.lane)               # GDN state and conv rings back to zero, KV slots kept
    broken = m.forward(suffix, zeroed, last_only=True).logits
    assert not torch.allclose(broken, straight, rtol=1e-3, atol=1e-3)
    m.release(zeroed)


def test_a_fresh_sequence_on_the_lane_invalidates_its_snapshots(engines):
    m = engines[0]._model
    s = m.new_state(256)
    m.forward(_ids(20, 3), s, last_only=True)
    snap = m.snapshot(s)
    m.release(s)
    t = m.new_state(256)                            # the same lane (one lane), from slot 0: KV overwritten
    assert t.lane == snap.lane and m.resume(snap, 256) is None
    m.release(t)
    assert m.resume(snap, 256) is None


def test_a_detached_snapshot_resumes_after_other_sequences_used_the_lane(engines):
    m = engines[0]._model
    prefix, suffix = _ids(70, 11), _ids(19, 12)
    s = m.new_state(512)
    m.forward(prefix, s, last_only=True)
    snap = m.snapshot(s)
    detached = m.detach(snap)
    assert detached.kv.nbytes == m.engine.lane_kv_bytes(70) > 0
    assert m.snapshot_bytes(detached) == m.snapshot_bytes(snap, detached=True) == detached.kv.nbytes + snap.recurrent.nbytes
    straight = m.forward(suffix, s, last_only=True).logits.clone()
    m.release(s)
    other = m.new_state(512)                       # another conversation overwrites the lane's KV from slot 0
    m.forward(_ids(120, 13), other, last_only=True)
    assert m.resume(snap, 512) is None             # the snapshot that left its KV on the lane lapsed
    resumed = m.resume(detached, 512)               # the detached one carries its KV back
    assert resumed is not None and resumed.seq_len == 70 and other.revoked
    out = m.forward(suffix, resumed, last_only=True).logits
    assert torch.allclose(out, straight, rtol=1e-5, atol=1e-5), float((out - straight).abs().max())
    assert m.detach(m.snapshot(resumed)).kv.nbytes == m.engine.lane_kv_bytes(89)
    # the KV really came back from host memory: with the copy's bytes cleared the continuation differs
    m.release(resumed)
    wiped = m.resume(replace(detached, kv=np.zeros_like(detached.kv)), 512)
    broken = m.forward(suffix, wiped, last_only=True).logits
    assert not torch.allclose(broken, straight, rtol=1e-3, atol=1e-3)
    m.release(wiped)
    with pytest.raises((ValueError, IndexError)):
        m.engine.load_lane_kv(0, 70, detached.kv[:-1])   # a buffer of the wrong size is refused


def test_snapshot_and_resume_allocate_no_device_memory(engines):
    from engine.native import load_native
    nat = load_native()
    m = engines[0]._model
    s = m.new_state(256)
    m.forward(_ids(30, 4), s, last_only=True)
    m.resume(m.snapshot(s), 256)                    # first use
    torch.cuda.synchronize()
    free = nat.device_memory()[0]
    for seed in range(5):
        s = m.new_state(256)
        m.forward(_ids(17 + seed, seed), s, last_only=True)
        r = m.resume(m.snapshot(s), 256)
        m.forward(_ids(5, seed), r, last_only=True)
        d = m.detach(m.snapshot(r))                 # a host copy of the KV, loaded back into a fresh claim
        m.release(r)
        m.release(m.resume(d, 256))
    assert nat.device_memory()[0] == free


def test_the_next_turn_resumes_on_the_native_engine(engines):
    from engine.native_backend import CHAT_STEP_PATH_MAX_TOKENS
    reusing, fresh = engines
    assert reusing._model.step_path_max_tokens == CHAT_STEP_PATH_MAX_TOKENS   # short inputs run as steps (Engine)
    reusing._prefixes = []

    def close_to_a_whole_prefill(messages, resumed_tokens):
        """The first token's logits after resuming against a whole prefill on an engine that does not reuse
        (chunked differently)."""
        resumed, cached = first_logits(reusing, messages)
        whole, none = first_logits(fresh, messages)
        assert cached == resumed_tokens and none == 0
        rel = float((resumed - whole).norm() / whole.norm())
        assert rel < 1e-2, rel

    system = {"role": "system", "content": "You are a careful assistant. " * 12}
    turn1 = [system, {"role": "user", "content": "Name a long railway."}]
    text1, fin1 = greedy_reply(reusing, turn1)
    assert fin1.cached_tokens == 0 and fin1.completion_tokens == 6
    turn2 = turn1 + [{"role": "assistant", "content": text1}, {"role": "user", "content": "And a short one?"}]
    text2, fin2 = greedy_reply(reusing, turn2)
    assert fin2.cached_tokens == history_end(reusing, turn1) and fin2.completion_tokens == 6 and text2
    again, fin3 = greedy_reply(reusing, turn2)     # regenerate: the same history, the same greedy reply
    assert fin3.cached_tokens == history_end(reusing, turn2) and again == text2
    close_to_a_whole_prefill(turn2, history_end(reusing, turn2))
    # another conversation, then this one's next turn: resumed from the snapshot set aside in host memory
    other = [{"role": "system", "content": "Another system prompt. " * 10}, {"role": "user", "content": "Hello?"}]
    assert greedy_reply(reusing, other)[1].cached_tokens == 0
    turn3 = turn2 + [{"role": "assistant", "content": text2}, {"role": "user", "content": "Thanks."}]
    close_to_a_whole_prefill(turn3, history_end(reusing, turn2))


def test_editing_the_last_message_on_the_native_engine(engines):
    """The previous turn's snapshot is kept beside the newest: an edited last message resumes from it, and the
    newest (whose KV slots the edit overwrites) is not resumed afterwards."""
    reusing, fresh = engines
    reusing._prefixes = []
    system = {"role": "system", "content": "You answer in short sentences about railways. " * 10}
    t1 = [system, {"role": "user", "content": "Name a long railway."}]
    t2 = t1 + [{"role": "assistant", "content": "The Trans-Siberian."}, {"role": "user", "content": "How long is it?"}]
    edited = t1 + [{"role": "assistant", "content": "The Trans-Siberian."}, {"role": "user", "content": "Who built it?"}]

    first_logits(reusing, t1)
    first_logits(reusing, t2)
    for messages in (edited, t2):                  # the edit, then the original turn 2 again
        got, cached = first_logits(reusing, messages)
        want, _ = first_logits(fresh, messages)
        assert cached == history_end(reusing, t1)
        rel = float((got - want).norm() / want.norm())
        assert rel < 1e-2, rel


def test_editing_after_a_switch_back_loads_no_kv_on_the_native_engine(engines):
    """After another conversation and back, editing the turn resumes the detached snapshot where the lane already
    holds its KV (NativeModel.rebase): no lane is claimed afresh, and the logits match a whole prefill."""
    reusing, fresh = engines
    reusing._prefixes = []
    m = reusing._model
    system = {"role": "system", "content": "You answer in short sentences about railways. " * 10}
    a = [system, {"role": "user", "content": "Which railway is longest?"}]
    a2 = a + [{"role": "assistant", "content": "The Trans-Siberian."}, {"role": "user", "content": "How old is it?"}]
    first_logits(reusing, a)
    first_logits(reusing, [{"role": "system", "content": "Another assistant entirely. " * 10},
                           {"role": "user", "content": "Hi?"}])
    assert first_logits(reusing, a2)[1] == history_end(reusing, a)       # back, from the detached snapshot
    epochs = list(m._lane_epoch)
    edited = a2[:-1] + [{"role": "user", "content": "Who built it?"}]
    got, cached = first_logits(reusing, edited)
    want, _ = first_logits(fresh, edited)
    assert cached == history_end(reusing, a) and m._lane_epoch == epochs  # resumed on the lane, not reloaded
    rel = float((got - want).norm() / want.norm())
    assert rel < 1e-2, rel
