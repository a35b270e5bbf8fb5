"""Decode step time of the native engine on random 27B-shaped weights (24 GiB budget unless --budget-gib), without the full
benchmark: median ms per graph-replayed step at a few depths, per KV dtype.

    python3 bench/step_probe.py [--kv int8] [--depths 0,131072] [--steps 50] [--pdl 1,0]
    python3 bench/step_probe.py --routes "34816x5120=23;34816x5120=23,16480x5120=24"   # per-shape GEMV routes
    python3 bench/step_probe.py --kv int8,int4 --depths 131072 --attn-variants 4,5,6    # attention split variants
    python3 bench/step_probe.py --lanes 1,0      # variant 4's inputs in the lanes layout (1, default) or perm8
    python3 bench/step_probe.py --norm-early 1,0,1   # the fused norm's weights before the PDL wait (1) or after (0)
    python3 bench/step_probe.py --conv-ring 1,0,1    # the GDN step's conv windows as whole rings (1) or by position (0)
    python3 bench/step_probe.py --recipe q4-27b      # the converter's default recipe (5-bit down, 6-bit lm_head, ...)

--carveouts: one L1 / shared-memory split preference for every kernel of the step (pdl.cuh), e.g. --carveouts=-1,0,100
(with '=': argparse reads a value starting with '-' as an option).
--routes: routes separated by ';', each a comma-separated list of NxK=variant overrides over the built-in route
(set_qgemv_shape_variant); the built-in route is always timed first.
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
    ap.add_argument("--lanes", default="1", help="the inputs of down, gdn_out and the attention output in the lanes "
                                                 "layout (csrc/cuda/ops.h GEMV_X_LANES): 1 (default), 0 (perm8), or 1,0")
    ap.add_argument("--conv-ring", default="",
                    help="after the norm runs, time the GDN decode step's conv windows read as whole rings (1, the "
                         "default) or addressed by the position before the PDL wait (0), e.g. 1,0,1 (set_gdn_conv_ring)")
    ap.add_argument("--norm-early", default="",
                    help="after the GEMV runs, time the fused norm's weights loaded before the PDL wait (1, the "
                         "default) and after it (0), e.g. 1,0,1 (set_qgemv_norm_weights_early)")
    ap.add_argument("--keep-x-fused", default="",
                    help="steps with a split projection's head writing the normalised x itself (1) and with the norm "
                         "kernel first (0; 1 is the default), e.g. 0,1,0 (set_qgemv_keep_x_fused; q4-27b)")
    ap.add_argument("--split-fused", default="",
                    help="steps with a split projection's head and tail in one kernel (1) and as two GEMVs (0; 1 is "
                         "the default), e.g. 0,1,0 (set_qgemv_split_fused; q4-27b)")
    ap.add_argument("--carveouts", default="",
                    help="after the norm runs, time the built-in route with one shared-memory carveout preference for "
                         "every kernel of the step (percent; -1 = each kernel's own), e.g. -1,0,50,100 "
                         "(set_step_smem_carveout)")
    ap.add_argument("--routes-carveout", type=int, default=-1, help="the carveout the --routes runs use")
    ap.add_argument("--routes", default="", help="per-shape GEMV routes to time after the built-in one (see above)")
    ap.add_argument("--route-from", default="", help="also time the per-shape best route of a gemv_probe.py --json file")
    ap.add_argument("--attn-variants", default="",
                    help="attention split variants to time after the GEMV runs, one run each (csrc/cuda/attention.cu; "
                         "bf16 KV runs variant 4's code for 5 and 6)")
    ap.add_argument("--budget-gib", type=float, default=24, help="the engine's VRAM budget (q8g64's weights need ~30)")
    ap.add_argument("--recipe", default="q4g64",
                    help="weight formats: a converter recipe id (engine/recipe.py, e.g. q4-27b) or a uniform qBgG "
                         "(default q4g64, the benchmark's)")
    args = ap.parse_args()
    routes = [parse_route(r) for r in args.routes.split(";") if r.strip()]
    from engine.native_recipe import recipe_named
    from engine.plan import streamed_weight_bytes
    from engine.registry import config_27b
    cfg = config_27b(vision=False)
    recipe = recipe_named(args.recipe, cfg)
    print(f"recipe {args.recipe}: {streamed_weight_bytes(cfg.text, recipe) / 1e9:.3f} GB of weights a step", flush=True)
    if args.route_from:
        import json
        with open(args.route_from) as f:
            best = json.load(f)["4"]["best"]
        routes.append({tuple(int(d) for d in shape.split("x")): v for shape, v in best.items()})
    from engine.native_backend import NativeModel
    depths = [int(d) for d in args.depths.split(",")]
    for kv in args.kv.split(","):
        model = NativeModel.random_27b(kv_dtype=kv, max_context=max(depths) + 64, seed=1,
                                       vram_budget_bytes=int(args.budget_gib * (1 << 30)),
                                       recipe=recipe)
        e = model.engine
        from engine.native import load_native
        nat = load_native()
        for pdl in [int(x) for x in args.pdl.split(",")]:
            nat.set_pdl(bool(pdl))
            for lanes in [int(x) for x in args.lanes.split(",")]:
                nat.set_qgemv_lanes(bool(lanes))
                for v in [int(x) for x in args.gemv_variants.split(",")]:
                    nat.set_qgemv_variant(v)
                    e.reset_graphs()  # the graph captured the previous launch configuration
                    time_depths(e, depths, args.steps, f"step kv {kv} pdl {pdl} lanes {lanes} gemv variant {v}")
        nat.set_pdl(True)
        nat.set_qgemv_lanes(True)
        nat.set_qgemv_variant(0)
        def switch(setter, values: str, restore, label: str) -> None:
            time_switch(e, setter, values, restore, depths, args.steps, f"step kv {kv} {label}")

        switch(lambda v: nat.set_qgemv_norm_weights_early(bool(v)), args.norm_early, True, "norm weights early")
        switch(lambda v: nat.set_gdn_conv_ring(bool(v)), args.conv_ring, True, "gdn conv ring")
        switch(lambda v: nat.set_qgemv_keep_x_fused(bool(v)), args.keep_x_fused, True, "split head writes x")
        switch(lambda v: nat.set_qgemv_split_fused(bool(v)), args.split_fused, True, "split in one kernel")
        switch(nat.set_step_smem_carveout, args.carveouts, args.routes_carveout, "smem carveout")
        for route in routes:
            apply_route(nat, e, route)
            time_depths(e, depths, args.steps, f"step kv {kv} route {format_route(route)}")
        nat.set_step_smem_carveout(-1)
        apply_route(nat, e, {})  # also recaptures the graph, now with each kernel's own split
        default_attn = nat.get_attn_variant()
        for v in [int(x) for x in args.attn_variants.split(",") if x.strip()]:
            nat.set_attn_variant(v)
            e.reset_graphs()
            time_depths(e, depths, args.steps, f"step kv {kv} attention variant {v}")
        nat.set_attn_variant(default_attn)
        e.reset_graphs()
        del model, e


def time_switch(engine, setter, values: str, restore, depths: list[int], steps: int, label: str) -> None:
    """Steps with setter(v) for each v of the comma-separated ints `values` (the graph recaptured for each), labelled
    '<label> v', then setter(restore)."""
    for v in [int(x) for x in values.split(",") if x.strip()]:
        setter(v)
        engine.reset_graphs()
        time_depths(engine, depths, steps, f"{label} {v}")
    setter(restore)


def time_depths(engine, depths: list[int], steps: int, label: str) -> None:
    """Print the median (of 3 runs) ms of a graph-replayed step at each depth, as '<label> depth D: X ms = Y tok/s'."""
    for d in depths:
        ms = statistics.median(engine.time_steps(0, d, steps) for _ in range(3))
        print(f"{label} depth {d}: {ms:.3f} ms = {1000 / ms:.1f} tok/s", flush=True)


def apply_route(nat, engine, route: dict[tuple[int, int], int]) -> None:
    """Make `route` ({(N, K): variant}, over the built-in one) the T = 1 GEMV route of the next captured step."""
    nat.clear_qgemv_shape_variants()
    for (n, k), v in route.items():
        nat.set_qgemv_shape_variant(n, k, v)
    engine.reset_graphs()  # the captured graph holds the previous launch configuration


def format_route(route: dict[tuple[int, int], int]) -> str:
    """The inverse of parse_route."""
    return ",".join(f"{n}x{k}={v}" for (n, k), v in route.items())


def parse_route(text: str) -> dict[tuple[int, int], int]:
    """'34816x5120=23,16480x5120=24' -> {(34816, 5120): 23, (16480, 5120): 24}"""
    route = {}
    for item in text.split(","):
        shape, v = item.strip().split("=")
        n, k = shape.split("x")
        route[int(n), int(k)] = int(v)
    return route


if __name__ == "__main__":
    main()
