"""MTP speculative decoding on the reference model: exactly the plain greedy tokens, whatever the drafts."""

import pytest
import torch

from engine.reference import ReferenceModel
from engine.speculative import MTPDrafter, SpecStats, speculative_tokens

N_TOKENS = 20


def _argmax(logits, _generated=None):
    return int(logits.argmax())


@pytest.fixture(scope="module")
def model(tiny_checkpoint):
    return ReferenceModel.from_checkpoint(tiny_checkpoint, gdn_mode="auto")


@pytest.fixture(scope="module")
def prompt():
    return [int(x) for x in torch.randint(0, 1000, (23,), generator=torch.Generator().manual_seed(3))]


@pytest.fixture(scope="module")
def plain_greedy(model, prompt):
    state = model.new_state(len(prompt) + N_TOKENS + 2)
    logits = model.forward(torch.tensor(prompt), state, last_only=True).logits[-1]
    out = []
    for _ in range(N_TOKENS):
        tok = _argmax(logits)
        out.append(tok)
        logits = model.forward(torch.tensor([tok]), state).logits[-1]
    return out


class _ScriptedDrafter(MTPDrafter):
    """Keeps the MTP cache in step like the real drafter, but proposes a scripted token."""

    def __init__(self, model, propose):
        super().__init__(model, _argmax)
        self.propose = propose
        self.committed = 0

    def extend(self, state, hiddens, next_ids):
        super().extend(state, hiddens, next_ids)
        self.committed = 1 if self.committed == 0 else self.committed + len(next_ids)
        return self.propose(self.committed)


def _run(model, prompt, drafter):
    state = model.new_state(len(prompt) + N_TOKENS + 4)
    out = model.forward(torch.tensor(prompt), state)
    stats = SpecStats()
    toks = []
    for tok in speculative_tokens(model, state, out.hidden, prompt, out.logits[-1], _argmax, drafter, stats):
        toks.append(tok)
        if len(toks) == N_TOKENS:
            break
    return toks, stats


def test_mtp_drafts_give_exactly_the_greedy_tokens(model, prompt, plain_greedy):
    toks, stats = _run(model, prompt, MTPDrafter(model, _argmax))
    assert toks == plain_greedy
    assert stats.drafted > 0 and 0.0 <= stats.accept_rate <= 1.0


def test_always_right_drafts_are_all_accepted_and_exact(model, prompt, plain_greedy):
    drafter = _ScriptedDrafter(model, lambda k: plain_greedy[k] if k < len(plain_greedy) else 0)
    toks, stats = _run(model, prompt, drafter)
    assert toks == plain_greedy
    assert stats.accept_rate == 1.0  # two tokens per trunk pass


def test_always_wrong_drafts_are_all_rejected_and_exact(model, prompt, plain_greedy):
    wrong = lambda k: (plain_greedy[k] + 1) % 1000 if k < len(plain_greedy) else 0  # noqa: E731
    toks, stats = _run(model, prompt, _ScriptedDrafter(model, wrong))
    assert toks == plain_greedy
    assert stats.accepted == 0 and stats.drafted >= N_TOKENS - 1
