"""`monorail plan`: print the native engine's memory plan for a model and settings (no GPU needed)."""

from __future__ import annotations

import argparse
import sys


def parse_bytes(s: str) -> int:
    """'24GiB', '22.5G', '512 MB', '25769803776' -> bytes (binary units). argparse reports the ArgumentTypeError as a
    usage error naming the option."""
    units = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}
    t = s.strip().lower().rstrip("ib").rstrip("b").strip()
    scale = 1
    if t and t[-1] in units:
        t, scale = t[:-1], units[t[-1]]
    try:
        n = int(float(t) * scale)
    except (ValueError, OverflowError):  # not a number, or nan / inf
        raise argparse.ArgumentTypeError(f"not a size: {s!r} (e.g. 24GiB, 22.5G, 25769803776)") from None
    if n <= 0:
        raise argparse.ArgumentTypeError(f"a budget must be positive: {s!r}")
    if n < 1 << 20:   # no model plans into less than a MiB: a bare "16" meant gibibytes, not 16 bytes
        raise argparse.ArgumentTypeError(f"{s!r} is {n} bytes, too small for a VRAM budget; did you mean {s.strip()}GiB?")
    return n


def positive_int(s: str) -> int:
    try:
        n = int(s)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {s!r}") from None
    if n < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1: {s!r}")
    return n


def _plan(args: argparse.Namespace):
    from engine.config import load_config
    from engine.native_recipe import recipe_named
    from engine.plan import KV_DTYPES, PREFILL_CHUNK_CHOICES, PlanRequest, fit_prefill_chunk, make_plan

    if args.model == "27b":
        from engine.registry import config_27b
        cfg = config_27b()
    else:
        cfg = load_config(args.model)
    if args.kv not in KV_DTYPES:
        raise ValueError(f"--kv must be one of {', '.join(KV_DTYPES)}")
    try:
        recipe = recipe_named(args.recipe, cfg)
    except ValueError as exc:
        raise ValueError(f"--recipe: {exc}") from None
    auto = args.prefill_chunk == "auto"
    if not auto and not args.prefill_chunk.isdigit():
        raise ValueError(f"--prefill-chunk must be 'auto' or a token count, not {args.prefill_chunk!r}")
    req = PlanRequest(
        max_context=args.context, kv_dtype=args.kv, max_concurrency=args.concurrency,
        speculative_window=args.spec, vision=args.vision,
        # drafts from the model's MTP head: its weights, its KV and the verify steps' state checkpoints
        mtp_drafts=args.spec if cfg.text.mtp_num_hidden_layers else 0,
        prefill_chunk=PREFILL_CHUNK_CHOICES[-1] if auto else int(args.prefill_chunk),
        vram_budget=args.vram_budget, recipe=recipe,
    )
    if auto:
        req = fit_prefill_chunk(cfg, req)
    return make_plan(cfg, req)


def _run(args: argparse.Namespace) -> int:
    try:
        plan = _plan(args)
    except (ValueError, OSError) as exc:  # a bad folder (ConfigError is a ValueError) or setting: say which
        print(f"monorail plan: error: {exc}", file=sys.stderr)
        return 2
    print(plan.format_table())
    return 0 if plan.fits else 2


def register(subparsers) -> None:
    p = subparsers.add_parser("plan", help="print the native engine's memory plan (no GPU needed)")
    p.add_argument("model", nargs="?", default="27b",
                   help="checkpoint folder or config.json; '27b' (default) uses the built-in 27B shapes")
    p.add_argument("--context", type=positive_int, default=262144, help="max context per sequence (tokens)")
    p.add_argument("--kv", default="int8", help="KV cache format (bf16, int8, int4)")
    p.add_argument("--concurrency", type=positive_int, default=1, help="concurrent sequences (GDN state slots)")
    p.add_argument("--spec", type=int, default=0,
                   help="drafted tokens a speculative round (verify steps of spec + 1 tokens; with the model's MTP "
                        "head, also its weights, KV and the verify steps' state checkpoints)")
    p.add_argument("--vision", action="store_true", help="plan for the vision tower")
    p.add_argument("--prefill-chunk", default="auto",
                   help="prefill chunk tokens of the native engine (0: prompts go through the decode step); "
                        "auto (default): the largest of 4096/2048/1024/512/256 that fits, as the engine picks")
    p.add_argument("--recipe", default="q4g64",
                   help="uniform weight format (q4g64, q6g32, q8g64, ...) or a converter recipe (q4-27b, q8, ...)")
    p.add_argument("--vram-budget", default="24GiB", type=parse_bytes, help="bytes, e.g. 24GiB, 22.5G, 25769803776")
    p.set_defaults(func=_run)
