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

from prefix_reuse import build_history, native_27b_engine, run_turn
from step_widths import step_seconds


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
    for t in (1, 4, 7, 16):
        print(f"step T={t:2d} at depth {args.history}: {step_seconds(engine._model, args.history, t) * 1e3:.2f} ms")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
