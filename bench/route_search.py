"""Choose the T = 1 GEMV route on whole decode steps: a greedy search over the 4-bit launch variant of each
decode shape, timed as full graph-replayed steps of the 27B (int8 KV, 24 GiB plan, PDL as in production).

    python3 bench/route_search.py [--depth 0] [--steps 30] [--json out.json]
    python3 bench/route_search.py --recipe q4-27b --candidates 0,1,16,17,18,19,36,45,46   # a converter recipe

Why steps and not bench/gemv_probe.py's table: inside a step each GEMV overlaps its neighbours (programmatic
dependent launch) and finds x in L2, so the per-shape bests of the isolated table do not add up (session 5 call 2:
the table's best route predicted -0.5 ms and ran +0.1 ms). For each shape in turn (largest share first), every
candidate is timed with the shapes already decided fixed; a candidate must beat the incumbent by more than
`--margin` to replace it. The winner and the built-in route are then timed alternately `--verify` times.
Overrides go through set_qgemv_shape_variant; nothing is rebuilt.
"""

from __future__ import annotations

import argparse
import json
import statistics

CANDIDATES = [1, 4, 6, 7, 10, 14, 20, 21, 23, 24, 26, 27, 28]


def decode_shapes(recipe, t) -> list[tuple[int, int]]:
    """The GEMV shapes of one decode step in `recipe` (engine.plan.Recipe; t: the text config), a split role as its
    head and tail matrices (engine.plan.tail_rows), largest share of the step's weights first: what the search walks
    by default."""
    from engine.plan import matrix_shapes, tail_rows
    share: dict[tuple[int, int], int] = {}
    for role, shapes in matrix_shapes(t).items():
        if role == "embed":  # a row gather, not a GEMV
            continue
        tr = tail_rows(t, role) if recipe.is_split(role) else 0
        for n, k in shapes:
            for shape in ([(n - tr, k), (tr, k)] if tr else [(n, k)]):
                share[shape] = share.get(shape, 0) + shape[0] * shape[1]
    return sorted(share, key=lambda s: -share[s])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--depth", type=int, default=0)
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--margin", type=float, default=0.003, help="relative gain a candidate needs")
    ap.add_argument("--verify", type=int, default=5)
    ap.add_argument("--shapes", default="", help="comma-separated NxK shapes to search (default: every GEMV shape of "
                                                 "the recipe's step)")
    ap.add_argument("--recipe", default="q4g64", help="weight formats, as bench/step_probe.py's --recipe")
    ap.add_argument("--candidates", default=",".join(map(str, CANDIDATES)), help="comma-separated variant ids")
    ap.add_argument("--json", default="")
    args = ap.parse_args()
    from engine.native import load_native
    from engine.native_backend import NativeModel
    from engine.native_recipe import recipe_named
    from engine.registry import config_27b
    from step_probe import apply_route, format_route  # bench/ is this script's directory
    candidates = [int(v) for v in args.candidates.split(",") if v]
    cfg = config_27b(vision=False)
    recipe = recipe_named(args.recipe, cfg)
    nat = load_native()
    model = NativeModel.random_27b(kv_dtype="int8", max_context=args.depth + 64, seed=1, vram_budget_bytes=24 << 30,
                                   recipe=recipe)
    e = model.engine

    def step_ms(route: dict) -> float:
        apply_route(nat, e, route)
        return statistics.median(e.time_steps(0, args.depth, args.steps) for _ in range(3))

    base = step_ms({})
    print(f"built-in route: {base:.3f} ms", flush=True)
    route: dict = {}
    best = base
    log = []
    shapes = [tuple(int(d) for d in t.split("x")) for t in args.shapes.split(",") if t] or decode_shapes(recipe,
                                                                                                      cfg.text)
    for shape in shapes:
        for v in candidates:
            ms = step_ms({**route, shape: v})
            log.append({"shape": list(shape), "variant": v, "ms": round(ms, 4)})
            print(f"  {shape[0]}x{shape[1]} = {v:2d}: {ms:.3f} ms", flush=True)
            if ms < best * (1 - args.margin):
                best, route = ms, {**route, shape: v}
        print(f"{shape[0]}x{shape[1]}: keep {route.get(shape, 'built-in')} ({best:.3f} ms)", flush=True)
    pairs = [(step_ms({}), step_ms(route)) for _ in range(args.verify)]
    b = statistics.median(p[0] for p in pairs)
    r = statistics.median(p[1] for p in pairs)
    text = format_route(route)
    print(f"verify ({args.verify} alternating pairs): built-in {b:.3f} ms, searched [{text}] {r:.3f} ms "
          f"({(b - r) / b * 100:+.1f} %)", flush=True)
    apply_route(nat, e, {})
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"recipe": args.recipe, "depth": args.depth, "builtin_ms": b, "searched_ms": r, "route": text, "log": log}, f, indent=1)


if __name__ == "__main__":
    main()
