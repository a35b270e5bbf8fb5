#!/usr/bin/env bash
# Session 49: device_s49_call1.sh cut to what ~300 s hold (device starts have taken most of sessions 44-49's budgets;
# it replaces session 47's device_s47_call3.sh, removed).
# On an H200 the decode record (bench/device_card.sh). On an H100, with the unchecked passes on for the process: the op
# tests of the two changes not yet run on a GPU (unchecked passes, session 47; warps a block, session 46) and the
# engine's multi-token steps against one-token steps; the A/B sweep (unchecked / checked (c) / 1 warp a block;
# predictions in device_s49_call1.sh); then the fp64 op tests at every width with the time left.
#   MONORAIL_COMMIT=<sha> [BUDGET=seconds] bash bench/calls/device_s49_short.sh     (carry .whl and .peer)
set -uo pipefail
BUDGET=${BUDGET:-300}
source bench/device_card.sh
export MONORAIL_QGEMV_MMA_UNCHECKED=1
gpu_tests tests-mma-new-unchecked 110 --timeout 60 tests/test_native_qgemv_mma.py \
  -k "unchecked or group_32 or warps_a_block or split_is_the_same or causal"
if [[ $(left) -gt 50 ]]; then   # a smaller budget keeps only the op tests
  (cd bench && timeout $(( $(left) - 5 < 80 ? $(left) - 5 : 80 )) python3 mma_shape_sweep.py \
    --shapes "0,0;0,0,c;0,0,1;0,0;0,0,c;0,0,1" --widths 2,4,9,16 --reps 5 --out "$out/mma-unchecked-sweep-$gpu.json") \
    2>&1 | tail -8
fi
if [[ $(left) -gt 40 ]]; then
  gpu_tests tests-mma-fp64-unchecked $(( $(left) - 10 )) --timeout 60 tests/test_native_qgemv_mma.py -k "against_fp64"
fi
echo "total $(( $(date +%s) - start )) s"
