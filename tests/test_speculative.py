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

    def extend(self, state, hiddens, next_ids, history=None):
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


# ---- sampled requests: the speculative sampling rule ----------------------------------------------------------

def _dist(values):
    d = torch.tensor(values, dtype=torch.float64)
    return d / d.sum()


@pytest.mark.parametrize("p, q", [
    ([0.5, 0.3, 0.2, 0.0], [0.1, 0.1, 0.1, 0.7]),     # the draft mostly lands where p has no mass
    ([0.25, 0.25, 0.25, 0.25], [0.97, 0.01, 0.01, 0.01]),
    ([0.1, 0.2, 0.3, 0.4], [0.1, 0.2, 0.3, 0.4]),     # q == p: every draft kept
])
def test_the_rejection_rule_gives_tokens_distributed_as_p(p, q):
    """Over many counter steps (the Philox draws a seed replays), a draft drawn from q and kept or replaced by
    accept_or_resample is distributed as p, and it is kept at the rate sum(min(p, q))."""
    from engine.sampling import PURPOSE_DRAFT
    from engine.speculative import accept_or_resample, draw

    p, q = _dist(p), _dist(q)
    n = 20000
    counts = torch.zeros(len(p))
    kept = 0
    for step in range(n):
        d = draw(q, 7, step, PURPOSE_DRAFT)
        token, accepted = accept_or_resample(p, q, d, 7, step)
        counts[token] += 1
        kept += accepted
    freq = counts / n
    # 20000 draws: the standard error of a frequency is at most 0.0035; 5 of them
    assert float((freq - p.float()).abs().max()) < 0.018, (freq, p)
    assert abs(kept / n - float(torch.minimum(p, q).sum())) < 0.018
    assert counts[p == 0].sum() == 0


def test_the_rule_is_replayed_by_its_seed():
    from engine.speculative import accept_or_resample

    p, q = _dist([0.2, 0.5, 0.3]), _dist([0.6, 0.2, 0.2])
    first = [accept_or_resample(p, q, 0, 11, s) for s in range(200)]
    assert first == [accept_or_resample(p, q, 0, 11, s) for s in range(200)]
    assert first != [accept_or_resample(p, q, 0, 12, s) for s in range(200)]


def _sampled_run(model, prompt, sampler, drafter, verify):
    """N_TOKENS committed tokens of a sampled speculative run (the Sampler picks the first and the bonus tokens)."""
    state = model.new_state(len(prompt) + N_TOKENS + 4)
    out = model.forward(torch.tensor(prompt), state)
    stats = SpecStats()
    choose = lambda row, history: sampler.sample(row, history, prompt_ids=prompt)  # noqa: E731
    toks = []
    for tok in speculative_tokens(model, state, out.hidden, prompt, out.logits[-1], choose, drafter, stats, verify):
        toks.append(tok)
        if len(toks) == N_TOKENS:
            break
    return toks, stats


def test_sampled_speculation_with_one_candidate_gives_the_greedy_tokens(model, prompt, plain_greedy):
    """top_k = 1 makes p a point mass on the argmax: whatever the MTP head drafts, only the argmax is committed,
    so the sampled path (draft from q, the rejection rule, the residual) must reproduce plain greedy decoding."""
    from engine.sampling import Sampler, SamplingParams
    from engine.speculative import SampledDrafter, SampledSpeculation

    sampler = Sampler(SamplingParams(temperature=0.8, top_k=1, seed=5), valid_vocab_size=model.text_config.vocab_size)
    spec = SampledSpeculation(sampler, prompt)
    toks, stats = _sampled_run(model, prompt, sampler, SampledDrafter(model, spec), spec.verify)
    assert toks == plain_greedy
    assert stats.drafted > 0


def test_sampled_speculation_keeps_a_draft_whenever_q_equals_p(model, prompt):
    """A drafter whose q is exactly the trunk's p at that position (scripted from the trunk itself) is always
    kept: the acceptance rate is 1, and every committed token lies in p's support."""
    from engine.sampling import Sampler, SamplingParams
    from engine.speculative import SampledSpeculation, distribution

    sampler = Sampler(SamplingParams(temperature=0.9, top_k=5, seed=3), valid_vocab_size=model.text_config.vocab_size)
    spec = SampledSpeculation(sampler, prompt)
    hits = []

    def verify(logits, draft, history):
        p = distribution(sampler, logits, history, prompt)
        spec.qs = [p]                                 # q := p at the draft's position
        token, accepted = spec.verify(logits, draft, history)
        hits.append((accepted, float(p[token]) > 0))
        return token, accepted

    class TrunkDrafter(MTPDrafter):
        def extend(self, state, hiddens, next_ids, history=None):
            super().extend(state, hiddens, next_ids)
            trial = state.clone()   # the trunk's own next-token distribution, drawn as the drafter would
            logits = model.forward(torch.tensor([next_ids[-1]]), trial, last_only=True).logits[-1]
            from engine.sampling import PURPOSE_DRAFT
            from engine.speculative import draw
            return draw(distribution(sampler, logits, list(history or []), prompt), sampler.seed,
                        len(history or []), PURPOSE_DRAFT)

    toks, stats = _sampled_run(model, prompt, sampler, TrunkDrafter(model, _argmax), verify)
    assert len(toks) == N_TOKENS and hits and all(a and inside for a, inside in hits)
    assert stats.accept_rate == 1.0


@pytest.mark.parametrize("k", [2, 3, 5])
def test_chained_drafts_give_exactly_the_greedy_tokens(model, prompt, plain_greedy, k):
    """k drafts a round (the MTP head chained on its own output), verified in one T = k + 1 pass: still exactly the
    plain greedy tokens; and after every round the MTP cache holds only the committed pairs."""
    in_step = []

    class Checked(MTPDrafter):
        def extend(self, state, hiddens, next_ids, history=None):
            draft = super().extend(state, hiddens, next_ids, history)
            # one MTP pair per position the trunk consumed: the chained drafts' pairs were taken off again
            in_step.append(state.mtp_kv.length == state.seq_len)
            return draft

    state = model.new_state(len(prompt) + N_TOKENS + 8)
    out = model.forward(torch.tensor(prompt), state)
    stats = SpecStats()
    toks = []
    for tok in speculative_tokens(model, state, out.hidden, prompt, out.logits[-1], _argmax,
                                  Checked(model, _argmax), stats, k=k):
        toks.append(tok)
        if len(toks) >= N_TOKENS:
            break
    assert toks[:N_TOKENS] == plain_greedy
    assert stats.drafted >= k and 0.0 <= stats.accept_rate <= 1.0
    assert len(in_step) > 1 and all(in_step)


def test_chained_sampled_drafts_with_one_candidate_give_the_greedy_tokens(model, prompt, plain_greedy):
    from engine.sampling import Sampler, SamplingParams
    from engine.speculative import SampledDrafter, SampledSpeculation

    sampler = Sampler(SamplingParams(temperature=0.8, top_k=1, seed=5), valid_vocab_size=model.text_config.vocab_size)
    spec = SampledSpeculation(sampler, prompt)
    state = model.new_state(len(prompt) + N_TOKENS + 8)
    out = model.forward(torch.tensor(prompt), state)
    choose = lambda row, history: sampler.sample(row, history, prompt_ids=prompt)  # noqa: E731
    toks = []
    for tok in speculative_tokens(model, state, out.hidden, prompt, out.logits[-1], choose,
                                  SampledDrafter(model, spec), SpecStats(), spec.verify, k=3):
        toks.append(tok)
        if len(toks) >= N_TOKENS:
            break
    assert toks[:N_TOKENS] == plain_greedy
