"""Whole steps of T = 2..16 tokens on random weights of the real 27B shapes under each shape of work of the
tensor-core GEMV (set_qgemv_mma_shape: warps an SM, which sets how far K is split, and 128-element spans a warp
loads together), to choose its default (run on the GPU machine).

    python bench/mma_shape_sweep.py --out bench/results/mma-shape-sweep.json [--shapes 0,0;8,0;16,0,h;8,0,o]

Warps 0 and spans 0 are the default's choices (warps by form, spans by width: 4 for T <= 8, 2 above). A third field
sets rows a warp: h 16, w 32, neither the default's choice by width (16 for T <= 6, 32 above; session 46). Each
pass's weight loads go out before its first product (set_qgemv_mma_loads_first, the default since session 45) unless
the third field has o, which asks for them as ptxas schedules them (32-row warps only). A digit 1 or 2 in it sets the
warps a block (set_qgemv_mma_block_warps; 4 without); c runs every pass with its bounds checks, as before session
47 (set_qgemv_mma_unchecked_passes off); the flags combine (8,0,wo; 0,0,1c).

(Forms once swept with a third field, each measured slower and removed: session 41's f, the split-K sums in the GEMV
(session 42); session 43's p, a pass of weights loaded ahead, and n, the next norm in the reduce kernel (session 43);
session 44's r1 / r2, 16-row tiles walked in turn with 512-byte runs of each row a pass (session 44); session 45's
g, the 4-bit group-scaled form (session 46). Until session 46, no flag meant 32 rows.)

Each shape's graphs are captured anew (a captured graph keeps its launch shapes). The step times are the median of
graph replays of engine.forward of T tokens at depth 0, synchronised, as bench/step_widths.py times them; T = 1 runs
the per-token kernels, beside them for scale. ``best`` is the shape with the least time summed over the widths of a
speculative verify step (T = 2 and 4)."""

from __future__ import annotations

import argparse
import datetime as dt
import json
import statistics
import time


def step_ms(engine, T: int, reps: int) -> float:
    import torch
    ids = [1000 + i for i in range(T)]
    engine.forward(0, ids, [], 0)   # captures this width's graph
    times = []
    for _ in range(reps):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        engine.forward(0, ids, [], 0)
        torch.cuda.synchronize()
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="bench/results/mma-shape-sweep.json")
    ap.add_argument("--shapes", default="0,0;8,0,w;16,0,h;8,0,h")
    ap.add_argument("--widths", default="1,2,4,8,16")
    ap.add_argument("--reps", type=int, default=7)
    args = ap.parse_args(argv)
    import torch

    from engine.native import load_native
    from engine.native_backend import STEP_TOKENS, NativeModel
    from provenance import commit as run_commit, write_result

    nat = load_native()
    fields = [s.split(",") for s in args.shapes.split(";") if s]
    flags = [f[2] if len(f) > 2 else "" for f in fields]
    shapes = [(int(f[0]), int(f[1]), 16 if "h" in fl else 32 if "w" in fl else 0, "o" not in fl,
               1 if "1" in fl else 2 if "2" in fl else 4, "c" not in fl) for f, fl in zip(fields, flags)]
    widths = [int(w) for w in args.widths.split(",") if w]
    model = NativeModel.random_27b(kv_dtype="int8", max_context=4096, seed=1, vram_budget_bytes=24 << 30,
                                   step_tokens=STEP_TOKENS)
    state = model.new_state(64)
    before, first_before = nat.qgemv_mma_shape(), nat.qgemv_mma_loads_first()
    block_before = nat.qgemv_mma_block_warps()
    unchecked_before = nat.qgemv_mma_unchecked_passes()
    rows = []
    try:
        for warps, spans, rows_per_warp, first, block_warps, unchecked in shapes:
            nat.set_qgemv_mma_shape(warps, spans, rows_per_warp)
            nat.set_qgemv_mma_loads_first(first)
            nat.set_qgemv_mma_block_warps(block_warps)
            nat.set_qgemv_mma_unchecked_passes(unchecked)
            model.engine.reset_graphs()
            row = {"warps_per_sm": warps, "spans": spans, "rows_per_warp": rows_per_warp, "loads_first": first,
                   "block_warps": block_warps, "unchecked_passes": unchecked,
                   "ms": {str(T): round(step_ms(model.engine, T, args.reps), 3) for T in widths},
                   "runs_as": {str(T): list(nat.qgemv_mma_shape_for(T)) for T in widths}}
            rows.append(row)
            print(json.dumps(row), flush=True)
    finally:
        nat.set_qgemv_mma_shape(*before)
        nat.set_qgemv_mma_loads_first(first_before)
        nat.set_qgemv_mma_block_warps(block_before)
        nat.set_qgemv_mma_unchecked_passes(unchecked_before)
        model.engine.reset_graphs()
        model.release(state)
    verify = [w for w in ("2", "4") if w in rows[0]["ms"]] or list(rows[0]["ms"])
    best = min(rows, key=lambda r: sum(r["ms"][w] for w in verify))
    result = {"gpu": torch.cuda.get_device_name(0), "commit": run_commit(), "date": dt.date.today().isoformat(),
              "model": "random weights of the real 27B shapes, native engine, int8 KV, q4g64, depth 0",
              "default_before": list(before), "method": "median ms of graph replays of engine.forward(T tokens)",
              "rows": rows, "best": [best["warps_per_sm"], best["spans"], best["rows_per_warp"]],
              "best_loads_first": best["loads_first"], "best_block_warps": best["block_warps"],
              "best_unchecked_passes": best["unchecked_passes"],
              "best_by": f"sum over T = {verify}"}
    write_result(args.out, result)
    print(f"best {best['warps_per_sm']},{best['spans']},{best['rows_per_warp']} loads_first={best['loads_first']} "
          f"block_warps={best['block_warps']} unchecked_passes={best['unchecked_passes']}; wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
