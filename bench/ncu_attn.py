"""One decode attention call (prep + split + combine, T = 1) over a 128K-position cache, for Nsight Compute to
profile the split kernel (whether it waits on memory, on issue slots or on dependencies, which timings cannot tell).

    ncu --clock-control none -k regex:attn_split_v4 --launch-skip 2 --launch-count 1 --section SpeedOfLight \\
        --section Occupancy --section WarpStateStats python3 bench/ncu_attn.py 1 4

Arguments: kv format (0 bf16, 1 int8, 2 int4) and attention variant. Three calls: two to warm up, the third to
profile. The cache and inputs are the test suite's (tests/test_native_attn_decode.py, Cache).
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))


def main() -> None:
    if len(sys.argv) != 3:
        raise SystemExit("usage: ncu_attn.py KV VARIANT")
    kv, variant = int(sys.argv[1]), int(sys.argv[2])
    import torch
    from test_native_attn_decode import Cache

    from engine.native import load_native
    nat = load_native()
    c = Cache(kv, 1, 131071, seed=5)
    prev = nat.get_attn_variant()
    nat.set_attn_variant(variant)
    try:
        for _ in range(3):
            c.run(nat)
        torch.cuda.synchronize()
    finally:
        nat.set_attn_variant(prev)


if __name__ == "__main__":
    main()
