"""bench/token_loop.py drives the app's token loop, the former host loop, the device sampler's and the step replay on a model; here on a
stand-in model that records what it is asked (no GPU needed), so the script's calls match NativeModel's and
NativeEngine's signatures and its arithmetic is right."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import SimpleNamespace

import torch

BENCH = Path(__file__).resolve().parents[1] / "bench"
V = 1000


def _token_loop():
    spec = importlib.util.spec_from_file_location("token_loop", BENCH / "token_loop.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


class _Engine:
    def __init__(self):
        self.forwards, self.samples = [], []

    def forward(self, lane, tokens, rope_pos, kv_start):
        assert len(rope_pos) == 3 * len(tokens) and all(0 <= t < V for t in tokens)
        self.forwards.append((lane, list(tokens), kv_start))

    def sample(self, lane, T, params, draw):
        self.samples.append(dict(params, draw=draw))
        return [(len(self.samples) * 7) % V]

    def time_steps(self, lane, kv_start, n):
        return 4.0  # ms


class _Model:
    """The parts of engine.native_backend.NativeModel the script uses."""

    def __init__(self):
        self.engine = _Engine()
        self.config = SimpleNamespace(text=SimpleNamespace(vocab_size=V))
        self.app_tokens, self.released = [], 0
        self.loops: list[dict] = []  # decode_tokens calls: their arguments and tokens drawn

    def new_state(self, max_tokens):
        return SimpleNamespace(lane=0, max_tokens=max_tokens, seq_len=0)

    def release(self, state):
        self.released += 1

    def forward(self, input_ids, state, last_only=False):
        ids = torch.as_tensor(input_ids).reshape(-1).tolist()
        assert last_only and len(ids) == 1 and state.seq_len < state.max_tokens
        self.app_tokens.append(ids[0])
        state.seq_len += 1
        return SimpleNamespace(logits=torch.randn(1, V))

    def decode_tokens(self, state, params, *, seed, vocab_limit, prompt_ids=(), ahead=2):
        call = dict(params=params, seed=seed, vocab_limit=vocab_limit, drawn=0, closed=False)
        self.loops.append(call)
        try:
            while True:
                call["drawn"] += 1
                yield call["drawn"] % V
        finally:
            call["closed"] = True
            self.release(state)


def test_token_loop_runs_each_loop_and_reports_per_token_figures(monkeypatch):
    from engine.sampling import SamplingParams, default_params

    tl = _token_loop()
    clock = iter(range(0, 10_000, 50))  # every reading 50 ms after the last: a timed loop of 5 tokens is 10 ms a token
    monkeypatch.setattr(tl, "time", SimpleNamespace(perf_counter=lambda: next(clock) / 1000.0))
    model = _Model()
    presets = {"greedy": SamplingParams(temperature=0.0), "thinking": default_params(True).with_(seed=7)}
    rows = tl.measure(model, presets, tokens=5, vocab=V)
    assert [r["preset"] for r in rows] == ["greedy", "thinking"]
    for r in rows:
        assert r["step_ms"] == 4.0 and r["step_tok_s"] == 250.0
        assert r["app_loop_ms"] == r["host_loop_ms"] == r["device_loop_ms"] == 10.0 and r["app_tok_s"] == 100.0
        assert r["app_idle_fraction"] == 0.6  # 1 - 4 / 10: the share of the app's token the GPU would have idled
    # the app loop: its preset, two warm-up tokens and 5 timed, then closed
    assert [(c["drawn"], c["closed"], c["vocab_limit"]) for c in model.loops] == [(7, True, V)] * 2
    assert model.loops[1]["params"] == presets["thinking"] and model.loops[1]["seed"] == 7
    # per preset: the app loop's prompt token, the host loop's prompt token, its warm-up and 5 tokens; the device
    # loop's warm-up and 5 steps at consecutive positions from 0, each drawing with its position as draw index
    assert len(model.app_tokens) == 2 * 8
    assert [kv for _, _, kv in model.engine.forwards] == list(range(6)) * 2
    assert [s["draw"] for s in model.engine.samples] == list(range(6)) * 2
    assert model.released == 6
    # the device sampler gets the preset's own parameters
    thinking = default_params(True)
    last = model.engine.samples[-1]
    assert last["temperature"] == thinking.temperature and last["top_k"] == thinking.top_k
    assert last["top_p"] == thinking.top_p and last["seed"] == 7 and last["vocab_limit"] == V
