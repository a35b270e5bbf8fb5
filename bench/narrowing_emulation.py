"""A numpy copy of the device sampler's top-p narrowing (csrc/cuda/sampler.cu: sample_collect's bins,
sample_narrow's choice of bins, finish_cutoff's cut from the mass above), run against the host Sampler.

For rows shaped like tests/test_native_sampler.py's (peaked, long tail, broad, whole numbers, clustered, flat), it
prints for each top-p case whether the row would be narrowed, the bins [b_in, b_out] and the candidates left, and
checks that the emulated draw equals the host Sampler's at a few draw indices; for rows left wide (more candidates
than finish sorts), the wide select's radix select (finish_wide) as well. It runs without a GPU: a check of the method, not
of the CUDA code (the GPU tests are that).

    python3 bench/narrowing_emulation.py [--draws 4]
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from sampler_rows import SLICE_DRAW_CASES, sampler_rows  # noqa: E402  (the tests' row shapes and cases)

V, VALID = 248320, 248077
BINS, CUTOFF, MASS_SCALE, MARGIN, MAX_CANDIDATES = 64, np.float32(26.1), 2.0**40, 4e-6, 8192
SLICE = 2048


def narrowing(values: np.ndarray, top_p: float, min_p: float) -> dict:
    """sample_narrow's decision for one row of values (penalised logits over the temperature, float32)."""
    M = values.max()
    reach = np.isfinite(values) & (values >= M - CUTOFF)
    floor_value = M - CUTOFF
    if min_p > 0:
        floor_value = max(floor_value, np.float32(M + np.float32(math.log(min_p))))
    flagged = reach & (values >= floor_value)
    bins = np.full(values.shape, BINS, dtype=np.int64)
    bins[reach] = np.minimum(BINS - 1, ((M - values[reach]) * np.float32(BINS / CUTOFF)).astype(np.int64))
    e = np.exp(values.astype(np.float64) - float(M))
    fixed = np.floor(e * MASS_SCALE).astype(np.uint64)
    bin_mass = np.array([int(fixed[reach & (bins == b)].sum()) for b in range(BINS)], dtype=np.float64)
    bin_count = np.array([int((flagged & (bins == b)).sum()) for b in range(BINS)])
    z = float(e[np.isfinite(values)].sum())
    target, margin = top_p * z * MASS_SCALE, MARGIN * z * MASS_SCALE
    cum, b_in, b_out = 0.0, BINS, BINS - 1
    for b in range(BINS):
        cum += bin_mass[b]
        if b_in == BINS and cum + margin >= target:
            b_in = b
        if b_in < BINS and cum - margin >= target:
            b_out = b
            break
    boundary = int(bin_count[b_in:b_out + 1].sum())
    slices = -(-values.shape[0] // SLICE)
    capacity = (values.shape[0] // 2 * 8 - (812 * slices + 32 + 255) // 256 * 256) // (8 * slices)
    per_slice = np.add.reduceat(flagged.astype(np.int64), np.arange(0, values.shape[0], SLICE))
    overflow = int(flagged.sum()) > MAX_CANDIDATES or int(per_slice.max()) > capacity
    narrowed = overflow and boundary <= MAX_CANDIDATES and boundary <= capacity * slices  # one packed list
    return dict(narrowed=narrowed, overflow=overflow, capacity=capacity, per_slice_max=int(per_slice.max()),
                b_in=b_in, b_out=b_out, boundary=boundary, collected=int(flagged.sum()), M=M, z=z, bins=bins, e=e,
                floor=floor_value)


def emulated_draw(values: np.ndarray, top_p: float, n: dict, seed: int, step: int) -> int:
    """finish_cutoff on a narrowed row: the cut among the sorted boundary ids from the mass above, then the draw."""
    from engine.sampling import gumbel_noise

    ids = np.arange(values.shape[0])
    bins = n["bins"]
    above = bins < n["b_in"]
    mass_above = float(n["e"][above].sum())
    boundary = (bins >= n["b_in"]) & (bins <= n["b_out"]) & (values >= n["floor"])
    b_ids = ids[boundary]
    order = np.lexsort((b_ids, -values[boundary]))  # value desc, id asc
    b_ids = b_ids[order]
    b_vals = values[b_ids].astype(np.float64)
    share = np.exp(b_vals - float(n["M"])) / n["z"]
    before = mass_above / n["z"] + (np.cumsum(share) - share)
    kept = b_ids[before < top_p]
    eligible_above = ids[above & (values >= n["floor"])]
    pool = np.concatenate((eligible_above, kept))
    scores = values[pool].astype(np.float64) + gumbel_noise(seed, [step], pool)[0]
    return int(pool[np.argmax(scores)])  # ties: the first, as the device (the ids above come first)


def f2key(v: np.ndarray) -> np.ndarray:
    u = v.astype(np.float32).view(np.uint32)
    u = np.where(u == 0x80000000, np.uint32(0), u)  # -0 takes +0's key
    return np.where(u & 0x80000000, ~u, u | 0x80000000).astype(np.uint32)


def wide_draw(values: np.ndarray, top_p: float, n: dict, seed: int, step: int, details: bool = False):
    """finish_wide on a row left wide (state 2): the radix select over the packed list, then the draw; None where it
    returns -2 (the fallback). details: (token, the list's ids top-p keeps, the list's ids)."""
    from engine.sampling import gumbel_noise

    ids = np.arange(values.shape[0])
    bins = n["bins"]
    above = bins < n["b_in"]
    mass_above = float(n["e"][above].sum())
    listed = ids[(bins >= n["b_in"]) & (bins <= n["b_out"]) & (values >= n["floor"])]  # id order
    keys = f2key(values[listed])
    scale = 2.0**44  # finish_wide's unit, finer than the bins'
    fixed = np.floor(n["e"][listed] * scale).astype(np.uint64)
    target = (top_p * n["z"] - mass_above) * scale
    slack = len(listed) + 1e-9 * n["z"] * scale
    total = float(fixed.sum(dtype=np.uint64))
    if total + slack < target:
        kept = listed
    elif total - slack < target:
        return None
    else:
        prefix, mask, cum = 0, 0, 0
        for shift in (24, 16, 8, 0):
            match = (keys & np.uint32(mask)) == np.uint32(prefix)
            buckets = (keys[match] >> np.uint32(shift)) & np.uint32(0xFF)
            hist = np.zeros(256, dtype=np.uint64)
            np.add.at(hist, buckets.astype(np.int64), fixed[match])
            b = 255
            while b > 0 and float(cum + int(hist[b])) < target:
                cum += int(hist[b])
                b -= 1
            count = int((buckets == b).sum())
            prefix |= b << shift
            mask |= 0xFF << shift
        thr = np.uint32(prefix)
        q = math.exp(float(values[listed][keys == thr][0]) - float(n["M"])) * scale
        x, dx = (target - cum) / q, slack / q
        lo, hi = math.ceil(x - dx), math.ceil(x + dx)
        if cum + slack >= target or lo != hi or lo < 1 or hi > count:
            return None
        ties = listed[keys == thr][:lo]
        kept = np.concatenate((listed[keys > thr], ties))
    if details and len(kept) < len(listed):
        order = np.lexsort((kept, -values[kept]))  # the host's order: value desc, id asc
        kept = kept[order]
    pool_above = ids[above & (values >= n["floor"])]
    best = None
    for pool, first in ((pool_above, True), (kept, False)):
        if len(pool) == 0:
            continue
        scores = values[pool].astype(np.float64) + gumbel_noise(seed, [step], pool)[0]
        top = int(np.argmax(scores))
        if best is None or scores[top] > best[0]:
            best = (scores[top], int(pool[top]))
    return (best[1], kept, listed) if details else best[1]


# the tests' top-p cases, and the benchmark's top-p mode
CASES = {**{k: v for k, v in SLICE_DRAW_CASES.items() if "top_p" in v},
         "bench no top-k, top-p 0.9": dict(temperature=1.0, top_p=0.9)}


def main() -> None:
    import torch

    from engine.sampling import Sampler, SamplingParams

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--draws", type=int, default=4)
    args = ap.parse_args()
    gen = torch.Generator().manual_seed(7)
    prompt = torch.randint(0, VALID, (300,), generator=gen).tolist()
    generated = torch.randint(0, VALID, (40,), generator=gen).tolist() + [5] * 3
    hot = prompt[:5] + generated[:5] + [5]
    row_set = {name: r[0] for name, r in sampler_rows(gen, hot, T=1).items()}
    mismatches = 0
    for case, sampling in CASES.items():
        host = Sampler(SamplingParams(**sampling, seed=11), valid_vocab_size=VALID)
        for name, row in row_set.items():
            logits = torch.cat((row[:VALID], torch.full((V - VALID,), float("-inf"))))
            values = (host.penalised_logits(logits, generated, prompt) / sampling["temperature"]).numpy()
            n = narrowing(values, sampling["top_p"], sampling.get("min_p", 0.0))
            line = (f"{case:26s} {name:12s} collected {n['collected']:6d} narrowed {int(n['narrowed'])} "
                    f"bins [{n['b_in']}, {n['b_out']}] boundary {n['boundary']} (largest slice {n['per_slice_max']})")
            # state 2 needs room for the list and, after it, each candidate's fixed-point mass
            wide = n["overflow"] and not n["narrowed"] and 2 * n["boundary"] <= n["capacity"] * (-(-V // SLICE))
            if wide:  # state 2 with the wide select's switch
                line += " wide:"
                for step in range(args.draws):
                    want = host.sample(logits, generated, prompt_ids=prompt, step=step)
                    got = wide_draw(values, sampling["top_p"], n, host.seed, step)
                    mismatches += got is not None and want != got
                    line += " fallback" if got is None else f" {'=' if want == got else 'MISMATCH'}"
            if n["narrowed"]:
                for step in range(args.draws):
                    want = host.sample(logits, generated, prompt_ids=prompt, step=step)
                    got = emulated_draw(values, sampling["top_p"], n, host.seed, step)
                    mismatches += want != got
                    line += f" {'=' if want == got else 'MISMATCH'}"
            print(line, flush=True)
    for k in (100, 300, 1000):  # top-k's narrowing: the bins up to where the count from the top reaches k
        for name, row in row_set.items():
            values = (row[:VALID] / 0.9).numpy()
            n = narrowing(values, 1.0, 0.0)
            counts = [int((n["bins"] == b).sum()) for b in range(BINS)]
            cum, b_k = 0, None
            for b, c in enumerate(counts):
                cum += c
                if cum >= k:
                    b_k = b
                    break
            print(f"top-k {k:<5d} {name:16s} collected {n['collected']:6d} bins [0, {b_k}] candidates {cum}", flush=True)
    print(f"mismatches: {mismatches}")
    sys.exit(1 if mismatches else 0)


if __name__ == "__main__":
    main()
