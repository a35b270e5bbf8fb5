"""Launch the 4-bit decode GEMV on the 27B layer shapes a few times, for `ncu` to profile.

    ncu --clock-control none -k regex:qgemv --launch-skip 3 --launch-count 4 --section ... \
        python3 bench/gemv_probe.py
Prints each shape's time per call (events) and the effective bandwidth as well.
"""

from __future__ import annotations

import torch

from engine.native import load_native

SHAPES = {  # name: (N, K), 4-bit group 64
    "gate_up": (34816, 5120),
    "down": (5120, 17408),
    "gdn_in": (16480, 5120),
    "gdn_out": (5120, 6144),
}


def main() -> None:
    nat = load_native()
    for name, (n, k) in SHAPES.items():
        codes = torch.randint(0, 256, (n, k // 2), dtype=torch.uint8, device="cuda")
        scales = (torch.rand(n, k // 64, device="cuda") * 1e-3).half()
        x = torch.randn(1, k, device="cuda").half()
        out = torch.empty(1, n, device="cuda")
        ms = nat.op_qgemv_time(codes.data_ptr(), 0, scales.data_ptr(), n, k, 4, 64, x.data_ptr(), 1,
                               out.data_ptr(), 5)
        nbytes = codes.numel() + scales.numel() * 2
        print(f"{name:8s} N={n:6d} K={k:6d}: {ms * 1000:7.1f} us  {nbytes / ms / 1e6:7.0f} GB/s")


if __name__ == "__main__":
    main()
