#!/usr/bin/env bash
# Session 44, call 5 (the last ~200 s of device time), any card: 6 spans a pass for the 4-bit tensor-core GEMV, in
# 3-warp blocks (set_qgemv_mma_shape(8, 6)). Call 3's Nsight Compute found the 4-token kernel on gate_up with 8 warps
# an SM (one wave of 1,088), 8 KB in flight each, 70 % of cycles waiting on L1TEX, DRAM at 54 %. 6 spans put 12 KB in
# flight a warp, and 3-warp blocks at 154 registers keep the one wave. Prediction: gate_up 53.6 -> ~45 us, a 4-token
# step 8.8 -> ~8.3 ms; T = 16 (183 registers, 9 warps an SM) about the same. First the op tests of every work shape
# (fp64 oracle), then the sweep, default and 6 spans alternating.
# (The 6-span form was removed after this ran: rerun it only at e3a72dd.)
#   [BUDGET=seconds] bash bench/calls/device_s44_call5.sh     (carry .whl)
set -uo pipefail
start=$(date +%s)
left() { echo $(( ${BUDGET:-180} - ($(date +%s) - start) )); }
source bench/device_setup.sh
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1 | sed 's/NVIDIA //; s/ .*//' | tr 'A-Z' 'a-z')
timeout 40 python3 -m pytest -q -p no:cacheprovider -rfE tests/test_native_qgemv_mma.py -k "work_shape" \
  > "$out/tests-spans6-op.log" 2>&1
echo "op tests rc=$? ($(left) s left)"; grep -E "^(FAILED|ERROR)|passed|failed" "$out/tests-spans6-op.log" | tail -6
(cd bench && timeout $(( $(left) - 5 )) python3 mma_shape_sweep.py --shapes "8,4;8,6;8,4;8,6" --widths 4,2,16 --reps 5 \
  --out "$out/mma-shape-sweep-$gpu.json") 2>&1 | tail -6
echo "total $(( $(date +%s) - start )) s"
