"""Where one decode step's time goes between kernels: a CUPTI trace (torch.profiler) of graph-replayed
steps of the native engine on random 27B-shaped weights (24 GiB budget), reduced to kernel busy time,
the idle gaps between consecutive kernels, and per-kernel sums.

    python3 bench/step_timeline.py [--kv int8] [--depth 0] [--steps 4] [--json out.json] [--pdl 0] [--route 5120x6144=36]
        [--recipe q4-27b] [--tokens T]

--tokens T > 1 traces steps of T tokens (a prompt tail, a speculative verify step without checkpoints): graph
replays of engine.forward, as bench/step_widths.py times them; the GEMV roles then run the tensor-core GEMV (and its
split-K reduce kernel, a role of its own), and their GB/s count the weight bytes once a step.

The step's wall time is the first kernel's start to the last kernel's end of one replay; "gap before X"
is the idle time between the end of the previous kernel and the start of X. With one stream and no
overlap, wall = busy + gaps. The step is traced with programmatic dependent launch off by default (--pdl 0):
with it on, kernels overlap their predecessors' tails and a kernel's traced time includes the time it spends
blocked in griddepcontrol.wait, so busy time and gaps stop meaning anything (session 4, call 3).

What does mean something in both modes is each kernel's increment, its end minus its predecessor's end (a kernel
cannot end before the one it waits on): the step's time is the sum of the increments. They are summed per role in
the layer (gdn_in, gdn_step, gdn_out, gate_up, down, ...; from the kernel order), with the role's weight bytes and the
rate those bytes were streamed at over the increment.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
from collections import defaultdict


def short_name(name: str) -> str:
    base = name.replace("(anonymous namespace)::", "").replace("void ", "").replace("monorail::", "")
    return base.split("(")[0].split("<")[0].strip()


# kernel-name fragment -> role, for the kernels whose role their name says
_NAMED_ROLES = (("embed", "embed"), ("gdn_kernel", "gdn_step"), ("gdn_conv_decode", "gdn_step"), ("conv", "conv"),
                ("attn_prep", "attn_prep"),
                ("attn_split", "attn_split"), ("attn_combine", "attn_combine"), ("rmsnorm", "rmsnorm"))


def gemv_role(i: int, names: list[str], prev: str) -> str:
    """A GEMV's role from its neighbours: what follows an input projection, what precedes the MLP's two. An input
    projection in two formats (engine.plan.SPLIT_ROLES: a recipe that stores GDN b|a or attention k|v apart) is two
    GEMVs, the head ("gdn_in", "attn_qkv") then the tail ("gdn_ba", "attn_kv")."""
    nxt = names[i + 1] if i + 1 < len(names) else ""
    nxt2 = names[i + 2] if i + 2 < len(names) else ""
    if i == len(names) - 1:
        return "lm_head"
    gdn_next = lambda n: "gdn_kernel" in n or "conv" in n  # noqa: E731
    if gdn_next(nxt):
        return "gdn_ba" if prev == "gdn_in" else "gdn_in"
    if prev == "rmsnorm" and "qgemv" in nxt and gdn_next(nxt2):  # a split projection always runs the norm first
        return "gdn_in"
    if "attn_prep" in nxt:
        return "attn_kv" if prev == "attn_qkv" else "attn_qkv"
    if prev == "rmsnorm" and "qgemv" in nxt and "attn_prep" in nxt2:
        return "attn_qkv"
    return {"gdn_step": "gdn_out", "attn_combine": "attn_o", "gdn_out": "gate_up", "attn_o": "gate_up",
            "rmsnorm": "gate_up", "gate_up": "down"}.get(prev, "gemv (?)")


def role_names(names: list[str]) -> list[str]:
    """The role of each kernel of one step in its layer, from the kernel order (engine.cu enqueue_step). The
    tensor-core GEMV's split-K reduce (steps of T > 1) is a role of its own, left out of the order the GEMVs' roles
    are read from."""
    is_reduce = ["qgemv_mma_reduce" in n for n in names]
    order = [n for n, r in zip(names, is_reduce) if not r]
    roles: list[str] = []
    for i, n in enumerate(order):
        role = next((r for frag, r in _NAMED_ROLES if frag in n), None)
        if role is None:
            role = gemv_role(i, order, roles[-1] if roles else "") if "qgemv" in n else n
        roles.append(role)
    it = iter(roles)
    return ["mma_reduce" if r else next(it) for r in is_reduce]


def role_bytes(recipe) -> dict[str, int]:
    """Weight bytes one kernel of each GEMV role streams, in ``recipe`` (engine/plan.py's Recipe)."""
    from engine.plan import matrix_shapes, quantized_bytes
    from engine.registry import config_27b
    shapes = matrix_shapes(config_27b(vision=False).text)
    plan_role = {"gate_up": "mlp_gate_up", "down": "mlp_down"}  # the timeline's role names -> the plan's
    out = {}
    for r in ("gdn_in", "gdn_out", "attn_qkv", "attn_o", "gate_up", "down", "lm_head"):
        role = plan_role.get(r, r)
        out[r] = quantized_bytes(*shapes[role][0], *recipe.spec(role))
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--kv", default="int8")
    ap.add_argument("--depth", type=int, default=0)
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--json", default="")
    ap.add_argument("--pdl", type=int, default=0, help="programmatic dependent launch in the traced step (default off)")
    ap.add_argument("--route", default="", help="per-shape GEMV overrides of the built-in route, as step_probe.py's "
                                                "--routes takes one (e.g. 5120x6144=36)")
    ap.add_argument("--recipe", default="q4g64", help="weight formats, as step_probe.py's --recipe (e.g. q4-27b)")
    ap.add_argument("--attn-variant", type=int, default=-1, help="attention split variant (-1: the route by KV format)")
    ap.add_argument("--tokens", type=int, default=1, help="tokens a step (T > 1: engine.forward of T tokens)")
    args = ap.parse_args()
    import torch
    from torch.profiler import ProfilerActivity, profile

    from engine.native_backend import NativeModel

    from engine.native_recipe import recipe_named
    from engine.registry import config_27b
    recipe = recipe_named(args.recipe, config_27b(vision=False))
    model = NativeModel.random_27b(kv_dtype=args.kv, max_context=args.depth + 64, seed=1,
                                   vram_budget_bytes=24 << 30, recipe=recipe, step_tokens=max(1, args.tokens))
    e = model.engine
    from engine.native import load_native
    load_native().set_pdl(bool(args.pdl))
    load_native().set_attn_variant(args.attn_variant)
    from step_probe import apply_route, parse_route  # bench/ is the script's directory, first on sys.path
    apply_route(load_native(), e, parse_route(args.route) if args.route.strip() else {})
    if args.tokens > 1:
        import time
        ids = [1000 + i for i in range(args.tokens)]

        def run_steps(n: int) -> float:
            """ms a step over n forwards of T tokens at the depth (each rewrites the same slots), synchronised."""
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            for _ in range(n):
                e.forward(0, ids, [], args.depth)
            torch.cuda.synchronize()
            return (time.perf_counter() - t0) * 1e3 / n
        run_steps(2)   # the graph of T tokens is captured
    else:
        def run_steps(n: int) -> float:
            return e.time_steps(0, args.depth, n)
    graph_ms = statistics.median(run_steps(30) for _ in range(3))
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        run_steps(args.steps)
    torch.cuda.synchronize()
    path = os.path.join(tempfile.mkdtemp(), "trace.json")
    prof.export_chrome_trace(path)
    with open(path) as f:
        events = json.load(f)["traceEvents"]
    kernels = sorted((ev for ev in events if ev.get("cat") == "kernel"), key=lambda ev: ev["ts"])
    if not kernels:
        raise SystemExit("no kernel events in the trace (CUPTI did not record graph kernels)")
    # one step = the kernels from one embed gather to the next
    starts = [i for i, ev in enumerate(kernels) if "embed" in ev["name"]]
    if len(starts) < 2:
        raise SystemExit(f"could not split the trace into steps ({len(starts)} embed kernels)")
    steps = [kernels[a:b] for a, b in zip(starts, starts[1:])][-max(1, args.steps - 2):]
    walls, busys, counts = [], [], []
    dur_by = defaultdict(float)
    gap_by = defaultdict(float)
    n_by = defaultdict(int)
    for st in steps:
        walls.append(st[-1]["ts"] + st[-1]["dur"] - st[0]["ts"])
        busys.append(sum(ev["dur"] for ev in st))
        counts.append(len(st))
        prev_end = None
        for ev in st:
            k = short_name(ev["name"])
            dur_by[k] += ev["dur"] / len(steps)
            n_by[k] += 1
            if prev_end is not None:
                gap_by[k] += max(0.0, ev["ts"] - prev_end) / len(steps)
            prev_end = ev["ts"] + ev["dur"]
    inc_by = defaultdict(float)  # role -> summed increments (us per step)
    nrole_by = defaultdict(int)
    for st in steps:
        roles = role_names([short_name(ev["name"]) for ev in st])
        prev_end = st[0]["ts"]
        for ev, r in zip(st, roles):
            end = ev["ts"] + ev["dur"]
            inc_by[r] += (end - prev_end) / len(steps)
            nrole_by[r] += 1
            prev_end = end
    rb = role_bytes(recipe)
    wall, busy = statistics.median(walls), statistics.median(busys)
    res = {
        "recipe": args.recipe, "kv": args.kv, "depth": args.depth, "tokens": args.tokens, "pdl": bool(args.pdl),
        "route": args.route,
        "graph_step_ms": graph_ms,
        "traced_step_us": wall, "kernel_busy_us": busy, "gap_us": wall - busy,
        "kernels_per_step": statistics.median(counts),
        "per_kernel": {k: {"count": n_by[k] // len(steps), "busy_us": round(dur_by[k], 1),
                           "gap_before_us": round(gap_by[k], 1)}
                       for k in sorted(dur_by, key=lambda k: -dur_by[k])},
        "per_role": {r: {"count": nrole_by[r] // len(steps), "increment_us": round(inc_by[r], 1),
                         "us_each": round(inc_by[r] / max(1, nrole_by[r] // len(steps)), 2),
                         **({"gbs": round(rb[r] * (nrole_by[r] // len(steps)) / (inc_by[r] * 1e3), 1)}
                            if r in rb and inc_by[r] > 0 else {})}
                     for r in sorted(inc_by, key=lambda r: -inc_by[r])},
    }
    print(f"graph step {graph_ms:.3f} ms; traced step {wall:.0f} us = busy {busy:.0f} + gaps {wall - busy:.0f} us "
          f"over {res['kernels_per_step']} kernels")
    for k, v in res["per_kernel"].items():
        print(f"  {k:40s} n {v['count']:4d} busy {v['busy_us']:8.1f} us  gaps before {v['gap_before_us']:7.1f} us")
    print("increments (a kernel's end minus its predecessor's end), per role:")
    for r, v in res["per_role"].items():
        rate = f"  {v['gbs']:7.1f} GB/s" if "gbs" in v else ""
        print(f"  {r:14s} n {v['count']:4d} {v['increment_us']:8.1f} us  {v['us_each']:7.2f} us each{rate}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
