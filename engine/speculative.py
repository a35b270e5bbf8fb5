"""Speculative decoding on the reference model with the checkpoint's own MTP head (one drafted token).

Each round feeds the trunk the last committed token and the MTP head's draft as one T = 2 pass.
The target's choice at the first position decides: if it equals the draft, both that token and the
target's choice after it are committed (two tokens for one trunk pass); otherwise only the target's
choice is, and the trunk state goes back to the snapshot taken before the pass and consumes the last
token alone. Every committed token is the target's own choice from its own logits with the same
history, so the output is exactly what plain decoding with the same chooser gives (greedy here;
sampled rounds would need the rejection rule, which this module does not do).

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

    def extend(self, state, hiddens: torch.Tensor, next_ids: list[int]) -> int:
        """Append pairs (h_i, token_{i+1}) to the MTP cache; return the draft after the last pair."""
        logits = self.model.mtp_forward(hiddens, torch.tensor(next_ids, dtype=torch.long), state)
        return self.choose_draft(logits[-1])


def speculative_tokens(model, state, prompt_hidden: torch.Tensor, prompt_ids: list[int], first_logits: torch.Tensor,
                       choose: Chooser, drafter: MTPDrafter, stats: SpecStats) -> Iterator[int]:
    """Committed tokens, one at a time, after a prefill that left ``state`` at the prompt's end.

    ``prompt_hidden [n, H]`` is the trunk output (after the final norm) at every prompt position and
    ``first_logits`` the logits after the last one. The caller stops iterating when it is done (a stop
    token, the token budget); the state then holds at most the tokens already yielded plus one.
    """
    generated: list[int] = []
    last = choose(first_logits, generated)
    generated.append(last)
    yield last
    # The whole prompt passes through the MTP layer to fill its KV; the last pair drafts.
    draft = drafter.extend(state, prompt_hidden, prompt_ids[1:] + [last])
    while True:
        snapshot = state.clone()
        out = model.forward(torch.tensor([last, draft], dtype=torch.long), state)
        stats.drafted += 1
        target = choose(out.logits[0], generated)
        if target == draft:
            stats.accepted += 1
            bonus = choose(out.logits[1], generated + [draft])
            generated += [draft, bonus]
            yield draft
            yield bonus
            draft = drafter.extend(state, out.hidden, [draft, bonus])
            last = bonus
        else:
            # Undo the pass (the GDN state cannot drop a token) and consume `last` alone.
            state.__dict__.update(snapshot.__dict__)
            redo = model.forward(torch.tensor([last], dtype=torch.long), state)
            generated.append(target)
            yield target
            draft = drafter.extend(state, redo.hidden, [target])
            last = target
