"""engine/api.py hands decoding to a model's own token loop when it has one (the native engine's
decode_tokens, engine/native_loop.py), with the request's seed, parameters, vocabulary and prompt, and
closes that loop before the reply finishes (CPU: the demo model under a stand-in loop of the same contract)."""

import pytest
import torch

from engine.api import Finished, TextDelta
from engine.sampling import Sampler, SamplingParams


class LoopModel:
    """The reference model plus decode_tokens with the native loop's contract, computed on the host."""

    def __init__(self, inner):
        self.inner = inner
        self.calls: list[dict] = []
        self.open_loops = 0
        self.closed_at: list[int] = []  # tokens yielded when each loop closed
        self._last = None

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def forward(self, *args, **kwargs):
        out = self.inner.forward(*args, **kwargs)
        self._last = out.logits[-1]
        return out

    def decode_tokens(self, state, params, *, seed, vocab_limit, prompt_ids=(), ahead=2):
        self.calls.append(dict(seed=seed, vocab_limit=vocab_limit, prompt_ids=list(prompt_ids), params=params))
        sampler = Sampler(params.with_(seed=seed), valid_vocab_size=vocab_limit)
        self.open_loops += 1
        generated: list[int] = []
        try:
            logits = self._last
            while True:
                generated.append(sampler.sample(logits, generated, prompt_ids=prompt_ids))
                yield generated[-1]
                logits = self.forward(torch.tensor([generated[-1]]), state, last_only=True).logits[-1]
        finally:
            self.open_loops -= 1
            self.closed_at.append(len(generated))


@pytest.fixture(scope="module")
def engine(demo_engine):
    return demo_engine


def _reply(engine, msgs, sampling, loop_model=None, stop_after_events=None):
    text, fin = [], None
    for i, ev in enumerate(engine.generate(msgs, sampling, enable_thinking=False)):
        if isinstance(ev, TextDelta):
            text.append(ev.text)
        else:
            assert isinstance(ev, Finished)
            if loop_model is not None:
                assert loop_model.open_loops == 0, "the token loop must be closed before the reply finishes"
            fin = ev
        if stop_after_events is not None and i + 1 >= stop_after_events:
            break
    return "".join(text), fin


@pytest.mark.parametrize("sampling", [SamplingParams(temperature=0.0, max_tokens=7, ignore_eos=True),
                                      SamplingParams(temperature=0.9, top_k=20, top_p=0.9, presence_penalty=1.5,
                                                     repetition_penalty=1.2, seed=31, max_tokens=9, ignore_eos=True)])
def test_the_models_own_loop_gives_the_host_loops_reply(engine, sampling, monkeypatch):
    msgs = [{"role": "user", "content": "Name three rivers."}]
    plain = _reply(engine, msgs, sampling)
    loop_model = LoopModel(engine._model)
    monkeypatch.setattr(engine, "_model", loop_model)
    looped = _reply(engine, msgs, sampling, loop_model)
    assert looped[0] == plain[0] and looped[1].completion_tokens == plain[1].completion_tokens
    (call,) = loop_model.calls
    prompt = engine._build_prompt(msgs, False, None)
    assert call["prompt_ids"] == list(prompt.ids) and call["vocab_limit"] == engine.tokenizer.vocab_size
    assert call["seed"] == sampling.seed or sampling.seed is None
    assert loop_model.closed_at == [sampling.max_tokens]


def test_a_reply_abandoned_midway_closes_the_loop(engine, monkeypatch):
    loop_model = LoopModel(engine._model)
    monkeypatch.setattr(engine, "_model", loop_model)
    sampling = SamplingParams(temperature=0.0, max_tokens=50, ignore_eos=True)
    gen = engine.generate([{"role": "user", "content": "Count."}], sampling, enable_thinking=False)
    next(gen)
    next(gen)
    gen.close()  # the consumer walks away (the app's stop button, a closed connection)
    assert loop_model.open_loops == 0 and len(loop_model.closed_at) == 1
    # and the engine serves the next request
    _, fin = _reply(engine, [{"role": "user", "content": "Again."}], sampling.with_(max_tokens=3), loop_model)
    assert fin.completion_tokens == 3
