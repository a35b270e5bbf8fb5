"""Speculative decoding on the native engine with the checkpoint's own MTP head (greedy requests).

A round, with the trunk's last consumed position at base - 1 and `last` (the last committed token) not yet consumed:
  1. the head drafts k tokens: the first from the pair (trunk hidden at base - 1, last), the others chained on its own
     output and the previous draft (NativeModel.mtp_draft / mtp_chain; the argmax of each row, drawn on the GPU);
  2. the trunk runs [last, d1 .. dk] as one step of k + 1 tokens, its recurrent state checkpointed after each token
     (NativeModel.verify: forward(keep_states=True) with the logits left on the device);
  3. the greedy rule: drafts are kept while each equals the trunk's argmax at its position; the first that differs is
     replaced by that argmax, and if all are kept the argmax after the last comes free. So a round commits j + 1
     tokens for j kept drafts;
  4. the lane is set to base + j + 1 tokens (NativeModel.commit: the checkpoint after token j becomes the recurrent
     state; KV slots past it are overwritten by later steps), so a rejected draft costs no recomputation;
  5. the committed pairs (trunk hidden at base .. base + j, with d1 .. dj and the new token) go through the head, whose
     last row drafts the next round.
Every committed token is the trunk's argmax given the committed history, as plain greedy decoding chooses, from a
step of k + 1 tokens: those kernels sum in another order than one-token steps, so an exact tie between two logits may
resolve the other way (tests check each token against the trunk's logits at its position).

The oracle is engine/speculative.py (the reference model's loop, same rule). Sampled requests decode without drafts
on the native engine (the GPU decode loop, engine.native_loop).
"""

from __future__ import annotations

from typing import Callable, Iterator

from engine.speculative import SpecStats


# Test hook: (base, the head's drafts) -> the drafts to verify instead (same count).
DraftFilter = Callable[[int, list[int]], list[int]]


def greedy_speculative_tokens(model, state, first_token: int, *, k: int, vocab_limit: int,
                              stats: SpecStats | None = None,
                              draft_filter: DraftFilter | None = None) -> Iterator[int]:
    """Committed tokens after ``first_token`` (the token the caller chose from the prompt's logits; the state has
    consumed the prompt and, through its last forward, holds the MTP head's pending pairs). The caller stops iterating
    when it is done (a stop token, the budget); the lane has then consumed every committed token but the last one,
    including those of the current round the caller did not take, and none of the rejected drafts."""
    if not 1 <= k <= model.mtp_drafts:
        raise ValueError(f"k (drafts a round) must be in 1..{model.mtp_drafts} (the engine's planned mtp_drafts)")
    stats = stats if stats is not None else SpecStats()

    def argmax(rows: int) -> list[int]:
        return model.sample(state, temperature=0.0, vocab_limit=vocab_limit, rows=rows)

    last = int(first_token)
    model.mtp_draft(state, last)
    while True:
        base = state.seq_len   # the cache slot `last` goes to
        # at the state's end a round drafts only what fits after `last`; with no room for a draft, `last` is the
        # last token the lane can take, and nothing follows it
        k_round = min(k, state.max_tokens - base - 1)
        if k_round < 1:
            return
        drafts = argmax(1)
        for i in range(1, k_round):
            model.mtp_chain(state, drafts[-1], base - 1 + i)
            drafts += argmax(1)
        if draft_filter is not None:
            drafts = [int(d) for d in draft_filter(base, list(drafts))]
        model.verify([last] + drafts, state)   # the step of k + 1 tokens, keeping its state checkpoints
        targets = argmax(k_round + 1)
        kept = 0
        while kept < k_round and targets[kept] == drafts[kept]:
            kept += 1
        committed = drafts[:kept] + [targets[kept]]
        model.commit(state, kept + 1)
        stats.drafted += k_round
        stats.accepted += kept
        yield from committed
        # commit left this round's consumed positions pending for the head; its last committed token closes them
        last = committed[-1]
        model.mtp_draft(state, last)
