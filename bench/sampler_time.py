"""Microseconds a device draw takes (csrc/cuda/sampler.cu: prepare, collect, narrow, finish), by sampling mode, on
248,320-id rows of logits: one with a long tail under a few near-tied leaders (~450 ids within reach of the draw), a
broad one (a guess at a trained model's row at temperature 1: leaders 12 above a tail of standard deviation 3, so
about two thirds of the ids are within reach), and a flat one (every id within reach). Where more than 8192 ids are
within reach, the candidate modes (no top-k, top-k above 64) fall back to the one-block path; top-k 10000 takes it
on every row. With the slice draw's switch (set_sampler_slice_draw, on by default) draws with neither top-k nor
top-p never fall back, and top-p without top-k falls back only where its cut's bins hold more than 8192 ids.
Each of --slice-draw, --wide-select (a top-p cut among more narrowed candidates than finish sorts) and
--top-k-narrowing (top-k above 64 over more ids within reach than finish sorts) takes a comma-separated list of 0 and
1; every mode is timed at each combination back to back (the same clocks), after a warm-up of the GPU.

    python3 bench/sampler_time.py [--reps 200] [--slice-draw 1] [--wide-select 0,1] [--top-k-narrowing 0,1] [--json F]
"""

from __future__ import annotations

import argparse
import datetime as dt
import itertools
import json
import time

V, VALID = 248320, 248077

MODES = {
    "greedy": dict(temperature=0.0),
    "top-k 20 + top-p (thinking preset)": dict(temperature=0.6, top_k=20, top_p=0.95, presence_penalty=1.5),
    "top-k 64": dict(temperature=0.8, top_k=64),
    "no top-k, top-p 0.9": dict(temperature=0.8, top_p=0.9),
    "no top-k, temperature only": dict(temperature=0.8),
    "no top-k, min-p 0.05": dict(temperature=1.0, min_p=0.05),
    "no top-k, top-p 0.95, min-p 0.05": dict(temperature=1.0, top_p=0.95, min_p=0.05),
    "top-k 100": dict(temperature=0.8, top_k=100),
    "top-k 10000 (fallback)": dict(temperature=0.8, top_k=10000),
}


def make_rows() -> dict:
    """The three rows of logits (module docstring), on the GPU, each of shape (1, V); the same every run."""
    import torch

    gen = torch.Generator().manual_seed(0)
    tail = torch.randn(V, generator=gen) * 12
    tail[:16] = 60.0 + torch.randn(16, generator=gen) * 0.5
    broad = torch.randn(V, generator=gen) * 3.0
    broad[:16] += 12.0
    return {"long tail": tail.cuda().reshape(1, V), "broad": broad.cuda().reshape(1, V),
            "flat": (torch.randn(V, generator=gen) * 0.7).cuda().reshape(1, V)}


def time_draw(nat, logits, params: dict, reps: int) -> float:
    """Median microseconds of one draw, over `reps` draws timed in batches of 20 with CUDA events."""
    import torch

    inp = torch.zeros(nat.STEP_INPUTS_INT32, dtype=torch.int32, device="cuda")  # StepInputs: lane 0, draw 0
    counts = torch.zeros(V, dtype=torch.int32, device="cuda")
    scratch = torch.empty(1, V, device="cuda")
    out = torch.empty(1, dtype=torch.int32, device="cuda")
    p = dict(params, vocab_limit=VALID, seed=1)
    args = (logits.data_ptr(), 1, V, p, counts.data_ptr(), inp.data_ptr(), scratch.data_ptr(), out.data_ptr())
    for _ in range(5):
        nat.op_sample(*args)
    times = []
    for _ in range(max(1, reps // 20)):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        for _ in range(20):
            nat.op_sample(*args)  # each call synchronises: the figure includes a launch's latency
        b.record()
        torch.cuda.synchronize()
        times.append(a.elapsed_time(b) * 1000 / 20)
    times.sort()
    return times[len(times) // 2]


def main() -> None:
    import torch

    from engine.native import load_native
    from provenance import commit  # bench/ is the script's directory, first on sys.path

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--reps", type=int, default=200)
    ap.add_argument("--slice-draw", default="1", help="settings of set_sampler_slice_draw to time (0, 1; a list)")
    ap.add_argument("--wide-select", default="", help="settings of set_sampler_wide_select (default: the library's)")
    ap.add_argument("--top-k-narrowing", default="", help="settings of set_sampler_top_k_narrowing (default: the "
                    "library's)")
    ap.add_argument("--json", default="")
    args = ap.parse_args()
    nat = load_native()
    rows = make_rows()
    switches = ("slice_draw", "wide_select", "top_k_narrowing")
    defaults = {name: getattr(nat, f"get_sampler_{name}")() for name in switches}
    choices = {name: [bool(int(x)) for x in given.split(",")] if given else [defaults[name]]
               for name, given in zip(switches, (args.slice_draw, args.wide_select, args.top_k_narrowing))}
    settings = [dict(zip(switches, combo)) for combo in itertools.product(*choices.values())]
    # the GPU's clocks settle before the first figure: a second of draws, thrown away
    warm_until = time.perf_counter() + 1.0
    while time.perf_counter() < warm_until:
        time_draw(nat, rows["flat"], MODES["no top-k, top-p 0.9"], 20)
    results = []
    try:
        for row_name, logits in rows.items():
            for mode, params in MODES.items():
                for setting in settings:
                    for name, on in setting.items():
                        getattr(nat, f"set_sampler_{name}")(on)
                    us = time_draw(nat, logits, params, args.reps)
                    results.append(dict(row=row_name, mode=mode, **setting, us_per_draw_with_sync=round(us, 1)))
                    print(json.dumps(results[-1]), flush=True)
    finally:
        for name, on in defaults.items():
            getattr(nat, f"set_sampler_{name}")(on)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"gpu": torch.cuda.get_device_name(), "commit": commit(), "date": dt.date.today().isoformat(),
                       "vocab": V, "rows": results}, f, indent=1)


if __name__ == "__main__":
    main()
