"""Which engine path NativeModel.forward takes for an input (CPU: the engine is a stub that records its calls):
longer inputs go through one prefill call where the plan has a prefill workspace, shorter ones as steps of the
planned width; in chat use (Engine) inputs up to CHAT_STEP_PATH_MAX_TOKENS run as steps, since a prefill call for
a few tokens deep in a long context costs far more than the steps (bench/NOTES.md, session 37)."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
import torch

from engine.native_backend import CHAT_STEP_PATH_MAX_TOKENS, STEP_TOKENS, NativeModel

VOCAB = 50


class RecordingEngine:
    prefill_chunk = 4096
    has_mtp = False   # no MTP head: forward runs no head pairs

    def __init__(self):
        self.calls = []

    def reset_lane(self, lane):
        pass

    def forward(self, lane, tokens, rope_pos, kv_start, keep_states=False):
        assert len(rope_pos) == 3 * len(tokens)
        self.calls.append(("verify" if keep_states else "step", len(tokens), kv_start))

    def commit_states(self, lane, kept):
        self.calls.append(("commit", lane, kept))

    def prefill(self, lane, tokens, rope_pos, kv_start):
        self.calls.append(("prefill", len(tokens), kv_start))

    def logits(self, rows):
        return np.zeros((rows, VOCAB), dtype=np.float32)


def make(step_tokens=STEP_TOKENS, mtp_drafts=0, lanes=1):
    cfg = SimpleNamespace(text=SimpleNamespace(vocab_size=VOCAB))
    return NativeModel(config=cfg, engine=RecordingEngine(), plan=None, max_context=4096, kv_dtype="int8", lanes=lanes,
                       step_tokens=step_tokens, mtp_drafts=mtp_drafts)


def test_inputs_longer_than_a_step_take_one_prefill_call_by_default():
    m = make()
    s = m.new_state(1000)
    m.forward(torch.arange(100) % VOCAB, s, last_only=True)
    m.forward(torch.arange(16) % VOCAB, s, last_only=True)
    assert m.engine.calls == [("prefill", 100, 0), ("step", 16, 100)] and s.seq_len == 116


def test_in_chat_use_short_inputs_run_as_steps_and_long_ones_prefill():
    m = make()
    m.step_path_max_tokens = CHAT_STEP_PATH_MAX_TOKENS
    s = m.new_state(1000)
    out = m.forward(torch.arange(100) % VOCAB, s, last_only=True)
    assert m.engine.calls == [("step", 16, 16 * i) for i in range(6)] + [("step", 4, 96)]
    assert out.logits.shape == (1, VOCAB) and s.seq_len == 100
    m.engine.calls.clear()
    m.forward(torch.arange(CHAT_STEP_PATH_MAX_TOKENS + 1) % VOCAB, s, last_only=True)
    assert m.engine.calls == [("prefill", CHAT_STEP_PATH_MAX_TOKENS + 1, 100)]


def test_a_one_token_plan_steps_one_token_at_a_time():
    m = make(step_tokens=1)                       # NativeModel.random_27b's default plan
    s = m.new_state(100)
    m.forward(torch.arange(3), s, last_only=True)
    assert m.engine.calls == [("prefill", 3, 0)]
    m.engine.calls.clear()
    m.forward(torch.arange(3), s)                 # every row wanted: steps, within the planned width
    assert m.engine.calls == [("step", 1, 3), ("step", 1, 4), ("step", 1, 5)]


def test_a_verify_step_is_one_step_that_keeps_states_and_commit_keeps_the_accepted_tokens():
    m = make(mtp_drafts=3)
    s = m.new_state(1000)
    m.forward(torch.arange(40) % VOCAB, s, last_only=True)
    out = m.forward(torch.tensor([7, 8, 9, 10]), s, keep_states=True)
    assert out.logits.shape == (4, VOCAB) and m.last_logit_rows == 4 and s.seq_len == 44
    m.commit(s, 2)                                # the last token and one accepted draft
    assert s.seq_len == 42
    m.forward(torch.tensor([11]), s)              # the next step starts where the kept tokens end
    assert m.engine.calls == [("prefill", 40, 0), ("verify", 4, 40), ("commit", s.lane, 2), ("step", 1, 42)]


def test_verify_leaves_the_logits_on_the_device():
    """NativeModel.verify (the speculative rounds' step): the same engine step as forward(keep_states=True) and the
    same commit, without copying T rows of logits to the host."""
    m = make(mtp_drafts=3)
    s = m.new_state(1000)
    m.forward(torch.arange(40) % VOCAB, s, last_only=True)
    reads = []
    m.engine.logits = lambda rows: reads.append(rows)
    assert m.verify([7, 8, 9, 10], s) is None and reads == []
    assert m.last_logit_rows == 4 and s.seq_len == 44
    m.commit(s, 3)
    assert s.seq_len == 43
    assert m.engine.calls == [("prefill", 40, 0), ("verify", 4, 40), ("commit", s.lane, 3)]


def test_commit_needs_the_verify_step_of_its_sequence_just_before():
    from engine.native_backend import NativeBackendError
    m = make(mtp_drafts=2, lanes=2)
    s, other = m.new_state(100), m.new_state(100)
    with pytest.raises(NativeBackendError, match="keep_states"):
        m.commit(s, 1)                            # no verify step at all
    m.forward([1, 2, 3], s, keep_states=True)
    with pytest.raises(NativeBackendError, match="keep_states"):
        m.commit(other, 1)                        # another sequence's verify step
    with pytest.raises(NativeBackendError, match="1..3"):
        m.commit(s, 4)
    with pytest.raises(NativeBackendError, match="1..3"):
        m.commit(s, 0)
    m.commit(s, 3)                                # everything accepted
    assert s.seq_len == 3
    with pytest.raises(NativeBackendError, match="keep_states"):
        m.commit(s, 1)                            # once per verify step
    m.forward([1, 2], s, keep_states=True)
    m.forward([3], s)                             # any other forward in between
    with pytest.raises(NativeBackendError, match="keep_states"):
        m.commit(s, 1)
    assert [c for c in m.engine.calls if c[0] == "commit"] == [("commit", s.lane, 3)]


@pytest.mark.parametrize("n", [1, 4])
def test_a_verify_step_runs_the_last_token_and_at_most_mtp_drafts(n):
    from engine.native_backend import NativeBackendError
    m = make(mtp_drafts=2)
    s = m.new_state(100)
    with pytest.raises(NativeBackendError, match="2..3 tokens"):
        m.forward(list(range(n)), s, keep_states=True)
    assert m.engine.calls == [] and s.seq_len == 0


class HeadRecordingEngine(RecordingEngine):
    has_mtp = True

    def mtp_step(self, lane, next_tokens, rope_pos, kv_start, hidden_row, chained):
        self.calls.append(("mtp", list(next_tokens), kv_start, hidden_row, chained))


def test_the_heads_pairs_cover_a_prompt_fed_in_several_calls():
    """With the MTP head, each position's pair (its hidden row, the token after it) runs once: inside prefill for a
    call's own tokens, then closed by the next call's first token (Engine feeds long prompts in pieces), the last one
    left pending for the first sampled token; after the lane moved on without the head the pending pairs are
    dropped, not closed with a token that does not follow them."""
    m = NativeModel(config=SimpleNamespace(text=SimpleNamespace(vocab_size=VOCAB)), engine=HeadRecordingEngine(),
                    plan=None, max_context=4096, kv_dtype="int8", lanes=1, mtp_drafts=3)
    s = m.new_state(1000)
    m.forward(torch.arange(40) % VOCAB, s, last_only=True)          # prefill: pairs of positions 0..38 inside
    assert s.mtp_pending == (0, 39, [])
    m.forward(torch.arange(40, 80) % VOCAB, s, last_only=True)      # closes position 39 with token 40 first
    assert m.engine.calls[1:] == [("mtp", [40], 39, 0, False), ("prefill", 40, 40)]
    assert s.mtp_pending == (0, 79, [])
    s.seq_len += 5                                                  # the GPU decode loop ran five steps
    m.engine.calls.clear()
    m.forward(torch.tensor([7, 8]), s)
    assert m.engine.calls == [("step", 2, 85)] and s.mtp_pending == (0, 85, [8])
