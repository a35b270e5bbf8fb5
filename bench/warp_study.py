"""Offline study of one decode step's warps, as bench/step_anatomy.py --raw saved them (a .npz; no GPU needed).

    python3 bench/warp_study.py bench/results/warps-q4g64-d0-h200-s20-call2.npz [--roles gate_up,down,lm_head]

Per role, over its launches in the step (times in us, each launch's warps against that launch's median warp end):
  durations   end - start of warps that do identical work: p10 / median / max, corr(start, end), and how much later
              than the median warp the last tenth of warps (by end) started: late starts or slow warps?
  repeat      a work item is (block, warp in block), the same rows in every launch of a route: the correlation of an
              item's mean end lag over the even launches with that over the odd ones (1: the lag is the item's,
              0: chance)
  subpart     the mean end lag by SM sub-partition (warp in block % 4) with its warps a block, and by block (first /
              last few): which warps end last, systematically
  waits       (files with a `wait` column: each warp's return from pdl_wait(), -1 if none) the release (the median
              warp's return minus the previous launch's last warp end), the spread of a launch's releases (p90 - p10)
              and the work after them (end - wait: median, max)
  by start    (with waits) the wait return against the previous launch's last warp end, and against the warp's own
              start, by when the warp started (its stamp) against that end: warps resident long before it show the
              PDL release itself; warps that start near it show what their own pre-wait work adds (session 22:
              0.6-0.9 us after the end against ~2 us after their start)
  SM bound    the last warp end minus the largest mean warp end of any SM: what a perfect balance of work inside
              each SM could take off the launch at most (median a launch, and summed over the role's launches)
Session 20 used these to rule out balance by SM, by sub-partition and by block as the source of the GEMV tails.
"""

from __future__ import annotations

import argparse
from collections import defaultdict

import numpy as np


def launches_of_role(z, role: str) -> list[int]:
    return [i for i, r in enumerate(z["role"]) if r == role]


def _launch(z, i: int) -> dict:
    m = z["launch"] == i
    end = z["end"][m].astype(np.float64)
    med = np.median(end)
    return {"start": (z["start"][m] - med) / 1e3, "end": (end - med) / 1e3, "block": z["block"][m].astype(np.int64),
            "warp": z["warp"][m].astype(np.int64)}


def durations(z, role: str) -> dict:
    """Medians over the role's launches of the warp-duration percentiles and of the start/end statistics."""
    rows = []
    for i in launches_of_role(z, role):
        L = _launch(z, i)
        d = L["end"] - L["start"]
        last = np.argsort(L["end"])[-max(1, len(d) // 10):]
        corr = np.corrcoef(L["start"], L["end"])[0, 1] if len(d) > 2 and np.std(L["start"]) > 0 else float("nan")
        rows.append((np.percentile(d, 10), np.median(d), d.max(), corr,
                     np.median(L["start"][last]) - np.median(L["start"])))
    a = np.array(rows)
    return dict(zip(["p10", "median", "max", "corr_start_end", "last_tenth_later"], np.nanmedian(a, axis=0)))


def item_repeat(z, role: str) -> dict:
    """How far each work item's end lag repeats between the even and the odd launches of the role."""
    lag = defaultdict(lambda: ([], []))
    launches = launches_of_role(z, role)
    wpb = 1 + int(z["warp"][np.isin(z["launch"], launches)].max(initial=0))  # warps a block
    for n, i in enumerate(launches):
        L = _launch(z, i)
        for item, e in zip(L["block"] * wpb + L["warp"], L["end"]):
            lag[int(item)][n % 2].append(e)
    both = [(np.mean(a), np.mean(b)) for a, b in lag.values() if a and b]
    if len(both) < 3:
        return {"corr": float("nan"), "sd_item_mean": float("nan")}
    a = np.array(both)
    return {"corr": float(np.corrcoef(a[:, 0], a[:, 1])[0, 1]), "sd_item_mean": float(np.std(a.mean(axis=1)))}


def waits(z, role: str) -> dict:
    """Medians over the role's launches of the release (median wait return minus the previous launch's last end),
    the release spread (p90 - p10 of its warps' wait returns) and the median and largest end - wait; empty where the
    file has no waits for the role."""
    if "wait" not in z:
        return {}
    rows = []
    for i in launches_of_role(z, role):
        m = (z["launch"] == i) & (z["wait"] >= 0)
        if m.sum() < 2:
            continue
        w = z["wait"][m].astype(np.float64) / 1e3
        after = z["end"][m] / 1e3 - w
        prev = z["end"][z["launch"] == i - 1]
        release = np.median(w) - prev.max() / 1e3 if len(prev) else float("nan")
        rows.append((release, np.percentile(w, 90) - np.percentile(w, 10), np.median(after), after.max()))
    if not rows:
        return {}
    return dict(zip(["release", "release_spread", "after_median", "after_max"], np.nanmedian(np.array(rows), axis=0)))


START_EDGES_US = (-3.0, -1.0, 0.0, 1.0)


def release_by_start(z, role: str, edges=START_EDGES_US) -> dict:
    """Over the role's launches with waits: each warp's wait return minus the previous launch's last warp end (us),
    grouped by the warp's start minus that end into the bins edges make (below the first edge, between edges, above
    the last). Returns {bin label: (median return after the end, median return after the warp's start, warps)};
    empty without waits."""
    if "wait" not in z:
        return {}
    lo = (-np.inf,) + tuple(edges)
    hi = tuple(edges) + (np.inf,)
    got = defaultdict(lambda: ([], []))
    for i in launches_of_role(z, role):
        m = (z["launch"] == i) & (z["wait"] >= 0)
        prev = z["end"][z["launch"] == i - 1]
        if not m.any() or not len(prev):
            continue
        pe = prev.max().astype(np.float64)
        start = (z["start"][m] - pe) / 1e3
        ret = (z["wait"][m] - pe) / 1e3
        for k, (a, b) in enumerate(zip(lo, hi)):
            sel = (start >= a) & (start < b)
            got[k][0].extend(ret[sel].tolist())
            got[k][1].extend((ret[sel] - start[sel]).tolist())
    return {f"[{lo[k]:g},{hi[k]:g})": (float(np.median(r)), float(np.median(d)), len(r))
            for k, (r, d) in sorted(got.items()) if r}


def sm_bound(z, role: str) -> dict:
    """Per launch, the last warp end minus the largest mean warp end of any SM (us): the most a perfect balance of
    the work inside each SM could save. Median over the role's launches, and the sum over them."""
    gains = []
    for i in launches_of_role(z, role):
        L = _launch(z, i)
        sm = z["sm"][z["launch"] == i]
        gains.append(L["end"].max() - max(L["end"][sm == s].mean() for s in np.unique(sm)))
    return {"median": float(np.median(gains)), "sum": float(np.sum(gains))} if gains else {}


def by_subpartition(z, role: str) -> dict:
    """Mean end lag by warp in block % 4 (the SM sub-partition a warp lands on) and its warps a block; by block."""
    sub = defaultdict(list)
    warps = defaultdict(set)
    block = defaultdict(list)
    for i in launches_of_role(z, role):
        L = _launch(z, i)
        for b, w, e in zip(L["block"], L["warp"], L["end"]):
            sub[int(w) % 4].append(e)
            warps[int(w) % 4].add(int(w))
            block[int(b)].append(e)
    return {"subpart": {q: (len(warps[q]), float(np.mean(v))) for q, v in sorted(sub.items())},
            "block": [float(np.mean(block[b])) for b in sorted(block)]}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("npz")
    ap.add_argument("--roles", default="gate_up,down,gdn_in,gdn_out,attn_qkv,attn_o,lm_head")
    args = ap.parse_args()
    z = dict(np.load(args.npz))
    print(f"{args.npz}: {len(z['launch'])} warps, {len(z['role'])} launches")
    for role in [r for r in args.roles.split(",") if launches_of_role(z, r)]:
        d, rep, sp = durations(z, role), item_repeat(z, role), by_subpartition(z, role)
        subs = " ".join(f"{q}:{n}w {lag:+.2f}" for q, (n, lag) in sp["subpart"].items())
        blocks = sp["block"]
        wt = waits(z, role)
        wts = (f" | release {wt['release']:.2f} (spread {wt['release_spread']:.2f}), after it median "
               f"{wt['after_median']:.2f} max {wt['after_max']:.2f}") if wt else ""
        print(f"{role:<9} durations p10 {d['p10']:.2f} median {d['median']:.2f} max {d['max']:.2f}, corr(start, end) "
              f"{d['corr_start_end']:.2f}, last tenth started {d['last_tenth_later']:+.2f} | repeat corr "
              f"{rep['corr']:.2f} (sd of item means {rep['sd_item_mean']:.2f}) | subpart {subs} | blocks first "
              f"{np.mean(blocks[:8]):+.2f} last {np.mean(blocks[-8:]):+.2f}{wts}")
        rb = release_by_start(z, role)
        if rb:
            print(f"{'':<9} wait return by start (us after the previous launch's end / after the warp's start): "
                  + " ".join(f"{k} {ret:.2f} / {own:.2f} (n {n})" for k, (ret, own, n) in rb.items()))
        sb = sm_bound(z, role)
        print(f"{'':<9} SM bound: perfect balance inside each SM saves at most {sb['median']:.2f} us a launch, "
              f"{sb['sum']:.1f} us over the step")


if __name__ == "__main__":
    main()
