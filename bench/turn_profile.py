"""Where a resumed turn's time to first token goes (run on the GPU machine): a long conversation's next turn and a
regenerate, through engine.api.Engine.generate on random 27B weights as bench/prefix_reuse.py runs them, under
cProfile (host time; a native call that synchronises carries the GPU time it waited for), plus the wall time of
single steps of T = 1, 4, 7 and 16 tokens at the history's depth.

    python bench/turn_profile.py --history 32768 [--top 30] > turn-profile.txt
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import time

from prefix_reuse import _sync, build_history, native_27b_engine, run_turn


def step_times(engine, depth: int, widths=(1, 4, 7, 16), reps: int = 5) -> dict[int, float]:
    """Median wall seconds of one NativeModel.forward of T tokens at ``depth`` (no logits kept)."""
    import statistics

    import torch
    model = engine._model
    out = {}
    for t in widths:
        state = model.new_state(depth + 64)
        state.seq_len = depth            # the lane's KV slots hold whatever they hold: only the time matters
        ids = torch.arange(t) + 1000
        times = []
        for _ in range(reps + 1):
            _sync()
            t0 = time.perf_counter()
            model.engine.forward(state.lane, ids.tolist(), [], depth)
            _sync()
            times.append(time.perf_counter() - t0)
        model.release(state)
        out[t] = statistics.median(times[1:])
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--history", type=int, default=32768)
    ap.add_argument("--top", type=int, default=30)
    args = ap.parse_args(argv)
    engine = native_27b_engine(args.history + 4096, 24.0, "int8")
    run_turn(engine, [{"role": "user", "content": "warm up " * 200}])
    engine._prefixes = []
    history = build_history(engine, args.history)
    turn1 = history + [{"role": "user", "content": "Summarise the list above in one line."}]
    print("turn 1:", run_turn(engine, turn1))
    turn2 = turn1 + [{"role": "assistant", "content": "Noted."},
                     {"role": "user", "content": "Which word came up most often?"}]
    for name, msgs in (("turn 2", turn2), ("regenerate", turn2)):
        prof = cProfile.Profile()
        prof.enable()
        row = run_turn(engine, msgs)
        prof.disable()
        print(f"\n== {name}: {row}")
        pstats.Stats(prof).sort_stats("tottime").print_stats(args.top)
    for t, s in step_times(engine, args.history).items():
        print(f"step T={t:2d} at depth {args.history}: {s * 1e3:.2f} ms")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
