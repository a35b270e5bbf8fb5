"""Driving engine.api.Engine turn by turn in the prefix-reuse tests: a greedy reply, where a prompt's history
ends (the snapshot point), and the logits a reply's first token is drawn from."""

from __future__ import annotations

from engine.api import Finished, TextDelta
from engine.sampling import SamplingParams

GREEDY = SamplingParams(temperature=0.0, max_tokens=6, ignore_eos=True)


def greedy_reply(engine, messages):
    """(the reply's text, its Finished event) for a 6-token greedy reply without thinking."""
    text, fin = [], None
    for ev in engine.generate(messages, GREEDY, enable_thinking=False):
        if isinstance(ev, TextDelta):
            text.append(ev.text)
        else:
            assert isinstance(ev, Finished)
            fin = ev
    return "".join(text), fin


def history_end(engine, messages) -> int:
    """Where the prompt's history ends: the position of its last <|im_start|>."""
    ids = engine._build_prompt(messages, False, None).ids
    return max(i for i, t in enumerate(ids) if t == engine._im_start[0])


def first_logits(engine, messages):
    """(the logits the reply's first token is drawn from, the prompt tokens resumed), through generate's prefill."""
    prompt = engine._build_prompt(messages, False, None)
    _, logits, _, cached = engine._prefill(prompt, len(prompt.ids) + 8, None)
    return logits, cached
