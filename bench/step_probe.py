"""Decode step time of the native engine on random 27B-shaped weights (24 GiB budget), without the full
benchmark: median ms per graph-replayed step at a few depths, per KV dtype.

    python3 bench/step_probe.py [--kv int8] [--depths 0,131072] [--steps 50] [--pdl 1,0]
"""

from __future__ import annotations

import argparse
import statistics


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--kv", default="int8")
    ap.add_argument("--depths", default="0")
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--gemv-variants", default="0", help="T = 1 GEMV variants to force, one run each (0 = route)")
    ap.add_argument("--pdl", default="1", help="programmatic dependent launch in the step: 1 (default), 0, or 1,0")
    args = ap.parse_args()
    from engine.native_backend import NativeModel
    depths = [int(d) for d in args.depths.split(",")]
    for kv in args.kv.split(","):
        model = NativeModel.random_27b(kv_dtype=kv, max_context=max(depths) + 64, seed=1, vram_budget_bytes=24 << 30)
        e = model.engine
        from engine.native import load_native
        nat = load_native()
        for pdl in [int(x) for x in args.pdl.split(",")]:
            nat.set_pdl(bool(pdl))
            for v in [int(x) for x in args.gemv_variants.split(",")]:
                nat.set_qgemv_variant(v)
                e.reset_graphs()  # the graph captured the previous launch configuration
                for d in depths:
                    ms = statistics.median(e.time_steps(0, d, args.steps) for _ in range(3))
                    print(f"step kv {kv} pdl {pdl} gemv variant {v} depth {d}: {ms:.3f} ms = {1000 / ms:.1f} tok/s",
                          flush=True)
        nat.set_pdl(True)
        nat.set_qgemv_variant(0)
        e.reset_graphs()
        del model, e


if __name__ == "__main__":
    main()
