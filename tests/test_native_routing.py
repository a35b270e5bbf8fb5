"""Which engine path NativeModel.forward takes for an input (CPU: the engine is a stub that records its calls):
longer inputs go through one prefill call where the plan has a prefill workspace, shorter ones as steps of the
planned width; in chat use (Engine) inputs up to CHAT_STEP_PATH_MAX_TOKENS run as steps, since a prefill call for
a few tokens deep in a long context costs far more than the steps (bench/NOTES.md, session 37)."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import torch

from engine.native_backend import CHAT_STEP_PATH_MAX_TOKENS, STEP_TOKENS, NativeModel

VOCAB = 50


class RecordingEngine:
    prefill_chunk = 4096

    def __init__(self):
        self.calls = []

    def reset_lane(self, lane):
        pass

    def forward(self, lane, tokens, rope_pos, kv_start):
        assert len(rope_pos) == 3 * len(tokens)
        self.calls.append(("step", len(tokens), kv_start))

    def prefill(self, lane, tokens, rope_pos, kv_start):
        self.calls.append(("prefill", len(tokens), kv_start))

    def logits(self, rows):
        return np.zeros((rows, VOCAB), dtype=np.float32)


def make(step_tokens=STEP_TOKENS):
    cfg = SimpleNamespace(text=SimpleNamespace(vocab_size=VOCAB))
    return NativeModel(config=cfg, engine=RecordingEngine(), plan=None, max_context=4096, kv_dtype="int8", lanes=1,
                       step_tokens=step_tokens)


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
