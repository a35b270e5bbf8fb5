"""Speculative decoding on the native engine with the checkpoint's own MTP head.

A round, with the trunk's last consumed position at base - 1 and `last` (the last committed token, response index
n - 1) not yet consumed:
  1. the head drafts k tokens: the first from the pair (trunk hidden at base - 1, last), the others chained on its own
     output and the previous draft (NativeModel.mtp_draft / mtp_chain); draft i is drawn on the GPU from the head's
     row with the request's sampler and draw index n + i - 1, the index the token at that place of the response
     draws with;
  2. the trunk runs [last, d1 .. dk] as one step of k + 1 tokens, its recurrent state checkpointed after each token
     (NativeModel.verify: forward(keep_states=True) with the logits left on the device), and its rows are drawn from
     with draw indices n .. n + k: row t's token is what plain decoding draws at response index n + t, given the
     history up to it;
  3. drafts are kept while each equals the trunk's draw at its position; the first that differs is replaced by that
     draw, and if all are kept the draw after the last comes free. So a round commits j + 1 tokens for j kept drafts;
  4. the lane is set to base + j + 1 tokens (NativeModel.commit: the checkpoint after token j becomes the recurrent
     state; KV slots past it are overwritten by later steps), so a rejected draft costs no recomputation;
  5. the committed pairs (trunk hidden at base .. base + j, with d1 .. dj and the new token) go through the head, whose
     last row drafts the next round.

Greedy requests (temperature 0) draw the argmax. Sampled requests draw by the device sampler's Philox-keyed
Gumbel-max (engine/sampling.py): the draft and the trunk's row at one place of the response share that place's
Gumbel noise, so a draft is kept exactly when the trunk, given the same history, draws the same token with the same
noise ("coupled" drafts). Every committed token is therefore the token plain decoding with that seed draws there, the
output plain decoding gives, token for token, not only one from the same distribution. The price is the acceptance
rate: a coupled draft is kept with probability P(argmax(log q + g) = argmax(log p + g)), at least
(1 - TV) / (1 + TV) for the two distributions' total-variation distance TV, where the rejection rule of
engine/speculative.py (the reference backend's) keeps one with probability 1 - TV.

Penalties: every draw reads the lane's penalty counts as they stand (NativeModel.count_tokens), so they must hold
the tokens before the draw's place. A draft is counted before the next draft is drawn and all are taken off again
before the verify step; its rows are then drawn one at a time, each draft counted once the trunk's draw agrees with
it, up to the first that does not (without penalties all k + 1 rows are drawn at once). The committed tokens end up
counted, as the plain decode loop counts its tokens.

Steps of k + 1 tokens sum in another order than one-token steps, so where two candidates' scores agree to within
that rounding the draw may go the other way (tests check each token against the trunk's logits at its position).
The greedy oracle is engine/speculative.py (the reference model's loop); the sampled one is plain decoding.

Falling back: a round costs about round_cost_steps(k) one-token steps whatever it keeps, so where a reply's drafts
are mostly rejected the rounds are slower than plain decoding. Given ``plain_from`` (the GPU decode loop from the
state's last logits, its first draw at a given index), the rounds hand over to it once the last FALLBACK_WINDOW
rounds committed fewer tokens a round than that cost; the tokens stay the same (plain decoding's), only faster.
"""

from __future__ import annotations

from collections import deque
from typing import Callable, Iterator

from engine.speculative import SpecStats


# Test hook: (base, the head's drafts) -> the drafts to verify instead (same count).
DraftFilter = Callable[[int, list[int]], list[int]]

_NEUTRAL = {"repetition_penalty": 1.0, "presence_penalty": 0.0, "frequency_penalty": 0.0}


def has_penalties(sampling: dict) -> bool:
    """Whether device sampler parameters (engine.native_loop.device_sampling) apply a penalty, so that every draw
    needs the lane's counts of the tokens before it."""
    return any(float(sampling.get(p, v)) != v for p, v in _NEUTRAL.items())

# Rounds over which the committed tokens a round are averaged before falling back to plain decoding.
FALLBACK_WINDOW = 16


def round_cost_steps(k: int) -> float:
    """One-token steps a round of k drafts costs, whatever it keeps: H100, random 27B weights, depth 0, the
    tensor-core GEMV's default of session 46 (16 rows a warp for T <= 6, loads first; bench/spec_decode.py --drafts 1,3
    --accept 0,1 in bench/calls/device_s46_call3.sh, bench/results/spec-decode-h100-s46-call3.json: plain 173.7
    tok/s; k = 1 rounds 1.43 steps, k = 3 1.73, the mean of the rates with every draft rejected and every draft kept),
    linear in k between and beyond."""
    return 1.28 + 0.148 * k


# The GPU decode loop from the state's last logits, its first token drawn with this response index.
PlainFrom = Callable[[int], Iterator[int]]


def speculative_tokens(model, state, first_token: int, *, k: int, sampling: dict, prompt_ids=(),
                       stats: SpecStats | None = None, draft_filter: DraftFilter | None = None,
                       plain_from: PlainFrom | None = None) -> Iterator[int]:
    """Committed tokens after ``first_token``, response index 0 (the caller drew it from the prompt's logits with the
    same sampler; the state has consumed the prompt and, through its last forward, holds the MTP head's pending
    pairs; its lane's penalty counts are empty, as a new state's). ``sampling``: the device sampler's parameters
    (engine.native_loop.device_sampling); ``prompt_ids``: the prompt, which the repetition penalty reads. The caller
    stops iterating when it is done (a stop token, the budget); the lane has then consumed every committed token but
    the last one, including those of the current round the caller did not take, and none of the rejected drafts.
    With ``plain_from``, rounds that commit too little hand over to it (module doc)."""
    if not 1 <= k <= model.mtp_drafts:
        raise ValueError(f"k (drafts a round) must be in 1..{model.mtp_drafts} (the engine's planned mtp_drafts)")
    stats = stats if stats is not None else SpecStats()
    penalised = has_penalties(sampling)
    if penalised:
        if float(sampling.get("repetition_penalty", 1.0)) != 1.0 and len(prompt_ids):
            model.count_tokens(state, list(prompt_ids), in_prompt=True)
        model.count_tokens(state, [int(first_token)])

    def draw_last(index: int) -> int:
        """The head's last row (the draft after the pairs it closed) drawn with response index ``index``."""
        return model.sample(state, **sampling, rows=1, draw=index)[0]

    last, n = int(first_token), 1   # n: tokens committed so far; `last` is response index n - 1
    recent: deque[int] = deque(maxlen=FALLBACK_WINDOW)   # tokens the last rounds committed
    model.mtp_draft(state, last)
    while True:
        base = state.seq_len   # the cache slot `last` goes to
        # at the state's end a round drafts only what fits after `last`; with no room for a draft, `last` is the
        # last token the lane can take, and nothing follows it
        k_round = min(k, state.max_tokens - base - 1)
        if k_round < 1:
            return
        drafts = [draw_last(n)]
        for i in range(1, k_round):
            if penalised:
                model.count_tokens(state, [drafts[-1]])   # the next draft's history holds this one
            model.mtp_chain(state, drafts[-1], base - 1 + i)
            drafts.append(draw_last(n + i))
        if penalised and k_round > 1:
            model.count_tokens(state, drafts[:-1], remove=True)   # back to the committed tokens' counts
        if draft_filter is not None:
            drafts = [int(d) for d in draft_filter(base, list(drafts))]
        model.verify([last] + drafts, state)   # the step of k + 1 tokens, keeping its state checkpoints
        if penalised:
            kept, target = _verify_in_order(model, state, sampling, drafts, n)
        else:
            targets = model.sample(state, **sampling, rows=k_round + 1, draw=n)
            kept = 0
            while kept < k_round and targets[kept] == drafts[kept]:
                kept += 1
            target = targets[kept]
        committed = drafts[:kept] + [target]
        model.commit(state, kept + 1)
        stats.drafted += k_round
        stats.accepted += kept
        n += len(committed)
        recent.append(len(committed))
        yield from committed
        last = committed[-1]
        if (plain_from is not None and len(recent) == FALLBACK_WINDOW and state.max_tokens - state.seq_len >= 2
                and sum(recent) < round_cost_steps(k) * FALLBACK_WINDOW):
            model.forward([last], state)   # `last` consumed: its logits are the loop's first draw's
            yield from plain_from(n)
            return
        # commit left this round's consumed positions pending for the head; its last committed token closes them
        model.mtp_draft(state, last)


def _verify_in_order(model, state, sampling: dict, drafts: list[int], n: int) -> tuple[int, int]:
    """(drafts kept, the trunk's token after them) from the verify step's rows drawn one at a time, each against the
    counts of the tokens before it: a kept draft is counted before the next row is drawn, and so is the last token."""
    kept = 0
    while True:
        target = model.sample(state, **sampling, rows=1, draw=n + kept, first_row=kept)[0]
        model.count_tokens(state, [target])
        if kept == len(drafts) or target != drafts[kept]:
            return kept, target
        kept += 1


def greedy_speculative_tokens(model, state, first_token: int, *, k: int, vocab_limit: int,
                              stats: SpecStats | None = None,
                              draft_filter: DraftFilter | None = None) -> Iterator[int]:
    """speculative_tokens for a greedy request: each committed token is the trunk's argmax."""
    return speculative_tokens(model, state, first_token, k=k, sampling=dict(temperature=0.0, vocab_limit=vocab_limit),
                              stats=stats, draft_filter=draft_filter)
