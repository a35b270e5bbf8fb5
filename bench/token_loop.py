"""What a token costs through the app's loop, against the decode step alone (native backend, random 27B weights).

    python3 bench/token_loop.py [--tokens 64] [--kv int8] [--json out.json]
    python3 bench/token_loop.py --host-sampler     # no GPU: the host Sampler alone on random logits of the 27B's vocab

bench/decode.py times graph replays back to back; a user's tokens come through engine/api.py's loop, which for the
native backend runs, per token, `model.forward(..., last_only=True)` (the whole logits row, 1 MB, copied to the host
and synchronised) and the host `Sampler` (engine/sampling.py). Three loops over the lane's first tokens, each
`--tokens` long after a warm-up, for greedy and the two default presets (`default_params`):

  step    NativeEngine.time_steps: graph replays back to back (what the benchmark reports);
  device  engine.forward + engine.sample: the device sampler, only the token copied back, one sync a token;
  app     the app's calls: model.forward(last_only=True) then Sampler.sample on the host logits.

The gap between `app` and `step` is GPU time the app leaves idle; `device` is what moving the sampling onto the GPU
would leave of it (launching the next step before the host reads the token would take the rest).
"""

from __future__ import annotations

import argparse
import json
import time


def sampler_dict(params, vocab: int) -> dict:
    """The device sampler's parameters (bindings.cpp sampling_from_dict) for a SamplingParams."""
    return dict(temperature=params.temperature, top_k=params.top_k, top_p=params.top_p, min_p=params.min_p,
                repetition_penalty=params.repetition_penalty, presence_penalty=params.presence_penalty,
                frequency_penalty=params.frequency_penalty, seed=params.seed or 0, vocab_limit=vocab)


def app_loop(model, params, tokens: int, vocab: int) -> float:
    """Seconds a token through engine/api.py's native path (_plain_tokens / _step), after one warm-up token."""
    import torch

    from engine.sampling import Sampler

    sampler = Sampler(params, valid_vocab_size=vocab)
    state = model.new_state(tokens + 8)
    prompt = [1]
    logits = model.forward(torch.tensor(prompt), state, last_only=True).logits[-1]
    generated: list[int] = []

    def one(logits):
        token = sampler.sample(logits, generated, prompt_ids=prompt)
        generated.append(token)
        return model.forward(torch.tensor([token]), state, last_only=True).logits[-1]

    logits = one(logits)  # warm-up: the T = 1 graph is captured by now
    t0 = time.perf_counter()
    for _ in range(tokens):
        logits = one(logits)
    dt = (time.perf_counter() - t0) / tokens
    model.release(state)
    return dt


def device_loop(model, params, tokens: int, vocab: int) -> float:
    """Seconds a token with the device sampler: engine.forward, engine.sample (one int copied back)."""
    state = model.new_state(tokens + 8)
    eng, lane = model.engine, state.lane
    p = sampler_dict(params, vocab)
    token, pos = 1, 0

    def one(token: int, pos: int) -> int:
        eng.forward(lane, [token], [pos] * 3, pos)
        return int(eng.sample(lane, 1, p)[0])

    token = one(token, pos)  # warm-up
    pos += 1
    t0 = time.perf_counter()
    for _ in range(tokens):
        token = one(token, pos)
        pos += 1
    dt = (time.perf_counter() - t0) / tokens
    model.release(state)
    return dt


def host_sampler_ms(params, vocab: int, reps: int = 50, history: int = 200, prompt: int = 1000) -> float:
    """Milliseconds a token in the host Sampler alone (what the app's loop adds on the CPU after each step's logits
    reach the host), on random logits, with `history` generated and `prompt` prompt ids for the penalties."""
    import torch

    from engine.sampling import Sampler

    sampler = Sampler(params, valid_vocab_size=vocab)
    logits = torch.randn(vocab, generator=torch.Generator().manual_seed(0))
    generated, prompt_ids = list(range(history)), list(range(prompt))
    for _ in range(3):
        sampler.sample(logits, generated, prompt_ids=prompt_ids)
    t0 = time.perf_counter()
    for _ in range(reps):
        sampler.sample(logits, generated, prompt_ids=prompt_ids)
    return (time.perf_counter() - t0) / reps * 1e3


def presets() -> dict:
    from engine.sampling import SamplingParams, default_params
    return {"greedy": SamplingParams(temperature=0.0), "thinking": default_params(True).with_(seed=7),
            "non-thinking": default_params(False).with_(seed=7)}


def step_only(model, tokens: int) -> float:
    """Seconds a step replayed back to back at depth 0 (NativeEngine.time_steps returns ms)."""
    return model.engine.time_steps(0, 0, tokens) / 1000.0


def measure(model, params_by_name: dict, tokens: int, vocab: int) -> list[dict]:
    """One row per sampling preset: seconds a token in each loop, and the app's idle share against the step."""
    step = step_only(model, tokens)
    rows = []
    for name, params in params_by_name.items():
        app, dev = app_loop(model, params, tokens, vocab), device_loop(model, params, tokens, vocab)
        rows.append(dict(preset=name, step_ms=round(step * 1e3, 3), device_loop_ms=round(dev * 1e3, 3),
                         app_loop_ms=round(app * 1e3, 3), app_tok_s=round(1 / app, 1), step_tok_s=round(1 / step, 1),
                         app_idle_fraction=round(1 - step / app, 3)))
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--kv", default="int8")
    ap.add_argument("--budget-gib", type=float, default=24)
    ap.add_argument("--json", default="")
    ap.add_argument("--host-sampler", action="store_true", help="time the host Sampler alone (no GPU) and stop")
    args = ap.parse_args()
    if args.host_sampler:
        from engine.registry import config_27b
        vocab = config_27b(vision=False).text.vocab_size
        for name, params in presets().items():
            print(f"host Sampler, {name}: {host_sampler_ms(params, vocab):.3f} ms a token (vocab {vocab})", flush=True)
        return
    from engine.native_backend import NativeModel

    model = NativeModel.random_27b(kv_dtype=args.kv, max_context=4 * args.tokens + 64, seed=1,
                                   vram_budget_bytes=int(args.budget_gib * (1 << 30)))
    vocab = model.config.text.vocab_size
    rows = measure(model, presets(), args.tokens, vocab)
    for r in rows:
        print(json.dumps(r), flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"kv": args.kv, "tokens": args.tokens, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
