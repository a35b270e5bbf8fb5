"""Warp by warp, where the decode step's time goes at each kernel boundary (run on the GPU machine, diagnostic build).

    MONORAIL_STAMPS=ON MONORAIL_CUDA_ARCHS=90 python3 -m pip install --no-build-isolation --no-deps -e .
    python3 bench/step_anatomy.py [--kv int8] [--depth 0] [--recipe q4g64] [--json out.json]

The diagnostic build (csrc/cuda/stamps.cuh) has lane 0 of every warp of the step's kernels record its start and end
(%globaltimer) with its kernel family and a key that tells launches apart. This replays captured steps with the
stamps armed, keeps the last whole step (embed to embed), cuts it into launches and names each by its place in the
layer (gdn_in, gdn_step, gdn_out, gate_up, down; attn_qkv, attn_prep, attn_split, attn_combine, attn_o; lm_head).
Per launch, against the last warp of the launch before it (P):
  incr   its last warp's end minus P's last warp's end (what bench/step_timeline.py calls the increment)
  early  how long before P's end its first warp was resident (PDL: launched, waiting or prefetching)
  late   how long after P's end the median warp started (> 0: half its warps had no room until P's warps left)
  body   its median warp's end minus P's end
  tail   its last warp's end minus its median warp's end
  release  its median warp's return from pdl_wait() minus P's end (the PDL release; noted by pdl.cuh's pdl_wait)
  after    its median warp's end minus its median warp's release: the work after the wait
and, per GEMV role, its weight bytes over its incr (GB/s). The step's time with the stamps armed is printed
beside the same build's time disarmed: the recording costs an atomic and a few stores a warp.
"""

from __future__ import annotations

import argparse
import json
import statistics
from collections import defaultdict

# stamps.cuh's StampFamily -> a kernel name of the family, as bench/step_timeline.py's role_names reads them
KERNEL = {1: "qgemv_kernel", 2: "qgemv_pp_kernel", 3: "qgemv_col_kernel", 4: "qgemv4_sx_kernel",
          5: "qgemv4_split_kernel", 6: "qgemv_walk_kernel", 7: "qgemv_ring_kernel", 8: "gdn_conv_decode_kernel",
          9: "conv_kernel", 10: "attn_prep_kernel", 11: "attn_split_v4_kernel", 12: "attn_combine_kernel",
          13: "rmsnorm_kernel", 14: "embed_kernel"}
RECORD = [("family", "<u4"), ("sm", "<u4"), ("key", "<u8"), ("start", "<u8"), ("end", "<u8"), ("waited", "<u8")]
GAP_NS = 20_000  # launches of one (family, key) are at least a layer apart; one launch's warps start within this


def launches_of(rec) -> list[dict]:
    """Records -> launches: grouped by (family, key), a group cut where its sorted starts jump by more than GAP_NS.
    stamps.cuh packs the warp's index in its block above the family (bits 8-15) and blockIdx.x above the SM (16-31);
    `waited` (its return from pdl_wait(), 0 if none) counts only inside the warp's life (stamps.cuh)."""
    groups = defaultdict(list)
    for r in rec:
        fam, sm, start, end, waited = int(r["family"]), int(r["sm"]), int(r["start"]), int(r["end"]), int(r["waited"])
        if end > start:
            groups[(fam & 0xFF, int(r["key"]))].append((start, end, sm & 0xFFFF, sm >> 16, fam >> 8,
                                                        waited if start <= waited <= end else 0))
    out = []
    for (fam, key), rows in groups.items():
        rows.sort()
        cur = [rows[0]]
        for row in rows[1:]:
            if row[0] - cur[-1][0] > GAP_NS:
                out.append(summarize(fam, key, cur))
                cur = []
            cur.append(row)
        out.append(summarize(fam, key, cur))
    out.sort(key=lambda L: L["last_end"])
    return out


def summarize(fam: int, key: int, rows: list[tuple[int, ...]]) -> dict:
    """One launch from its warps' (start, end, sm, block, warp in block, wait return or 0) rows."""
    starts = sorted(r[0] for r in rows)
    ends = sorted(r[1] for r in rows)
    waits = sorted(r[5] for r in rows if r[5])
    sm_end: dict[int, int] = {}
    for r in rows:
        sm_end[r[2]] = max(sm_end.get(r[2], 0), r[1])
    return {"family": fam, "kernel": KERNEL.get(fam, str(fam)), "key": key, "warps": len(rows),
            "first_start": starts[0], "median_start": starts[len(starts) // 2], "first_end": ends[0],
            "median_end": ends[len(ends) // 2], "p90_end": ends[(9 * len(ends)) // 10], "last_end": ends[-1],
            "median_wait": waits[len(waits) // 2] if waits else 0, "waits": len(waits),
            "_sm_end": sm_end, "_rows": rows}  # each SM's last warp end; the warps (neither written to --json)


def name_roles(step: list[dict]) -> None:
    """Each launch's role in its layer, by bench/step_timeline.py's rules (the kernel order of engine.cu)."""
    from step_timeline import role_names  # bench/ is the script's directory, first on sys.path
    for L, role in zip(step, role_names([L["kernel"] for L in step])):
        L["role"] = role


def sm_lag_report(step: list[dict]) -> None:
    """Is the tail the same SMs every time? Per GEMV launch, each SM's last warp end minus the launch's median warp end;
    per SM, the mean over the launches and how often it is among the launch's last tenth of SMs."""
    lag = defaultdict(list)
    last = defaultdict(int)
    n = 0
    for L in step:
        if "qgemv" not in L["kernel"] or L["role"] == "lm_head":
            continue
        n += 1
        ends = L["_sm_end"]
        order = sorted(ends, key=ends.get)
        for sm in order[-max(1, len(order) // 10):]:
            last[sm] += 1
        for sm, t in ends.items():
            lag[sm].append((t - L["median_end"]) / 1e3)
    if not n:
        return
    mean = {sm: statistics.mean(v) for sm, v in lag.items()}
    worst = sorted(mean, key=mean.get)[-12:][::-1]
    p90_tail = statistics.median((L["last_end"] - L["p90_end"]) / 1e3 for L in step if "qgemv" in L["kernel"])
    print(f"\nthe tail by SM over {n} GEMV launches (an SM's last warp end minus the launch's median warp end, us): "
          f"median over SMs {statistics.median(mean.values()):.2f}, spread of the SM means "
          f"{min(mean.values()):.2f} .. {max(mean.values()):.2f}; a launch's last tenth of warps takes {p90_tail:.2f}")
    print("  slowest SMs: " + ", ".join(f"{sm} {mean[sm]:.2f} (last tenth {last[sm]}/{n})" for sm in worst))
    chance = n / 10
    print(f"  (an SM that were last at random would be in the last tenth ~{chance:.0f} of {n} times)")


def balance_report(step: list[dict]) -> None:
    """Does an SM's load decide when it finishes? Per GEMV role, the SMs of each launch grouped by how many of the
    launch's warps they held; per group, the mean lag (us after the launch's median warp end) of the SM's last warp
    and of its median warp. Beside it, the spread inside one SM (its last warp end minus its first)."""
    by_role = defaultdict(list)
    for L in step:
        if "qgemv" in L["kernel"] or L["role"] in ("gdn_step", "attn_split"):
            by_role[L["role"]].append(L)
    print("\nload by SM (per role: warps an SM held -> SMs x launches, mean lag of the SM's last / median warp end, "
          "us; spread inside an SM)")
    for role, Ls in by_role.items():
        groups = defaultdict(lambda: [0, 0.0, 0.0])
        spread = []
        for L in Ls:
            per_sm = defaultdict(list)
            for r in L["_rows"]:
                per_sm[r[2]].append(r[1])
            for ends in per_sm.values():
                ends.sort()
                g = groups[len(ends)]
                g[0] += 1
                g[1] += (ends[-1] - L["median_end"]) / 1e3
                g[2] += (ends[len(ends) // 2] - L["median_end"]) / 1e3
                spread.append((ends[-1] - ends[0]) / 1e3)
        cells = ", ".join(f"{n} -> {g[0]} x {g[1] / g[0]:+.2f} / {g[2] / g[0]:+.2f}" for n, g in sorted(groups.items()))
        print(f"  {role:<13} {cells}; inside an SM {statistics.median(spread):.2f}")


def save_raw(step: list[dict], path: str) -> None:
    """The kept step's warps for offline study (numpy .npz): per warp its launch's index, SM, block, warp in block,
    and start / end (and wait: its return from pdl_wait(), -1 where none was recorded) in ns after the step's first
    warp; per launch its role and kernel."""
    import numpy as np
    t0 = step[0]["first_start"]
    rows = [(i, r[2], r[3], r[4], r[0] - t0, r[1] - t0, r[5] - t0 if r[5] else -1)
            for i, L in enumerate(step) for r in L["_rows"]]
    a = np.array(rows, dtype=np.int64)
    np.savez_compressed(path, launch=a[:, 0].astype(np.int16), sm=a[:, 1].astype(np.int16),
                        block=a[:, 2].astype(np.int32), warp=a[:, 3].astype(np.int16),
                        start=a[:, 4].astype(np.int32), end=a[:, 5].astype(np.int32), wait=a[:, 6].astype(np.int32),
                        role=np.array([L["role"] for L in step]), kernel=np.array([L["kernel"] for L in step]))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--kv", default="int8")
    ap.add_argument("--depth", type=int, default=0)
    ap.add_argument("--recipe", default="q4g64")
    ap.add_argument("--per-sm", type=int, default=49152, help="records an SM (RECORD: 40 bytes each)")
    ap.add_argument("--json", default="")
    ap.add_argument("--raw", default="", help="also save the kept step's warps (.npz)")
    args = ap.parse_args()
    import numpy as np
    import torch

    from engine.native import load_native
    from engine.native_backend import NativeModel
    from engine.native_recipe import recipe_named
    from engine.registry import config_27b
    nat = load_native()
    if not nat.stamps_built():
        raise SystemExit("this engine._native was built without MONORAIL_STAMPS: rebuild with MONORAIL_STAMPS=ON "
                         "(see this file's header)")
    cfg = config_27b(vision=False)
    model = NativeModel.random_27b(kv_dtype=args.kv, max_context=args.depth + 64, seed=1,
                                   vram_budget_bytes=24 << 30, recipe=recipe_named(args.recipe, cfg))
    e = model.engine
    disarmed = statistics.median(e.time_steps(0, args.depth, 30) for _ in range(3))
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    rec = torch.zeros(sms * args.per_sm * np.dtype(RECORD).itemsize, dtype=torch.uint8, device="cuda")
    count = torch.zeros(sms, dtype=torch.int32, device="cuda")
    nat.stamps_arm(rec.data_ptr(), count.data_ptr(), args.per_sm)
    try:
        armed = e.time_steps(0, args.depth, 2)  # one eager forward, 3 warm replays, 2 timed: the last is kept
    finally:
        nat.stamps_arm(0, 0, 0)
    counts = count.cpu().numpy().astype(np.int64)
    if (counts > args.per_sm).any():
        print(f"warning: {int((counts - args.per_sm).clip(0).sum())} records dropped (raise --per-sm)")
    raw = rec.cpu().numpy().view(np.dtype(RECORD)).reshape(sms, args.per_sm)
    rows = np.concatenate([raw[s, :min(int(counts[s]), args.per_sm)] for s in range(sms)])
    launches = launches_of(rows)
    embeds = [i for i, L in enumerate(launches) if L["family"] == 14]
    if len(embeds) < 2:
        raise SystemExit(f"could not find two whole steps ({len(embeds)} embed launches)")
    step = launches[embeds[-2]:embeds[-1]]
    name_roles(step)
    prev_end = launches[embeds[-2] - 1]["last_end"] if embeds[-2] > 0 else step[0]["first_start"]
    for L in step:
        L["incr_us"] = (L["last_end"] - prev_end) / 1e3
        L["early_us"] = (prev_end - L["first_start"]) / 1e3
        L["late_us"] = (L["median_start"] - prev_end) / 1e3
        L["body_us"] = (L["median_end"] - prev_end) / 1e3
        L["tail_us"] = (L["last_end"] - L["median_end"]) / 1e3
        L["release_us"] = (L["median_wait"] - prev_end) / 1e3 if L["waits"] else float("nan")
        L["after_us"] = (L["median_end"] - L["median_wait"]) / 1e3 if L["waits"] else float("nan")
        prev_end = L["last_end"]
    span = (step[-1]["last_end"] - step[0]["first_start"]) / 1e3
    print(f"{args.recipe}, {args.kv} KV, depth {args.depth}: step {disarmed:.3f} ms disarmed, {armed:.3f} ms armed; "
          f"{len(step)} launches in the kept step, {span:.1f} us from its first warp to its last")
    from step_timeline import role_bytes
    nbytes = role_bytes(recipe_named(args.recipe, cfg))
    by_role = defaultdict(list)
    for L in step:
        by_role[L["role"]].append(L)
    print(f"{'role':<13} {'n':>3} {'warps':>6} {'incr':>7} {'early':>7} {'late':>7} {'body':>7} {'tail':>7} "
          f"{'release':>7} {'after':>7} {'GB/s':>6}   (us, medians over the step; GB/s: the role's weight bytes over "
          "incr)")
    for role, Ls in sorted(by_role.items(), key=lambda kv: -sum(L["incr_us"] for L in kv[1])):
        med = lambda k: statistics.median(L[k] for L in Ls)  # noqa: E731
        print(f"{role:<13} {len(Ls):>3} {int(med('warps')):>6} {med('incr_us'):>7.2f} {med('early_us'):>7.2f} "
              f"{med('late_us'):>7.2f} {med('body_us'):>7.2f} {med('tail_us'):>7.2f} {med('release_us'):>7.2f} "
              f"{med('after_us'):>7.2f} "
              f"{(nbytes[role] / med('incr_us') / 1e3 if role in nbytes else float('nan')):>6.0f}")
    # one GDN layer and one attention layer in full, from the middle of the step
    mid = len(step) // 2
    first = next((i for i in range(mid, len(step)) if step[i]["role"] in ("gdn_in", "attn_qkv")), mid)
    print("\nten launches from the middle of the step:")
    for L in step[first:first + 10]:
        print(f"  {L['role']:<13} {L['kernel']:<13} warps {L['warps']:>5}  incr {L['incr_us']:6.2f}  early "
              f"{L['early_us']:6.2f}  late {L['late_us']:6.2f}  body {L['body_us']:6.2f}  tail {L['tail_us']:6.2f}")
    sm_lag_report(step)
    balance_report(step)
    if args.raw:
        save_raw(step, args.raw)
    if args.json:
        for L in step:
            L.pop("_sm_end", None)
            L.pop("_rows", None)
        with open(args.json, "w") as f:
            json.dump({"recipe": args.recipe, "kv": args.kv, "depth": args.depth, "step_ms_disarmed": disarmed,
                       "step_ms_armed": armed, "launches": step}, f, indent=1)


if __name__ == "__main__":
    main()
