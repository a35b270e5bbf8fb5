"""Speculative decoding on the reference model with the checkpoint's own MTP head (k = 1..5 drafted tokens).

Each round feeds the trunk the last committed token and the round's k drafts as one T = k + 1 pass (past the
first draft, the MTP head runs on its own output and the previous draft). The drafts are checked in order.
Greedy: the target's choice at a draft's position decides: while it equals the draft, the draft is committed;
the first one it differs from is replaced by the target's choice, which ends the round; if all k are kept, the
target's choice after the last is committed too (k + 1 tokens for one trunk pass). After a rejection the trunk
state goes back to the snapshot taken before the pass and consumes the last token and the kept drafts again.
Every committed token is the target's own choice from its own logits with the same history, so the output is
exactly what plain decoding with the same chooser gives.

Sampled (`SampledSpeculation`): the draft is drawn from q, the MTP head's distribution after the request's
sampling steps (penalties, temperature, top-k, top-p, min-p); it is accepted with probability min(1, p / q) under the
trunk's distribution p at that position, and on a rejection the token is drawn from the residual max(0, p - q)
normalised (the standard speculative sampling rule: each committed token is distributed exactly as p). The draws
are Philox-keyed like the Sampler's (their own purposes), so a seed replays a speculative answer; it is not the
same answer plain decoding gives with that seed, only one from the same distribution.

This is the oracle for the native engine's verify path, not a fast path: the rollback is a full
state snapshot (DESIGN's record-and-replay rollback is the native engine's job).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterator

import torch

# Picks the next token from one logits row and the response so far (engine.sampling.Sampler.sample).
Chooser = Callable[[torch.Tensor, list[int]], int]


@dataclass
class SpecStats:
    drafted: int = 0
    accepted: int = 0

    @property
    def accept_rate(self) -> float | None:
        return self.accepted / self.drafted if self.drafted else None


class MTPDrafter:
    """Keeps the MTP head's KV cache in step with the committed sequence and drafts the next tokens."""

    def __init__(self, model, choose_draft: Callable[[torch.Tensor], int] | None):
        self.model = model
        self.choose_draft = choose_draft
        self._last_hidden: torch.Tensor | None = None   # the MTP layer's output at the last pair (chained drafts)

    def extend(self, state, hiddens: torch.Tensor, next_ids: list[int], history: list[int] | None = None) -> int:
        """Append pairs (h_i, token_{i+1}) to the MTP cache; return the draft after the last pair. ``history``: the
        response so far (the draft is for the token after it), for drafters whose choice depends on it."""
        logits, h = self.model.mtp_forward(hiddens, torch.tensor(next_ids, dtype=torch.long), state,
                                           return_hidden=True)
        self._last_hidden = h[-1:]
        return self._choose(logits[-1], list(history or []))

    def _choose(self, logits: torch.Tensor, history: list[int]) -> int:
        return self.choose_draft(logits)

    def chain(self, state, first: int, history: list[int], n: int) -> list[int]:
        """``n`` more drafts after ``first``: the MTP layer fed its own output and the previous draft (pairs that
        are not the trunk's, so they are taken off its cache again: the next extend writes the committed ones)."""
        cache = state.mtp_kv
        length, drafts, h = cache.length, [], self._last_hidden
        for _ in range(n):
            prev = drafts[-1] if drafts else first
            logits, h = self.model.mtp_forward(h, torch.tensor([prev], dtype=torch.long), state, return_hidden=True)
            drafts.append(self._choose(logits[-1], history + [first] + drafts))
        cache.length = length
        return drafts


# Decides a round from the trunk's logits at the draft's position, the draft and the response before it: (the token
# committed there, whether it is the draft).
Verifier = Callable[[torch.Tensor, int, list[int]], tuple[int, bool]]


def greedy_verifier(choose: Chooser) -> Verifier:
    def verify(logits: torch.Tensor, draft: int, history: list[int]) -> tuple[int, bool]:
        target = choose(logits, history)
        return target, target == draft
    return verify


def distribution(sampler, logits: torch.Tensor, history: list[int], prompt_ids: list[int]) -> torch.Tensor:
    """The Sampler's distribution for one draw (float64 [valid vocab], zero outside its candidates)."""
    cand = sampler.candidates(logits, history, prompt_ids)
    dist = torch.zeros(sampler.valid_vocab_size, dtype=torch.float64)
    dist[cand.ids.cpu()] = cand.probabilities().cpu() if cand.ids.numel() > 1 else 1.0
    return dist


def draw(dist: torch.Tensor, seed: int, step: int, purpose: int) -> int:
    """One token from ``dist`` by Gumbel-max with Philox noise keyed (token id, step, purpose)."""
    import numpy as np

    from engine.sampling import gumbel_noise

    probs = dist.numpy()
    ids = np.flatnonzero(probs)
    return int(ids[np.argmax(np.log(probs[ids]) + gumbel_noise(seed, step, ids, purpose)[0])])


def accept_or_resample(p: torch.Tensor, q: torch.Tensor, draft: int, seed: int, step: int) -> tuple[int, bool]:
    """The speculative sampling rule: ``draft`` (drawn from q) kept with probability min(1, p / q), else a token from
    max(0, p - q) normalised; the result is distributed as p."""
    from engine.sampling import PURPOSE_ACCEPT, PURPOSE_RESIDUAL, uniforms

    qd, pd = float(q[draft]), float(p[draft])
    u = float(uniforms(seed, step, [draft], purpose=PURPOSE_ACCEPT)[0, 0])
    if qd > 0 and u * qd < pd:
        return draft, True
    residual = (p - q).clamp_min(0)
    if float(residual.sum()) <= 0:   # p <= q everywhere means p == q: the draft is always kept (u < 1)
        residual = p
    return draw(residual / residual.sum(), seed, step, PURPOSE_RESIDUAL), False


class SampledSpeculation:
    """The drafter's choice and the verifier for sampled requests (module doc), over one Sampler and prompt."""

    def __init__(self, sampler, prompt_ids: list[int]):
        self.sampler = sampler
        self.prompt_ids = prompt_ids
        self.qs: list[torch.Tensor] = []   # the distributions this round's drafts were drawn from, in order

    def draft(self, mtp_logits: torch.Tensor, history: list[int]) -> int:
        from engine.sampling import PURPOSE_DRAFT

        q = distribution(self.sampler, mtp_logits, history, self.prompt_ids)
        self.qs.append(q)
        return draw(q, self.sampler.seed, len(history), PURPOSE_DRAFT)

    def verify(self, logits: torch.Tensor, draft: int, history: list[int]) -> tuple[int, bool]:
        p = distribution(self.sampler, logits, history, self.prompt_ids)
        return accept_or_resample(p, self.qs.pop(0), draft, self.sampler.seed, len(history))


class SampledDrafter(MTPDrafter):
    """MTPDrafter drawing its drafts from q with the response so far (penalties) through a SampledSpeculation."""

    def __init__(self, model, spec: SampledSpeculation):
        super().__init__(model, None)   # its _choose draws from q with the history
        self.spec = spec

    def extend(self, state, hiddens: torch.Tensor, next_ids: list[int], history: list[int] | None = None) -> int:
        self.spec.qs = []          # a new round: the drafts of the last one were verified or dropped
        return super().extend(state, hiddens, next_ids, history)

    def _choose(self, logits: torch.Tensor, history: list[int]) -> int:
        return self.spec.draft(logits, history)


def speculative_tokens(model, state, prompt_hidden: torch.Tensor, prompt_ids: list[int], first_logits: torch.Tensor,
                       choose: Chooser, drafter: MTPDrafter, stats: SpecStats,
                       verify: Verifier | None = None, k: int = 1) -> Iterator[int]:
    """Committed tokens, one at a time, after a prefill that left ``state`` at the prompt's end.

    ``prompt_hidden [n, H]`` is the trunk output (after the final norm) at every prompt position and
    ``first_logits`` the logits after the last one. Each round drafts ``k`` tokens (the MTP head chained on its own
    output past the first) and verifies them in one T = k + 1 trunk pass, in order: the first one ``verify`` rejects
    is replaced by its choice and ends the round; if none is, the target's choice after the last is committed too.
    ``verify`` defaults to the greedy rule with ``choose``, which also picks the first token and that bonus token.
    The caller stops iterating when it is done (a stop token, the token budget); the state then holds at most the
    tokens already yielded plus k.
    """
    if not 1 <= k <= 5:
        raise ValueError("k (drafts a round) must be 1..5")
    verify = verify or greedy_verifier(choose)
    generated: list[int] = []
    last = choose(first_logits, generated)
    generated.append(last)
    yield last
    # The whole prompt passes through the MTP layer to fill its KV; the last pair drafts.
    first = drafter.extend(state, prompt_hidden, prompt_ids[1:] + [last], history=generated)
    while True:
        drafts = [first] + (drafter.chain(state, first, generated, k - 1) if k > 1 else [])
        snapshot = state.clone()
        out = model.forward(torch.tensor([last] + drafts, dtype=torch.long), state)
        stats.drafted += len(drafts)
        kept: list[int] = []
        replacement = None
        for i, d in enumerate(drafts):
            token, accepted = verify(out.logits[i], d, generated + kept)
            if not accepted:
                replacement = token
                break
            kept.append(d)
        stats.accepted += len(kept)
        if replacement is None:   # every draft kept: the target's choice after the last one comes free
            bonus = choose(out.logits[len(drafts)], generated + kept)
            committed, hidden = kept + [bonus], out.hidden
        else:
            # Undo the pass (the GDN state cannot drop a token) and consume `last` and the kept drafts again.
            state.__dict__.update(snapshot.__dict__)
            hidden = model.forward(torch.tensor([last] + kept, dtype=torch.long), state).hidden
            committed = kept + [replacement]
        for tok in committed:
            generated.append(tok)
            yield tok
        first = drafter.extend(state, hidden, committed, history=generated)
        last = committed[-1]
