"""A few device draws of one row and mode of bench/sampler_time.py, for Nsight Compute to give each sampler kernel's
own duration (sampler_time's figures include a launch and a sync, and cannot say which kernel takes the time).

    ncu --clock-control none -k regex:sample_ --metrics gpu__time_duration.sum python3 bench/ncu_sampler.py \\
        flat "no top-k, top-p 0.9" 3

Arguments: the row (long tail, broad, flat), the mode (a key of sampler_time.MODES) and how many draws.
"""

from __future__ import annotations

import sys

from sampler_time import MODES, VALID, V, make_rows  # bench/ is the script's directory, first on sys.path


def main() -> None:
    if len(sys.argv) != 4:
        raise SystemExit(__doc__)
    row, mode, draws = sys.argv[1], sys.argv[2], int(sys.argv[3])
    import torch

    from engine.native import load_native
    nat = load_native()
    logits = make_rows()[row]
    inp = torch.zeros(nat.STEP_INPUTS_INT32, dtype=torch.int32, device="cuda")
    counts = torch.zeros(V, dtype=torch.int32, device="cuda")
    scratch = torch.empty(1, V, device="cuda")
    out = torch.empty(1, dtype=torch.int32, device="cuda")
    params = dict(MODES[mode], vocab_limit=VALID, seed=1)
    for _ in range(draws):
        nat.op_sample(logits.data_ptr(), 1, V, params, counts.data_ptr(), inp.data_ptr(), scratch.data_ptr(),
                      out.data_ptr())
    torch.cuda.synchronize()
    print("drew", int(out.item()))


if __name__ == "__main__":
    main()
