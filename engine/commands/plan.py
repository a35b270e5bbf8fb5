"""`monorail plan`: print the native engine's memory plan for a model and settings (no GPU needed)."""

from __future__ import annotations

import argparse


def _parse_bytes(s: str) -> int:
    units = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}
    t = s.strip().lower().rstrip("ib").rstrip("b")
    if t and t[-1] in units:
        return int(float(t[:-1]) * units[t[-1]])
    return int(float(t))


def _run(args: argparse.Namespace) -> int:
    from engine.config import load_config
    from engine.native_backend import recipe_named
    from engine.plan import KV_DTYPES, PREFILL_CHUNK_CHOICES, PlanRequest, fit_prefill_chunk, make_plan

    if args.model == "27b":
        from engine.registry import config_27b
        cfg = config_27b()
    else:
        cfg = load_config(args.model)
    if args.kv not in KV_DTYPES:
        raise SystemExit(f"--kv must be one of {', '.join(KV_DTYPES)}")
    try:
        recipe = recipe_named(args.recipe, cfg)
    except ValueError as exc:
        raise SystemExit(f"--recipe: {exc}") from None
    auto = args.prefill_chunk == "auto"
    req = PlanRequest(
        max_context=args.context, kv_dtype=args.kv, max_concurrency=args.concurrency,
        speculative_window=args.spec, vision=args.vision,
        prefill_chunk=PREFILL_CHUNK_CHOICES[-1] if auto else int(args.prefill_chunk),
        vram_budget=_parse_bytes(args.vram_budget), recipe=recipe,
    )
    if auto:
        req = fit_prefill_chunk(cfg, req)
    plan = make_plan(cfg, req)
    print(plan.format_table())
    return 0 if plan.fits else 2


def register(subparsers) -> None:
    p = subparsers.add_parser("plan", help="print the native engine's memory plan (no GPU needed)")
    p.add_argument("model", nargs="?", default="27b",
                   help="checkpoint folder or config.json; '27b' (default) uses the built-in 27B shapes")
    p.add_argument("--context", type=int, default=262144, help="max context per sequence (tokens)")
    p.add_argument("--kv", default="int8", help="KV cache format (bf16, int8, int4)")
    p.add_argument("--concurrency", type=int, default=1, help="concurrent sequences (GDN state slots)")
    p.add_argument("--spec", type=int, default=0, help="speculative window (drafted tokens per step)")
    p.add_argument("--vision", action="store_true", help="plan for the vision tower")
    p.add_argument("--prefill-chunk", default="auto",
                   help="prefill chunk tokens of the native engine (0: prompts go through the decode step); "
                        "auto (default): the largest of 4096/2048/1024/512/256 that fits, as the engine picks")
    p.add_argument("--recipe", default="q4g64",
                   help="uniform weight format (q4g64, q6g32, q8g64, ...) or a converter recipe (q4-27b, q8, ...)")
    p.add_argument("--vram-budget", default="24GiB", help="bytes, e.g. 24GiB, 22.5G, 25769803776")
    p.set_defaults(func=_run)
