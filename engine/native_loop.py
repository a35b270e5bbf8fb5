"""The native decode loop: each token is drawn on the GPU and fed to the next step there.

    for token in decode_tokens(model, state, params, seed=sampler.seed, vocab_limit=tokenizer.vocab_size,
                               prompt_ids=prompt.ids):
        ...   # stop whenever; closing the generator drains the queue and ends the state

Per token the host reads one int from mapped host memory, while the GPU already runs the next
`ahead` steps (NativeEngine.decode_start / decode_push / decode_token / decode_stop). The host loop it
replaces copied the 1 MB logits row to the host and sampled there, leaving the GPU idle for that
time each token (bench/token_loop.py measures both).

The draw is the host Sampler's (engine/sampling.py): same steps, same Philox counter (token id, draw
index, purpose), the draw index counting this response's tokens from 0; so a seed replays the same
answer on either path, except where two candidates' scores agree to within float rounding.

When the generator ends, up to `ahead` tokens past the last one yielded were drawn and stepped; the
state is released (its lane returned), since its cache now holds tokens its owner never saw.
"""

from __future__ import annotations

import itertools
from typing import Iterator, Sequence

from engine.sampling import SamplingParams


class DecodeLoopError(RuntimeError):
    """The device could not draw a token (its logits held NaN / +inf, or no candidate was left)."""


def device_sampling(params: SamplingParams, *, seed: int, vocab_limit: int) -> dict:
    """The device sampler's parameters (bindings.cpp sampling_from_dict) for a request."""
    return dict(temperature=0.0 if params.greedy else float(params.temperature), top_k=int(params.top_k),
                top_p=float(params.top_p), min_p=float(params.min_p),
                repetition_penalty=float(params.repetition_penalty), presence_penalty=float(params.presence_penalty),
                frequency_penalty=float(params.frequency_penalty), seed=int(seed), vocab_limit=int(vocab_limit))


def decode_tokens(model, state, params: SamplingParams, *, seed: int, vocab_limit: int,
                  prompt_ids: Sequence[int] = (), ahead: int = 2, first_draw: int = 0) -> Iterator[int]:
    """Tokens drawn from the state's last logits on, each stepped on the GPU before the host reads it; the first
    with draw index ``first_draw`` (the response's token index: above 0 where speculative rounds hand over,
    engine.native_speculative).

    The lane's penalty counts hold what the response so far left in them (empty for a new state); the prompt is
    marked seen when the repetition penalty needs it. Stops by itself only at the state's token limit."""
    if state.revoked:
        from engine.native_backend import NativeBackendError
        raise NativeBackendError("this sequence's lane was released or given to a newer sequence")
    if ahead < 1:
        raise ValueError("ahead must be at least 1")
    eng = model.engine
    if params.repetition_penalty != 1.0 and prompt_ids:
        eng.count_tokens(state.lane, [int(i) for i in prompt_ids], in_prompt=True)
    kv_next = state.seq_len
    capacity = state.max_tokens - kv_next  # steps the state can take: draw k's step uses slot kv_next + k
    eng.decode_start(state.lane, model.last_logit_rows - 1, kv_next,
                     device_sampling(params, seed=seed, vocab_limit=vocab_limit), int(first_draw))
    draws = 1
    try:
        for k in itertools.count():
            while draws < k + 1 + ahead and draws <= capacity:
                eng.decode_push()
                draws += 1
            token = eng.decode_token(k)
            if token < 0:
                raise DecodeLoopError("the model's logits hold NaN or +inf, or no token is left to draw; "
                                      "the weights or the sampling settings are broken")
            yield token
            if k + 1 >= draws:  # the state is full: nothing more was queued
                return
    finally:
        state.seq_len = eng.decode_stop()
        model.release(state)
