"""Speculative decoding on the reference model with the checkpoint's own MTP head (one drafted token).

Each round feeds the trunk the last committed token and the MTP head's draft as one T = 2 pass.
Greedy: the target's choice at the first position decides: if it equals the draft, both that token and the
target's choice after it are committed (two tokens for one trunk pass); otherwise only the target's
choice is, and the trunk state goes back to the snapshot taken before the pass and consumes the last
token alone. Every committed token is the target's own choice from its own logits with the same
history, so the output is exactly what plain decoding with the same chooser gives.

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
    """Keeps the MTP head's KV cache in step with the committed sequence and drafts the next token."""

    def __init__(self, model, choose_draft: Callable[[torch.Tensor], int]):
        self.model = model
        self.choose_draft = choose_draft

    def extend(self, state, hiddens: torch.Tensor, next_ids: list[int], history: list[int] | None = None) -> int:
        """Append pairs (h_i, token_{i+1}) to the MTP cache; return the draft after the last pair. ``history``: the
        response so far (the draft is for the token after it), for drafters whose choice depends on it."""
        logits = self.model.mtp_forward(hiddens, torch.tensor(next_ids, dtype=torch.long), state)
        return self.choose_draft(logits[-1])


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

    from engine.sampling import uniforms

    probs = dist.numpy()
    ids = np.flatnonzero(probs)
    noise = -np.log(-np.log(uniforms(seed, step, ids, purpose=purpose)[0]))
    return int(ids[np.argmax(np.log(probs[ids]) + noise)])


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
        self.q: torch.Tensor | None = None   # the distribution the last draft was drawn from

    def draft(self, mtp_logits: torch.Tensor, history: list[int]) -> int:
        from engine.sampling import PURPOSE_DRAFT

        self.q = distribution(self.sampler, mtp_logits, history, self.prompt_ids)
        return draw(self.q, self.sampler.seed, len(history), PURPOSE_DRAFT)

    def verify(self, logits: torch.Tensor, draft: int, history: list[int]) -> tuple[int, bool]:
        p = distribution(self.sampler, logits, history, self.prompt_ids)
        return accept_or_resample(p, self.q, draft, self.sampler.seed, len(history))


class SampledDrafter(MTPDrafter):
    """MTPDrafter drawing its drafts from q with the response so far (penalties) through a SampledSpeculation."""

    def __init__(self, model, spec: SampledSpeculation):
        super().__init__(model, lambda row: spec.draft(row, []))
        self.spec = spec

    def extend(self, state, hiddens: torch.Tensor, next_ids: list[int], history: list[int] | None = None) -> int:
        logits = self.model.mtp_forward(hiddens, torch.tensor(next_ids, dtype=torch.long), state)
        return self.spec.draft(logits[-1], list(history or []))


def speculative_tokens(model, state, prompt_hidden: torch.Tensor, prompt_ids: list[int], first_logits: torch.Tensor,
                       choose: Chooser, drafter: MTPDrafter, stats: SpecStats,
                       verify: Verifier | None = None) -> Iterator[int]:
    """Committed tokens, one at a time, after a prefill that left ``state`` at the prompt's end.

    ``prompt_hidden [n, H]`` is the trunk output (after the final norm) at every prompt position and
    ``first_logits`` the logits after the last one. ``verify`` decides each round (default: the greedy rule with
    ``choose``); ``choose`` also picks the first token and the bonus token after an accepted draft. The caller stops
    iterating when it is done (a stop token, the token budget); the state then holds at most the tokens already
    yielded plus one.
    """
    verify = verify or greedy_verifier(choose)
    generated: list[int] = []
    last = choose(first_logits, generated)
    generated.append(last)
    yield last
    # The whole prompt passes through the MTP layer to fill its KV; the last pair drafts.
    draft = drafter.extend(state, prompt_hidden, prompt_ids[1:] + [last], history=generated)
    while True:
        snapshot = state.clone()
        out = model.forward(torch.tensor([last, draft], dtype=torch.long), state)
        stats.drafted += 1
        target, accepted = verify(out.logits[0], draft, generated)
        if accepted:
            stats.accepted += 1
            bonus = choose(out.logits[1], generated + [draft])
            generated += [draft, bonus]
            yield draft
            yield bonus
            draft = drafter.extend(state, out.hidden, [draft, bonus], history=generated)
            last = bonus
        else:
            # Undo the pass (the GDN state cannot drop a token) and consume `last` alone.
            state.__dict__.update(snapshot.__dict__)
            redo = model.forward(torch.tensor([last], dtype=torch.long), state)
            generated.append(target)
            yield target
            draft = drafter.extend(state, redo.hidden, [target], history=generated)
            last = target
