"""`monorail inspect ARTIFACT`: recipe, bytes by role, provenance, checks, and the 24 GiB plan."""

from __future__ import annotations

import argparse
import sys

GIB = 1 << 30


def _plan_section(art) -> list[str]:
    """The native memory plan on a 24 GiB card at 262,144 tokens, with the formats the native engine
    holds this artifact in (engine.native_recipe.recipe_from_artifact: every stored format is kept),
    the most compact KV format the engine has, and the prefill chunk the engine would pick."""
    try:
        from engine.native_recipe import recipe_from_artifact
        from engine.plan import KV_DTYPES, PlanRequest, fit_prefill_chunk, make_plan

        kv = "int4" if "int4" in KV_DTYPES else "int8"
        req = PlanRequest(max_context=262144, kv_dtype=kv, vision=art.config.has_vision,
                          vram_budget=24 * GIB, recipe=recipe_from_artifact(art))
        req = fit_prefill_chunk(art.config, req)
        plan = make_plan(art.config, req)
    except Exception as exc:  # the plan needs the native module's dry run
        return [f"plan: unavailable here ({type(exc).__name__}: {exc})"]
    return [f"native plan on a 24 GiB card at 262,144 tokens ({kv} KV; stored formats kept):",
            *("  " + ln for ln in plan.format_table().splitlines())]


def _run(args: argparse.Namespace) -> int:
    from engine.artifact import Artifact, ArtifactError
    from engine.registry import ROLES

    try:
        art = Artifact.open(args.artifact, allow_test_shapes=True if args.allow_test_shapes else None)
    except (ArtifactError, ValueError) as exc:
        print(f"monorail inspect: error: {exc}", file=sys.stderr)
        return 2
    rec, src = art.recipe, art.source
    print(f"artifact   {art.path} ({art.header.file_len:,} bytes, format v{art.metadata['monorail.artifact']})")
    print(f"family     {art.family} ({art.architecture}); text layout '{art.text_prefix}'")
    print(f"recipe     {rec['tag']}")
    print(f"source     {src['name']} ({src['dtype']}, {src['tensors']} tensors, {src['bytes']:,} bytes), "
          f"digest {src['digest']}")
    print(f"embedded   {', '.join(sorted(art.files)) or 'nothing'}")
    print(f"template   {'yes' if art.chat_template() else 'no (Monorail default will be used)'}")

    by_role: dict[str, list] = {r: [None, 0, 0, 0.0] for r in ROLES}
    for w in art.weights.values():
        n = 1
        for d in w.shape:
            n *= d
        row = by_role[w.role]
        row[0] = w.format
        row[1] += n
        row[3] = max(row[3], w.rel_error)
    for name in art.header.entries:
        base = name.rsplit(".", 1)[0] if name.endswith((".qcodes", ".qhigh", ".qscales")) else name
        by_role[art.weights[base].role][2] += art.header.entries[name].nbytes
    print(f"\n{'role':<12}{'format':>8}{'parameters':>16}{'bytes':>17}{'GiB':>8}{'bits/w':>8}{'max rel err':>13}")
    for role, (f, n, b, e) in by_role.items():
        if n:
            print(f"{role:<12}{f:>8}{n:>16,}{b:>17,}{b / GIB:>8.3f}{8 * b / n:>8.2f}{e:>13.3e}")
    text_mtp = sum(b for r, (_, _, b, _) in by_role.items() if r != "vision")
    print(f"{'text + MTP':<36}{text_mtp:>17,}{text_mtp / GIB:>8.3f}")
    print(f"{'vision':<36}{by_role['vision'][2]:>17,}{by_role['vision'][2] / GIB:>8.3f}")
    t = art.config.text
    kv4 = 262144 * len(t.full_attention_layers) * 2 * t.num_key_value_heads * t.head_dim * 17 // 32
    total = text_mtp + kv4 + by_role["vision"][2]
    print(f"\nweights + 4-bit KV (int4 K/V, g64 fp16 scales) for 262,144 tokens ({kv4 / GIB:.2f} GiB) + vision = "
          f"{total / GIB:.2f} GiB of 24 GiB, {(24 * GIB - total) / GIB:.2f} GiB left for state, workspaces and "
          "the CUDA context")
    print()
    for line in _plan_section(art):
        print(line)
    if args.verify:
        print("\nverifying every tensor checksum ...", flush=True)
        try:
            art.verify()
        except ArtifactError as exc:
            print(f"monorail inspect: error: {exc}", file=sys.stderr)
            return 3
        print(f"all {len(art.header.entries)} tensors match their checksums")
    if args.tensors:
        print(f"\n{'rel err':>10}  {'format':6} {'shape':>16}  tensor")
        for w in sorted(art.weights.values(), key=lambda w: -w.rel_error):
            print(f"{w.rel_error:>10.3e}  {w.format:6} {str(list(w.shape)):>16}  {w.key}")
    return 0


def register(subparsers) -> None:
    p = subparsers.add_parser("inspect", help="show a Monorail artifact: recipe, bytes by role, provenance, plan")
    p.add_argument("artifact", help="artifact file written by `monorail convert`")
    p.add_argument("--verify", action="store_true", help="check every tensor's checksum (reads the whole file)")
    p.add_argument("--tensors", action="store_true", help="list every tensor with its reconstruction error")
    p.add_argument("--allow-test-shapes", action="store_true", help="accept tiny test models")
    p.set_defaults(func=_run)
