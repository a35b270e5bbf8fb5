"""Wall time of one decode step of T = 1..16 tokens on random weights of the real 27B shapes (run on the GPU machine),
with the GEMVs of T > 1 on tensor cores (set_qgemv_mma on) and per token (off), at a few depths.

    python bench/step_widths.py --out bench/results/step-widths-h100.json [--depths 0,32768] [--widths 1,2,4,8,16]

A step of T tokens is what a short prompt tail (Engine routes inputs of up to 128 tokens through steps) and the
verification of T - 1 speculative drafts cost; its weights are streamed once however many tokens it carries, so it
should cost about what T = 1 does until the attention or the arithmetic takes over. Each figure is the median of
--reps graph replays of NativeEngine.forward (inputs uploaded, the step's graph launched, synchronised), after one
that captures the graph. ``weights_gb`` is the step's streamed weight bytes, ``roofline_ms`` those bytes at the
measured copy bandwidth (bench/decode.py's copy test).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import statistics
import time


def _sync() -> None:
    import torch
    torch.cuda.synchronize()


def step_seconds(model, depth: int, T: int, reps: int = 5) -> float:
    """Median wall seconds of one engine.forward of T tokens at cache position ``depth`` on a fresh lane (the KV
    slots below depth hold whatever they hold: only the time is used)."""
    state = model.new_state(depth + 64)
    try:
        ids = [1000 + i for i in range(T)]
        times = []
        for _ in range(reps + 1):
            _sync()
            t0 = time.perf_counter()
            model.engine.forward(state.lane, ids, [], depth)
            _sync()
            times.append(time.perf_counter() - t0)
    finally:
        model.release(state)
    return statistics.median(times[1:])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="bench/results/step-widths.json")
    ap.add_argument("--depths", default="0,32768")
    ap.add_argument("--widths", default="1,2,3,4,8,16")
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--budget-gib", type=float, default=24.0)
    ap.add_argument("--recipe", default="q4g64", help="q4g64 (every matrix 4-bit) or a converter recipe id such as "
                                                     "q4-27b (5 / 6 / 8-bit matrices too)")
    args = ap.parse_args(argv)
    import torch

    from decode import copy_bandwidth_gbs   # bench/ is the script's directory, first on sys.path
    from engine.native import load_native
    from engine.native_backend import STEP_TOKENS, NativeModel
    from engine.native_recipe import recipe_named
    from engine.plan import streamed_weight_bytes
    from engine.registry import config_27b
    from provenance import commit as run_commit, write_result

    depths = [int(d) for d in args.depths.split(",") if d]
    widths = [int(w) for w in args.widths.split(",") if w]
    nat = load_native()
    cfg = config_27b(vision=False)
    recipe = recipe_named(args.recipe, cfg)
    model = NativeModel.random_27b(kv_dtype="int8", max_context=max(depths) + 4096, seed=1, recipe=recipe,
                                   vram_budget_bytes=int(args.budget_gib * (1 << 30)), step_tokens=STEP_TOKENS)
    weights = streamed_weight_bytes(cfg.text, recipe)
    bw = copy_bandwidth_gbs()
    rows = []
    for depth in depths:
        for T in widths:
            row = {"depth": depth, "T": T}
            for name, on in (("mma", True), ("per_token", False)):
                if not on and T == 1:
                    continue
                before = nat.qgemv_mma()
                nat.set_qgemv_mma(on)
                model.engine.reset_graphs()   # a step's graph holds the kernels it was captured with
                try:
                    row[f"{name}_ms"] = round(step_seconds(model, depth, T, args.reps) * 1e3, 3)
                finally:
                    nat.set_qgemv_mma(before)
                    model.engine.reset_graphs()
            rows.append(row)
            print(json.dumps(row), flush=True)
    result = {"gpu": torch.cuda.get_device_name(0), "commit": run_commit(), "date": dt.date.today().isoformat(),
              "model": f"random weights of the real 27B shapes, native engine, int8 KV, {args.recipe}",
              "weights_gb": round(weights / 1e9, 3), "copy_bandwidth_gbs": round(bw, 1),
              "roofline_ms": round(weights / (bw * 1e9) * 1e3, 3),
              "method": "median of graph replays of NativeEngine.forward(T tokens) at the depth, synchronised; "
                        "mma: the T > 1 GEMVs on tensor cores (set_qgemv_mma(True)), per_token: set_qgemv_mma(False); "
                        "weights_gb: engine.plan.streamed_weight_bytes",
              "rows": rows}
    write_result(args.out, result)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
