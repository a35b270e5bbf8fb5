"""One 4-bit GEMV launch of a given shape and variant, for Nsight Compute to profile (its counters tell
whether a kernel is short of bytes in flight, of warps, or of issue slots, which timings alone cannot).

    ncu --clock-control none -k regex:qgemv --launch-skip 2 --launch-count 1 --section SpeedOfLight \\
        --section Occupancy --section WarpStateStats python3 bench/ncu_gemv.py 34816 5120 23 [T]

T (default 1) > 1 runs the tensor-core GEMV of T tokens (the variant is then ignored; unsplit, no scratch).

Three launches of op_qgemv on random codes and scales (group 64): two to warm up, the third to profile (ncu
flushes the caches before each replayed pass by default, so the weights come from DRAM).
"""

from __future__ import annotations

import sys

import torch

from engine.native import load_native


def main() -> None:
    if len(sys.argv) not in (4, 5):
        raise SystemExit("usage: ncu_gemv.py N K VARIANT [T]")
    n, k, variant = (int(a) for a in sys.argv[1:4])
    t = int(sys.argv[4]) if len(sys.argv) == 5 else 1
    nat = load_native()
    codes = torch.randint(0, 256, (n, k // 2), device="cuda", dtype=torch.uint8)
    scales = (torch.rand(n, k // 64, device="cuda") * 0.01).half()
    x = torch.randn(t, k, device="cuda").half()
    out = torch.empty(t, n, device="cuda")
    nat.set_qgemv_variant(variant)
    try:
        for _ in range(3):
            nat.op_qgemv(codes.data_ptr(), 0, scales.data_ptr(), n, k, 4, 64, x.data_ptr(), t, 0, out.data_ptr(), 0, n)
        torch.cuda.synchronize()
    finally:
        nat.set_qgemv_variant(0)


if __name__ == "__main__":
    main()
