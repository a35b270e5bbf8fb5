"""bench/step_anatomy.py cuts the warp stamps of the diagnostic build into launches and names them by their place in
the layer; engine._native says whether it records stamps, and a default build refuses to be armed (no GPU needed)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import numpy as np
import pytest

BENCH = Path(__file__).resolve().parents[1] / "bench"


def _anatomy():
    sys.path.insert(0, str(BENCH))  # step_anatomy imports step_timeline as the script would
    try:
        spec = importlib.util.spec_from_file_location("step_anatomy", BENCH / "step_anatomy.py")
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        return mod
    finally:
        sys.path.remove(str(BENCH))


def _warp_study():
    spec = importlib.util.spec_from_file_location("warp_study", BENCH / "warp_study.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _records(mod, rows):
    rec = np.zeros(len(rows), dtype=np.dtype(mod.RECORD))
    for i, (fam, key, start, end) in enumerate(rows):
        rec[i] = (fam, i % 132, key, start, end, 0)
    return rec


def test_launches_split_by_key_and_by_time_and_ordered_by_their_end():
    a = _anatomy()
    us = 1000
    rows = []
    # two launches of the same family and key (the attention combine reads one buffer in every layer), 300 us apart
    rows += [(12, 7, t * us, t * us + 3 * us) for t in (100, 101, 101)]
    rows += [(12, 7, t * us, t * us + 3 * us) for t in (400, 400, 401)]
    # a GEMV launch whose warps start over 6 us (early residency under PDL) and end with a tail
    rows += [(4, 0xABC0, (200 + d) * us, (215 + 2 * d) * us) for d in range(7)]
    rows.append((2, 0xDEF0, 230 * us, 229 * us))  # a record whose end was never written (end < start): ignored
    launches = a.launches_of(_records(a, rows))
    assert [(L["kernel"], L["warps"]) for L in launches] == [
        ("attn_combine_kernel", 3), ("qgemv4_sx_kernel", 7), ("attn_combine_kernel", 3)]
    sx = launches[1]
    assert (sx["first_start"], sx["median_start"], sx["median_end"], sx["last_end"]) == (
        200 * us, 203 * us, 221 * us, 227 * us)


def test_roles_come_from_the_layer_order():
    a = _anatomy()
    fams = [14, 4, 8, 1, 4, 2, 4, 10, 11, 12, 1, 4, 2, 4]  # embed, a GDN layer, an attention layer, lm_head
    step = [{"kernel": a.KERNEL[f]} for f in fams]
    sys.path.insert(0, str(BENCH))
    try:
        a.name_roles(step)
    finally:
        sys.path.remove(str(BENCH))
    assert [L["role"] for L in step] == ["embed", "gdn_in", "gdn_step", "gdn_out", "gate_up", "down", "attn_qkv",
                                         "attn_prep", "attn_split", "attn_combine", "attn_o", "gate_up", "down",
                                         "lm_head"]


def test_default_build_records_no_stamps_and_refuses_to_be_armed():
    from engine.native import load_native
    nat = load_native()
    if not hasattr(nat, "stamps_built"):
        pytest.skip("engine._native built without CUDA (the stamps live in the CUDA sources)")
    if nat.stamps_built():
        pytest.skip("a diagnostic build (MONORAIL_STAMPS=ON)")
    nat.stamps_arm(0, 0, 0)  # disarming is always allowed and touches no device
    with pytest.raises(RuntimeError, match="MONORAIL_STAMPS"):
        nat.stamps_arm(1 << 20, 1 << 20, 16)


def test_packed_block_and_warp_are_decoded_and_the_raw_step_round_trips(tmp_path, capsys):
    a = _anatomy()
    us = 1000
    rec = np.zeros(4, dtype=np.dtype(a.RECORD))
    # stamps.cuh: warp in block above the family, blockIdx.x above the SM; SM 5 holds three warps, SM 9 one
    for i, (sm, block, warp, end) in enumerate([(5, 77, 3, 20), (5, 77, 4, 22), (5, 78, 0, 30), (9, 300, 1, 21)]):
        rec[i] = (4 | (warp << 8), sm | (block << 16), 0xAB00, 10 * us, end * us, 0)
    (L,) = a.launches_of(rec)
    assert L["kernel"] == "qgemv4_sx_kernel" and set(L["_sm_end"]) == {5, 9}
    assert sorted(r[2:5] for r in L["_rows"]) == [(5, 77, 3), (5, 77, 4), (5, 78, 0), (9, 300, 1)]
    L["role"] = "down"
    a.balance_report([L])
    out = capsys.readouterr().out
    # median warp end 22 us: SM 9 (one warp) ends 1 us before it, SM 5 (three warps) 8 us after, its median at 22
    assert "1 -> 1 x -1.00 / -1.00, 3 -> 1 x +8.00 / +0.00" in out
    a.save_raw([L], str(tmp_path / "raw.npz"))
    z = np.load(tmp_path / "raw.npz")
    assert sorted(zip(z["sm"].tolist(), z["block"].tolist(), z["end"].tolist())) == [
        (5, 77, 10 * us), (5, 77, 12 * us), (5, 78, 20 * us), (9, 300, 11 * us)]
    assert list(z["role"]) == ["down"]


def test_warp_study_finds_a_sub_partition_effect_that_repeats(tmp_path):
    """bench/warp_study.py on a synthetic step: one role, 6 launches of 3 blocks x 8 warps; warps on sub-partitions
    0 / 1 (warp % 4) end 1 us after the others in every launch, plus per-launch noise that does not repeat."""
    ws = _warp_study()
    rng = np.random.default_rng(0)
    cols = {k: [] for k in ("launch", "sm", "block", "warp", "start", "end")}
    for i in range(6):
        for b in range(3):
            for w in range(8):
                start = 1000 * i * 100 + int(rng.integers(0, 50))
                end = start + 20_000 + (1000 if w % 4 < 2 else 0) + int(rng.integers(0, 200))
                for k, v in zip(cols, (i, b, b, w, start, end)):
                    cols[k].append(v)
    path = tmp_path / "warps.npz"
    np.savez(path, **{k: np.array(v) for k, v in cols.items()}, role=np.array(["gate_up"] * 6),
             kernel=np.array(["qgemv4_sx_kernel"] * 6))
    z = dict(np.load(path))
    sp = ws.by_subpartition(z, "gate_up")["subpart"]
    assert {q: n for q, (n, _) in sp.items()} == {0: 2, 1: 2, 2: 2, 3: 2}
    assert sp[0][1] - sp[2][1] == pytest.approx(1.0, abs=0.1)  # us
    assert ws.item_repeat(z, "gate_up")["corr"] > 0.9
    d = ws.durations(z, "gate_up")
    assert 20.0 <= d["p10"] <= d["median"] <= d["max"] <= 21.3
    assert ws.waits(z, "gate_up") == {}  # a file without waits (session 20's)
    z["wait"] = np.where(z["warp"] % 2 == 0, z["start"] + 5000, -1)  # half the warps released 5 us after their start
    wt = ws.waits(z, "gate_up")
    assert wt["release_spread"] < 0.1 and 15.0 < wt["after_median"] <= wt["after_max"] < 16.3
    # launch i starts 100 us after launch i - 1, whose last warp ends ~21.2 us after its start: released ~84 us later
    assert 83.6 < wt["release"] < 84.2


def test_release_by_start_separates_the_release_from_a_warps_own_pre_wait_work():
    """Two launches: the second's warps started 5 us before the first's last end return 0.6 us after it (the
    release); those that started 0.5 us after it return 2 us after their start (their own pre-wait work)."""
    ws = _warp_study()
    us = 1000
    rows = [(0, w, 0, 20 * us, -1) for w in range(4)]  # launch 0 ends at 20 us
    rows += [(1, w, 15 * us, 40 * us, int(20.6 * us)) for w in range(6)]  # resident early
    rows += [(1, 6 + w, int(20.5 * us), 41 * us, int(22.5 * us)) for w in range(3)]  # resident late
    cols = np.array(rows)
    z = {"launch": cols[:, 0], "sm": np.zeros(len(rows), int), "block": np.zeros(len(rows), int), "warp": cols[:, 1],
         "start": cols[:, 2], "end": cols[:, 3], "wait": cols[:, 4], "role": np.array(["gate_up", "down"])}
    rb = ws.release_by_start(z, "down")
    assert rb == {"[-inf,-3)": (pytest.approx(0.6), pytest.approx(5.6), 6),
                  "[0,1)": (pytest.approx(2.5), pytest.approx(2.0), 3)}
    assert ws.release_by_start({k: v for k, v in z.items() if k != "wait"}, "down") == {}


def test_sm_bound_is_the_last_end_over_the_most_loaded_sm_mean():
    """One launch on two SMs: SM 0's warps end at 10 and 14 us (mean 12), SM 1's at 11 and 11: the last end (14)
    minus the largest SM mean (12) is 2 us, what balancing inside SM 0 could save."""
    ws = _warp_study()
    z = {"launch": np.zeros(4, int), "sm": np.array([0, 0, 1, 1]), "block": np.zeros(4, int),
         "warp": np.arange(4), "start": np.zeros(4, int), "end": np.array([10, 14, 11, 11]) * 1000,
         "role": np.array(["down"])}
    assert ws.sm_bound(z, "down") == {"median": pytest.approx(2.0), "sum": pytest.approx(2.0)}
    assert ws.sm_bound(z, "gate_up") == {}


def test_a_warps_wait_counts_only_inside_its_life():
    """pdl_wait()'s time reaches the warp's record from its warp slot's word at the warp's end: a time outside the
    warp's life was an earlier warp's (a slot word not rewritten) and counts as no wait; the launch keeps the median."""
    a = _anatomy()
    us = 1000
    rec = np.zeros(4, dtype=np.dtype(a.RECORD))
    for i, (warp, start, end, waited) in enumerate([(0, 10, 30, 20), (1, 10, 31, 21), (2, 11, 32, 22), (3, 12, 33, 5)]):
        rec[i] = (4 | (warp << 8), 5 | (7 << 16), 0xAB00, start * us, end * us, waited * us)
    (L,) = a.launches_of(rec)
    assert L["warps"] == 4 and L["waits"] == 3 and L["median_wait"] == 21 * us
    assert sorted(r[5] for r in L["_rows"]) == [0, 20 * us, 21 * us, 22 * us]
