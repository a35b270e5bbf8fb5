"""What a token costs through the app's loop, against the decode step alone (native backend, random 27B weights).

    python3 bench/token_loop.py [--tokens 64] [--kv int8] [--json out.json]
    python3 bench/token_loop.py --host-sampler     # no GPU: the host Sampler alone on random logits of the 27B's vocab

bench/decode.py times graph replays back to back; a user's tokens come through engine/api.py's loop. Four figures a
token, each over `--tokens` tokens of a lane after a warm-up, for greedy and the two default presets (`default_params`):

  step    NativeEngine.time_steps: graph replays back to back (what the benchmark reports);
  app     what engine/api.py runs for the native backend: NativeModel.decode_tokens (engine/native_loop.py), each
          token drawn on the GPU and fed to the next step there, two steps queued ahead of the host;
  host    the loop the app ran before (session 24): model.forward(last_only=True) (the 1 MB logits row copied to
          the host and synchronised) then the host Sampler;
  device  engine.forward + engine.sample: the device sampler with one sync a token (the sampler's own cost).

The gap between `app` and `step` is GPU time the app leaves idle (`app_idle_fraction`).
"""

from __future__ import annotations

import argparse
import json
import time


def app_loop(model, params, tokens: int, vocab: int) -> float:
    """Seconds a token through the app's native loop (NativeModel.decode_tokens), after two warm-up tokens."""
    import torch

    state = model.new_state(tokens + 16)
    model.forward(torch.tensor([1]), state, last_only=True)
    loop = model.decode_tokens(state, params, seed=params.seed or 0, vocab_limit=vocab)
    next(loop)
    next(loop)  # the loop's graph is captured by now
    t0 = time.perf_counter()
    for _ in range(tokens):
        next(loop)
    dt = (time.perf_counter() - t0) / tokens
    loop.close()
    return dt


def host_loop(model, params, tokens: int, vocab: int) -> float:
    """Seconds a token with the logits copied to the host and the host Sampler (the app's loop before session 25)."""
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
    """Seconds a token with the device sampler and a sync a token: engine.forward, engine.sample (one int back)."""
    from engine.native_loop import device_sampling

    state = model.new_state(tokens + 8)
    eng, lane = model.engine, state.lane
    p = device_sampling(params, seed=params.seed or 0, vocab_limit=vocab)
    token, pos = 1, 0

    def one(token: int, pos: int) -> int:
        eng.forward(lane, [token], [pos] * 3, pos)
        return int(eng.sample(lane, 1, p, pos)[0])

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
    """One row per sampling preset: milliseconds a token in each loop, and the app's idle share against the step."""
    step = step_only(model, tokens)
    rows = []
    for name, params in params_by_name.items():
        app = app_loop(model, params, tokens, vocab)
        host, dev = host_loop(model, params, tokens, vocab), device_loop(model, params, tokens, vocab)
        rows.append(dict(preset=name, step_ms=round(step * 1e3, 3), app_loop_ms=round(app * 1e3, 3),
                         host_loop_ms=round(host * 1e3, 3), device_loop_ms=round(dev * 1e3, 3),
                         app_tok_s=round(1 / app, 1), host_tok_s=round(1 / host, 1), step_tok_s=round(1 / step, 1),
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
