"""Speculative decoding on the native engine (engine/native_speculative.py) against plain GPU decoding, on random
weights of the real 27B shapes with the MTP head (run on the GPU machine).

    python bench/spec_decode.py --out bench/results/spec-decode-h100.json [--depth 0] [--drafts 1,3] [--accept 0,0.6,0.8,1]
        [--sampling greedy | a preset of engine/sampling.py, e.g. instruct]

--sampling other than greedy times sampled rounds (coupled drafts) with that preset's settings, penalties included
(a preset with a penalty draws a verify step's rows one at a time); the oracle's continuation is then plain decoding's
draws for the seed.

Random weights make the head's drafts useless (nearly every one is rejected), so the acceptance is set instead: the
drafts come from an oracle, the plain greedy continuation computed first by one-token steps, and each round's drafts
are kept true up to a draft spoiled with probability 1 - a (so a draft is right with probability a when the ones before
it were, as a head's drafts are). Every other part of a round runs as in the app: the head drafts k tokens (its
output is then replaced), the trunk verifies in one step of k + 1 tokens writing its state checkpoints, the greedy
rule commits, the lane is set to the committed length, the committed pairs go through the head. So the figures are
the machinery's real cost at a given acceptance; the acceptance a real checkpoint's head reaches is not measured here
(MODEL.md's anchors: 73-81 % with three drafts). ``measured_accept`` is the fraction of drafts kept (a verify step's
argmax can differ from the one-token steps' at a near tie, which the oracle then gets wrong).

Plain decoding is the app's path for the same greedy request without drafts: NativeModel.decode_tokens (sampled on
the GPU, steps queued ahead of the host).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import random
import time


SEED = 1234


def plain_continuation(model, prompt: list[int], depth: int, n: int, dev: dict) -> list[int]:
    """n tokens after ``prompt`` at cache position ``depth`` as plain decoding draws them (device sampler ``dev``,
    draw index = response index, penalty counts kept), by one-token steps: the oracle's drafts."""
    state = model.new_state(depth + len(prompt) + n + 64)
    state.seq_len = depth
    from engine.native_speculative import has_penalties
    penalised = has_penalties(dev)
    try:
        model.forward(prompt, state, last_only=True)
        if penalised and dev["repetition_penalty"] != 1.0:
            model.count_tokens(state, prompt, in_prompt=True)
        out: list[int] = []
        while True:
            out.append(model.sample(state, **dev, draw=len(out))[0])
            if len(out) >= n:
                return out
            if penalised:
                model.count_tokens(state, [out[-1]])
            model.forward([out[-1]], state)
    finally:
        model.release(state)


def plain_tok_s(model, prompt: list[int], depth: int, n: int, vocab: int, params) -> float:
    state = model.new_state(depth + len(prompt) + n + 64)
    state.seq_len = depth
    try:
        model.forward(prompt, state, last_only=True)
        tokens = model.decode_tokens(state, params, seed=SEED, vocab_limit=vocab, prompt_ids=prompt)
        next(tokens)   # the first token (from the prompt's logits) and the loop's graph
        t0 = time.perf_counter()
        for _, _t in zip(range(n), tokens):
            pass
        dt_s = time.perf_counter() - t0
        tokens.close()
        return n / dt_s
    finally:
        model.release(state)


def speculative_run(model, prompt, depth, want, k, accept, vocab, seed, dev):
    """(tokens a second, drafts kept / drafted, rounds) of speculative_tokens over len(want) - k - 1 tokens."""
    from engine.native_speculative import speculative_tokens
    from engine.speculative import SpecStats
    rng = random.Random(seed)
    start = depth + len(prompt)

    def oracle(base: int, drafts: list[int]) -> list[int]:
        i = base - start
        out = want[i + 1:i + 1 + k]
        for j in range(k):
            if rng.random() >= accept:
                out[j] = (out[j] + 1) % vocab   # the first spoiled draft ends the round's keeps
                break
        return out

    n = len(want) - k - 1
    for attempt in range(2):   # the first pass captures the graphs (the head's take one per count of pairs)
        rng.seed(seed)
        state = model.new_state(start + len(want) + 64)
        state.seq_len = depth
        stats = SpecStats()
        try:
            model.forward(prompt, state, last_only=True)
            gen = speculative_tokens(model, state, want[0], k=k, sampling=dev, prompt_ids=prompt, stats=stats,
                                     draft_filter=oracle)
            t0 = time.perf_counter()
            got = 0
            for _ in gen:
                got += 1
                if got >= n:
                    break
            dt_s = time.perf_counter() - t0
            gen.close()
        finally:
            model.release(state)
    return got / dt_s, stats.accepted / max(1, stats.drafted), stats.drafted // k


def component_ms(model, prompt: list[int], depth: int, k: int, reps: int = 9) -> dict:
    """Median milliseconds of a round's parts on their own (synchronised after each): the head over one pair, a
    chained draft, the verify step of k + 1 tokens with its checkpoints, a commit that copies a checkpoint, and a
    one-token trunk step for scale."""
    import statistics

    import torch
    state = model.new_state(depth + len(prompt) + 4 * reps * (k + 2) + 64)
    state.seq_len = depth
    times: dict[str, list[float]] = {"mtp_pair": [], "mtp_chain": [], f"verify_T{k + 1}": [], "commit": [],
                                     "trunk_step": []}

    def timed(name, fn):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        times[name].append((time.perf_counter() - t0) * 1e3)

    try:
        model.forward(prompt, state, last_only=True)
        for _ in range(reps + 1):   # the first pass captures the graphs
            # a round's order: verify, commit (which leaves the kept position's head pair pending), the head's draft
            # closing it, a chained draft; then a plain step, with no head pair left for it to close
            timed(f"verify_T{k + 1}", lambda: model.verify([1000] + [1001 + i for i in range(k)], state))
            timed("commit", lambda: model.commit(state, 1))
            timed("mtp_pair", lambda: model.mtp_draft(state, 1000))
            timed("mtp_chain", lambda: model.mtp_chain(state, 1001, state.seq_len))
            timed("trunk_step", lambda: model.forward([1002], state))
    finally:
        model.release(state)
    return {name: round(statistics.median(v[1:]), 3) for name, v in times.items()}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="bench/results/spec-decode.json")
    ap.add_argument("--depth", type=int, default=0)
    ap.add_argument("--drafts", default="1,3")
    ap.add_argument("--accept", default="0,0.6,0.8,1")
    ap.add_argument("--tokens", type=int, default=96)
    ap.add_argument("--budget-gib", type=float, default=24.0)
    ap.add_argument("--sampling", default="greedy", help="greedy, or a preset of engine/sampling.py (e.g. instruct)")
    args = ap.parse_args(argv)
    import torch

    from engine.native import load_native
    from engine.native_backend import STEP_TOKENS, NativeModel
    from provenance import commit as run_commit, write_result

    drafts = [int(d) for d in args.drafts.split(",") if d]
    accepts = [float(a) for a in args.accept.split(",") if a]
    nat = load_native()
    model = NativeModel.random_27b(kv_dtype="int8", max_context=args.depth + 4096, seed=1,
                                   vram_budget_bytes=int(args.budget_gib * (1 << 30)), step_tokens=STEP_TOKENS,
                                   mtp_drafts=max(drafts))
    vocab = model.config.text.vocab_size
    from engine.native_loop import device_sampling
    from engine.sampling import preset
    params = preset(args.sampling)
    dev = device_sampling(params, seed=SEED, vocab_limit=vocab)
    prompt = [1000 + i for i in range(24)]
    want = plain_continuation(model, prompt, args.depth, args.tokens + max(drafts) + 1, dev)
    plain = plain_tok_s(model, prompt, args.depth, args.tokens, vocab, params)
    print(json.dumps({"plain_tok_s": round(plain, 1)}), flush=True)
    components = {k: component_ms(model, prompt, args.depth, k) for k in drafts}
    print(json.dumps({"components_ms": components}), flush=True)
    rows = []
    for k in drafts:
        for a in accepts:
            tok_s, kept, rounds = speculative_run(model, prompt, args.depth, want, k, a, vocab, seed=int(100 * a) + k,
                                                  dev=dev)
            row = {"drafts": k, "accept": a, "tok_s": round(tok_s, 1), "measured_accept": round(kept, 3),
                   "rounds": rounds, "speedup": round(tok_s / plain, 3)}
            rows.append(row)
            print(json.dumps(row), flush=True)
    result = {"gpu": torch.cuda.get_device_name(0), "commit": run_commit(), "date": dt.date.today().isoformat(),
              "model": "random weights of the real 27B shapes with the MTP head, native engine, int8 KV, q4g64",
              "depth": args.depth, "tensor_core_gemv": bool(nat.qgemv_mma()), "plain_tok_s": round(plain, 1),
              "sampling": args.sampling, "sampling_params": dev, "components_ms": components,
              "method": "wall time of speculative_tokens with oracle drafts at a set acceptance (module doc) after a "
                        "warm round, against NativeModel.decode_tokens with the same sampling (the plain GPU loop)",
              "rows": rows}
    write_result(args.out, result)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
