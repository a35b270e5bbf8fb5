"""engine/native_speculative.py's bookkeeping on the CPU, over a stand-in for NativeModel whose trunk and MTP head
are functions of the token history (and, for sampled requests, of the seed and the draw index): the rounds must yield
exactly the tokens plain decoding gives (greedy, or sampled with that seed), hand the head the pairs of every consumed
position once (slots, hidden rows and next tokens as the engine's mtp_step takes them), chain drafts at the right
slots, draw each token with its response index, and commit the kept count. (The GPU tests in test_native_mtp.py run
the real engine.)"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

import pytest

from engine.native_speculative import FALLBACK_WINDOW, greedy_speculative_tokens, round_cost_steps, speculative_tokens
from engine.speculative import SpecStats

V = 50


def trunk_next(history: list[int]) -> int:
    """The stand-in trunk's greedy token after ``history``."""
    return (sum(history) * 31 + 7 * len(history)) % V


def trunk_draw(history: list[int], temperature: float, seed: int, draw: int) -> int:
    """The stand-in trunk's token after ``history`` drawn with response index ``draw``: the argmax at temperature 0,
    else a token that moves with the seed and the draw index (as a Gumbel-max draw does)."""
    if temperature == 0.0:
        return trunk_next(history)
    return (trunk_next(history) + seed * 5 + draw * draw * 3 + 1) % V


@dataclass
class State:
    seq_len: int = 0
    max_tokens: int = 10 ** 9
    rope_delta: int = 0
    mtp_pending: tuple | None = None
    consumed: list[int] = field(default_factory=list)


class FakeModel:
    """The NativeModel calls the loop makes. The head drafts the trunk's token when ``head_right(position)``, else a
    wrong one; every call's arguments are checked against what the engine would need."""

    def __init__(self, mtp_drafts: int, head_right):
        self.mtp_drafts = mtp_drafts
        self.head_right = head_right
        self.rows: list[tuple[list[int], bool]] = []   # the last call's rows: (history, drafted by the head)
        self.last_verify = None       # (start, T) of the last verify step
        self.head_slots: list[int] = []   # the head's cache slots written by pairs of consumed positions
        self.chain_history: list[int] = []
        self.prompt_len = 0
        self.counts: Counter = Counter()          # the lane's generated-token counts (count_tokens)
        self.prompt_marked: set[int] = set()      # ids marked as seen in the prompt
        self.penalised_draws = 0

    def prefill(self, state: State, prompt: list[int]) -> None:
        state.consumed = list(prompt)
        state.seq_len = len(prompt)
        self.prompt_len = len(prompt)
        state.mtp_pending = (0, state.seq_len - 1, [])
        self.head_slots = list(range(len(prompt) - 1))   # prefill runs the head over all but the last pair
        self.rows = [(list(state.consumed), False)]

    def verify(self, ids, state: State):
        assert 2 <= len(ids) <= self.mtp_drafts + 1
        start = state.seq_len
        assert start == len(state.consumed)
        self.rows = []
        for t in ids:
            state.consumed.append(int(t))
            self.rows.append((list(state.consumed), False))
        state.seq_len += len(ids)
        self.last_verify = (start, len(ids))

    def forward(self, ids, state: State):
        """A plain step (the hand-over to the decode loop): consumes ``ids``; its last row is drawn from next."""
        for t in ids:
            state.consumed.append(int(t))
        state.seq_len += len(ids)
        self.rows = [(list(state.consumed), False)]

    def commit(self, state: State, kept: int) -> None:
        start, T = self.last_verify
        assert 1 <= kept <= T
        self.last_verify = None
        del state.consumed[start + kept:]
        state.seq_len = start + kept
        state.mtp_pending = (0, start, state.consumed[start + 1:])   # as NativeModel.commit leaves them

    @property
    def last_logit_rows(self) -> int:
        return len(self.rows)

    def count_tokens(self, state, ids, *, in_prompt=False, remove=False):
        if in_prompt:
            self.prompt_marked |= set(ids)
            return
        for i in ids:
            self.counts[i] += -1 if remove else 1
            assert self.counts[i] >= 0, "an id taken off more often than it was counted"

    def sample(self, state, *, temperature, vocab_limit, rows=1, draw=0, first_row=None, seed=0, top_k=0, top_p=1.0,
               min_p=0.0, repetition_penalty=1.0, presence_penalty=0.0, frequency_penalty=0.0):
        assert vocab_limit == V and draw >= 0
        first = len(self.rows) - rows if first_row is None else first_row
        assert rows >= 1 and 0 <= first and first + rows <= len(self.rows)
        penalised = (repetition_penalty, presence_penalty, frequency_penalty) != (1.0, 0.0, 0.0)
        out = []
        for t, (history, head) in enumerate(self.rows[first:first + rows]):
            if penalised:   # the draw reads the counts: they must be those of the response before its place
                assert rows == 1, "a step's rows with penalties are drawn one at a time"
                assert +self.counts == Counter(history[self.prompt_len:]), (dict(self.counts), history)
                assert self.prompt_marked == (set(history[:self.prompt_len]) if repetition_penalty != 1.0 else set())
                self.penalised_draws += 1
            right = trunk_draw(history, temperature, seed, draw + t)
            out.append(right if not head or self.head_right(len(history)) else (right + 1) % V)
        return out

    def mtp_draft(self, state: State, next_token: int) -> None:
        row, slot, tokens = state.mtp_pending
        pairs = tokens + [int(next_token)]
        # the pairs are the consumed positions slot .. seq_len - 1, each with the token after it
        assert row == 0 and slot + len(pairs) == state.seq_len
        assert pairs[:-1] == state.consumed[slot + 1:]
        assert self.head_slots == list(range(slot)), "every earlier position's pair ran once, in order"
        self.head_slots += list(range(slot, slot + len(pairs)))
        state.mtp_pending = None
        self.chain_history = state.consumed + [int(next_token)]
        # one row a pair; the last drafts the token after next_token
        self.rows = [([], True)] * (len(pairs) - 1) + [(list(self.chain_history), True)]

    def mtp_chain(self, state: State, draft: int, slot: int) -> None:
        # the head's output at the previous pair's position, with the draft it made: slot = that position + 1
        assert slot == len(self.chain_history) - 1
        self.chain_history = self.chain_history + [int(draft)]
        self.rows = [(list(self.chain_history), True)]


def greedy(prompt: list[int], n: int) -> list[int]:
    hist, out = list(prompt), []
    for _ in range(n):
        out.append(trunk_next(hist))
        hist.append(out[-1])
    return out


def first_n(first: int, rounds, n: int) -> list[int]:
    """``first`` and the rounds' tokens after it, up to n in all (the caller stops the rounds there, as Engine does)."""
    got = [first]
    for tok in rounds:
        got.append(tok)
        if len(got) >= n:
            break
    rounds.close()
    return got


@pytest.mark.parametrize("k", [1, 2, 3, 5])
@pytest.mark.parametrize("pattern", ["always", "never", "mixed"])
def test_rounds_yield_the_trunks_greedy_tokens(k, pattern):
    right = {"always": lambda p: True, "never": lambda p: False, "mixed": lambda p: p % 5 != 2}[pattern]
    model = FakeModel(mtp_drafts=k, head_right=right)
    state = State()
    prompt = [3, 14, 15, 9, 26]
    model.prefill(state, prompt)
    first = model.sample(state, temperature=0.0, vocab_limit=V, rows=1)[0]
    stats = SpecStats()
    got = first_n(first, greedy_speculative_tokens(model, state, first, k=k, vocab_limit=V, stats=stats), 60)
    assert got == greedy(prompt, 60)[:len(got)] and len(got) == 60
    if pattern == "always":
        assert stats.accepted == stats.drafted
    elif pattern == "never":
        assert stats.accepted == 0
    else:
        assert 0 < stats.accepted < stats.drafted
    # the lane holds the committed tokens but the round's last one (which the next round would consume first); the
    # loop was left inside a round, so some of them may not have been taken yet
    assert state.consumed == (prompt + greedy(prompt, 80))[:state.seq_len]
    assert len(prompt) + len(got) - 1 <= state.seq_len <= len(prompt) + len(got) + k


def test_k_beyond_the_planned_drafts_is_refused():
    model = FakeModel(mtp_drafts=2, head_right=lambda p: True)
    state = State()
    model.prefill(state, [1, 2, 3])
    with pytest.raises(ValueError, match="planned mtp_drafts"):
        next(greedy_speculative_tokens(model, state, 0, k=3, vocab_limit=V))


@pytest.mark.parametrize("k", [1, 3])
def test_rounds_draft_less_at_the_states_end_and_stop_at_it(k):
    """A lane planned to the context limit (Engine gives a reply that may run to it exactly that): rounds near the
    end verify fewer drafts, never a step past the state's last slot, and the tokens end when the lane is full."""
    model = FakeModel(mtp_drafts=k, head_right=lambda p: True)
    prompt = [3, 14, 15, 9, 26]
    state = State(max_tokens=len(prompt) + 11)
    model.prefill(state, prompt)
    first = model.sample(state, temperature=0.0, vocab_limit=V, rows=1)[0]
    widths = []
    real_verify = model.verify
    model.verify = lambda ids, st: (widths.append(len(ids)), real_verify(ids, st))
    got = [first] + list(greedy_speculative_tokens(model, state, first, k=k, vocab_limit=V))
    assert got == greedy(prompt, len(got))
    # every slot used; the last token (a round's own next token) needs no slot, as it is not consumed
    assert len(prompt) + len(got) in (state.max_tokens, state.max_tokens + 1)
    assert state.seq_len <= state.max_tokens and max(widths) == k + 1 and min(widths) >= 2


def plain_sampled(prompt: list[int], n: int, temperature: float, seed: int) -> list[int]:
    hist, out = list(prompt), []
    for i in range(n):
        out.append(trunk_draw(hist, temperature, seed, i))
        hist.append(out[-1])
    return out


@pytest.mark.parametrize("k", [1, 3])
@pytest.mark.parametrize("pattern", ["always", "mixed"])
def test_sampled_rounds_yield_plain_decodings_tokens_for_the_seed(k, pattern):
    """A sampled request: drafts and the verify step's rows draw with the response index of their place, so the
    committed tokens are plain decoding's for that seed, whatever the head drafts."""
    right = {"always": lambda p: True, "mixed": lambda p: p % 5 != 2}[pattern]
    model = FakeModel(mtp_drafts=k, head_right=right)
    state = State()
    prompt = [3, 14, 15, 9, 26]
    model.prefill(state, prompt)
    sampling = dict(temperature=0.7, top_k=20, top_p=0.95, min_p=0.0, seed=12345, vocab_limit=V)
    first = model.sample(state, **sampling, rows=1, draw=0)[0]
    stats = SpecStats()
    got = first_n(first, speculative_tokens(model, state, first, k=k, sampling=sampling, stats=stats), 50)
    assert got == plain_sampled(prompt, 50, 0.7, 12345)
    assert got != greedy(prompt, 50)
    assert (stats.accepted == stats.drafted) if pattern == "always" else (0 < stats.accepted < stats.drafted)


@pytest.mark.parametrize("k", [1, 3])
@pytest.mark.parametrize("penalty", [dict(presence_penalty=1.5), dict(repetition_penalty=1.1, frequency_penalty=0.3)])
def test_penalised_rounds_draw_each_token_against_the_counts_before_it(k, penalty):
    """With a penalty every draw (the head's drafts, each verify row) must read the counts of exactly the response
    before its place (FakeModel.sample checks), the prompt marked only for the repetition penalty; the tokens stay
    plain decoding's."""
    model = FakeModel(mtp_drafts=k, head_right=lambda p: p % 5 != 2)
    state = State()
    prompt = [3, 14, 15, 9, 26]
    model.prefill(state, prompt)
    sampling = dict(temperature=0.7, top_k=20, top_p=0.95, seed=777, vocab_limit=V, **penalty)
    first = trunk_draw(prompt, 0.7, 777, 0)   # Engine draws it on the host, with the prompt's penalty marks
    stats = SpecStats()
    rounds = speculative_tokens(model, state, first, k=k, sampling=sampling, prompt_ids=prompt, stats=stats)
    got = first_n(first, rounds, 40)
    assert got == plain_sampled(prompt, 40, 0.7, 777)
    assert 0 < stats.accepted < stats.drafted and model.penalised_draws > 40


def plain_loop(state: State, sampling: dict, calls: list[int]):
    """A stand-in for the GPU decode loop from the state's last logits (Engine's plain_from): each token drawn with
    the next draw index from the history so far, then consumed."""
    def start(draw: int):
        calls.append(draw)
        while True:
            token = trunk_draw(list(state.consumed), sampling["temperature"], sampling["seed"], draw)
            yield token
            state.consumed.append(token)
            state.seq_len += 1
            draw += 1
    return start


@pytest.mark.parametrize("k", [1, 3])
@pytest.mark.parametrize("pattern", ["never", "always"])
def test_rounds_that_commit_too_little_hand_over_to_plain_decoding(k, pattern):
    """Drafts always rejected: after FALLBACK_WINDOW rounds of one token each (below a round's cost in steps) the
    tokens come from the plain loop, starting at the right draw index with `last` consumed; the tokens are plain
    decoding's throughout. Drafts always kept: no hand-over."""
    model = FakeModel(mtp_drafts=k, head_right={"never": lambda p: False, "always": lambda p: True}[pattern])
    state = State()
    prompt = [3, 14, 15, 9, 26]
    model.prefill(state, prompt)
    sampling = dict(temperature=0.7, seed=4242, vocab_limit=V)
    first = trunk_draw(prompt, 0.7, 4242, 0)
    calls: list[int] = []
    stats = SpecStats()
    got = first_n(first, speculative_tokens(model, state, first, k=k, sampling=sampling, stats=stats,
                                        plain_from=plain_loop(state, sampling, calls)), 80)
    assert got == plain_sampled(prompt, 80, 0.7, 4242)
    if pattern == "never":
        assert 1 < round_cost_steps(k) and calls == [1 + FALLBACK_WINDOW]
        assert stats.drafted == FALLBACK_WINDOW * k and stats.accepted == 0
    else:
        assert calls == [] and stats.accepted == stats.drafted > 0


def test_engine_wires_the_rounds_and_the_hand_over():
    """engine.api's native speculative path: the first token is the host Sampler's draw from the prompt's logits; the
    rounds get the device sampler's parameters for the request's seed and the prompt; a hand-over opens the decode
    loop with the request's parameters, seed and vocabulary at the next draw index."""
    torch = pytest.importorskip("torch")
    from engine.api import Engine, EngineOptions
    from engine.native_loop import device_sampling
    from engine.sampling import Sampler, SamplingParams

    params = SamplingParams(temperature=0.7, top_k=20, presence_penalty=1.5, seed=99)
    sampler = Sampler(params, valid_vocab_size=V)
    dev = device_sampling(params, seed=sampler.seed, vocab_limit=V)
    model = FakeModel(mtp_drafts=3, head_right=lambda p: False)   # every draft rejected: a hand-over after 16 rounds
    seen: list[dict] = []
    real_sample = model.sample

    def sample(state, **kw):
        seen.append({k: v for k, v in kw.items() if k not in ("rows", "draw", "first_row")})
        return real_sample(state, **kw)
    model.sample = sample
    loops: list[dict] = []

    def decode_tokens(state, p, *, seed, vocab_limit, first_draw):
        loops.append(dict(params=p, seed=seed, vocab_limit=vocab_limit, first_draw=first_draw))
        yield from plain_loop(state, dev, [])(first_draw)
    model.decode_tokens = decode_tokens

    engine = Engine.__new__(Engine)
    engine._model, engine.options = model, EngineOptions(backend="native", mtp_draft_tokens=3)
    state = State()
    prompt = [3, 14, 15, 9, 26]
    model.prefill(state, prompt)
    logits = torch.randn(V, generator=torch.Generator().manual_seed(1))
    tokens = engine._native_speculative_tokens(state, logits, sampler, prompt, SpecStats())
    got = [t for _, t in zip(range(40), tokens)]
    tokens.close()
    assert got[0] == sampler.sample(logits, [], prompt_ids=prompt)
    assert seen and all(kw == dev for kw in seen)
    assert loops == [dict(params=params, seed=sampler.seed, vocab_limit=V, first_draw=1 + FALLBACK_WINDOW)]
