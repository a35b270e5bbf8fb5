"""SM / memory clocks and power while the decode step runs, against idle and a plain copy (run on the GPU machine).

    nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu,<reasons> \
        --format=csv,noheader,nounits -lms 100 > smi.csv &
    python3 bench/clock_probe.py --marks marks.txt          # phases, each line "<nvidia-smi timestamp> <phase>"
    python3 bench/clock_probe.py --summarize smi.csv --marks marks.txt

Question it answers: do the step's latency-bound parts (every kernel's fixed cost, the attention's instruction chain)
run at a lower SM clock in the step than alone, for instance under the board's power limit while HBM streams at
4+ TB/s? The phases: idle, decode steps at depth 0 and at 128K (q4g64, int8 KV, 24 GiB plan), a device-to-device
copy (the roofline's stream), idle again. bench/calls/device_s19_call4.sh runs both halves.
"""

from __future__ import annotations

import argparse
import datetime as dt
import statistics
import time


def stamp() -> str:
    return dt.datetime.now().strftime("%Y/%m/%d %H:%M:%S.%f")[:-3]  # nvidia-smi's timestamp format


def run_phases(marks_path: str, seconds: float) -> None:
    import torch
    from engine.native_backend import NativeModel
    model = NativeModel.random_27b(kv_dtype="int8", max_context=131072 + 64, seed=1, vram_budget_bytes=24 << 30)
    e = model.engine
    e.time_steps(0, 0, 20)
    e.time_steps(0, 131072, 20)
    a = torch.empty(1 << 30, dtype=torch.float32, device="cuda")
    b = torch.empty_like(a)
    with open(marks_path, "w") as marks:
        def phase(name: str, body) -> None:
            marks.write(f"{stamp()} {name}\n")
            marks.flush()
            t_end = time.time() + seconds
            n = 0
            while time.time() < t_end:
                n += body()
            torch.cuda.synchronize()
            print(f"{name}: {n} units in {seconds} s", flush=True)

        phase("idle", lambda: (time.sleep(0.05), 0)[1])
        phase("steps depth 0", lambda: (e.time_steps(0, 0, 50), 50)[1])
        phase("steps depth 128K", lambda: (e.time_steps(0, 131072, 50), 50)[1])
        phase("copy 4 GB", lambda: ([b.copy_(a) for _ in range(20)], torch.cuda.synchronize(), 20)[2])
        phase("idle again", lambda: (time.sleep(0.05), 0)[1])
        marks.write(f"{stamp()} end\n")


def summarize(smi_path: str, marks_path: str) -> None:
    marks = []
    for line in open(marks_path):
        d, t, name = line.strip().split(" ", 2)
        marks.append((dt.datetime.strptime(f"{d} {t}", "%Y/%m/%d %H:%M:%S.%f"), name))
    rows = []
    for line in open(smi_path):
        f = [x.strip() for x in line.split(",")]
        try:
            ts = dt.datetime.strptime(f[0], "%Y/%m/%d %H:%M:%S.%f")
            rows.append((ts, float(f[1]), float(f[2]), float(f[3]), float(f[4]), f[5] if len(f) > 5 else ""))
        except ValueError:
            continue
    print(f"{'phase':<18} {'n':>4} {'SM MHz':>14} {'mem MHz':>8} {'power W':>14} {'temp C':>6}  clock event reasons")
    for (t0, name), (t1, _) in zip(marks, marks[1:]):
        inside = [r for r in rows if t0 <= r[0] < t1]
        if not inside:
            print(f"{name:<18} no samples")
            continue
        sm = [r[1] for r in inside]
        pw = [r[3] for r in inside]
        reasons = sorted({r[5] for r in inside})
        print(f"{name:<18} {len(inside):>4} {statistics.median(sm):>6.0f} ({min(sm):.0f}-{max(sm):.0f}) "
              f"{statistics.median(r[2] for r in inside):>8.0f} {statistics.median(pw):>6.0f} ({max(pw):.0f} max) "
              f"{statistics.median(r[4] for r in inside):>6.0f}  {' '.join(reasons)}")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--marks", required=True)
    ap.add_argument("--summarize", help="nvidia-smi CSV to summarise by the phases in --marks")
    ap.add_argument("--seconds", type=float, default=4.0)
    args = ap.parse_args()
    if args.summarize:
        summarize(args.summarize, args.marks)
    else:
        run_phases(args.marks, args.seconds)


if __name__ == "__main__":
    main()
