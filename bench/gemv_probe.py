"""Time the T = 1, 4-bit decode GEMV on the 27B layer shapes, for every launch variant, and/or launch it a
few times for `ncu` to profile.

    python3 bench/gemv_probe.py                      # table: shape x variant -> us, GB/s
    python3 bench/gemv_probe.py --variants 1,7,8     # a subset
    ncu --clock-control none -k regex:qgemv --launch-skip 3 --launch-count 4 --section ... \
        python3 bench/gemv_probe.py --variants 7 --reps 5

Bytes counted: codes + scales (x and the output are < 0.1 % of them). Each figure is the mean of `reps`
back-to-back launches after 3 warm-up launches (op_qgemv_time): a matrix that fits in L2 (gdn_out,
17 MB; H200 L2 50 MB) is partly served from L2 here, unlike in a decode step where other layers evict it.
"""

from __future__ import annotations

import argparse

import torch

from engine.native import load_native

SHAPES = {  # name: (N, K), 4-bit group 64
    "gate_up": (34816, 5120),
    "down": (5120, 17408),
    "gdn_in": (16480, 5120),
    "gdn_out": (5120, 6144),
}
VARIANTS = list(range(16))  # 0 = route by shape (default), 1..15 forced (csrc/cuda/qgemv.cu launch_bits)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--variants", default=",".join(map(str, VARIANTS)), help="comma-separated variant ids")
    ap.add_argument("--reps", type=int, default=50)
    args = ap.parse_args()
    variants = [int(v) for v in args.variants.split(",") if v != ""]
    nat = load_native()
    data = {}
    for name, (n, k) in SHAPES.items():
        codes = torch.randint(0, 256, (n, k // 2), dtype=torch.uint8, device="cuda")
        scales = (torch.rand(n, k // 64, device="cuda") * 1e-3).half()
        x = torch.randn(1, k, device="cuda").half()
        out = torch.empty(1, n, device="cuda")
        data[name] = (codes, scales, x, out, codes.numel() + scales.numel() * 2)

    res = {}  # (variant, shape) -> (us, GB/s)
    try:
        for v in variants:
            nat.set_qgemv_variant(v)
            for name, (n, k) in SHAPES.items():
                codes, scales, x, out, nbytes = data[name]
                ms = nat.op_qgemv_time(codes.data_ptr(), 0, scales.data_ptr(), n, k, 4, 64, x.data_ptr(), 1,
                                       out.data_ptr(), args.reps)
                res[v, name] = (ms * 1000, nbytes / ms / 1e6)
    finally:
        nat.set_qgemv_variant(0)

    names = list(SHAPES)
    head = "variant " + "".join(f"{nm + f' {SHAPES[nm][0]}x{SHAPES[nm][1]}':>24s}" for nm in names) + f"{'sum us':>10s}"
    print(head)
    print(" " * 8 + "".join(f"{'us':>12s}{'GB/s':>12s}" for _ in names))
    best = {nm: min(variants, key=lambda v: res[v, nm][0]) for nm in names}
    for v in variants:
        row = f"{v:7d} "
        for nm in names:
            us, gbs = res[v, nm]
            row += f"{us:11.1f}{'*' if best[nm] == v else ' '}{gbs:12.0f}"
        row += f"{sum(res[v, nm][0] for nm in names):10.1f}"
        print(row)
    print("* fastest for the shape; sum us = one of each shape (a layer has gate_up + down, and gdn_in + gdn_out "
          "or the attention projections)")


if __name__ == "__main__":
    main()
