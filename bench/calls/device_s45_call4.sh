#!/usr/bin/env bash
# Written in session 45, not run there (its device time went to refused starts); for session 46. On an H200: the
# decode record (bench/device_card.sh). Otherwise:
# 1. the op tests of two forms of the tensor-core GEMV, both off by default: 16 rows a warp (set_qgemv_mma_shape(8, 0,
#    16): one m16 tile a warp, x read a span at a time, at most 96 registers, 5 blocks an SM) and the 4-bit
#    group-scaled form (set_qgemv_mma_group_scale: group 64, scales applied once a group in fp32, ~11 % fewer
#    instructions a pass in the SASS); the work-shape checks;
# 2. whole steps of T = 2, 4, 16 under each (h, g, both: hg; and 16 rows at 16 warps an SM, which splits the
#    5120-row outputs' K further) against the default (8, 0, 32), each twice but 16,0,h. Predictions: Nsight Compute
#    found the 4-token gate_up kernel at 8.2 warps an SM waiting on loads 58 % of its cycles; 16.5 warps an SM should
#    cover those round trips: gate_up 52 -> ~40 us a layer, a 4-token step 8.63 -> ~7.9 ms (T = 16 less: two n8
#    tiles spill at 96 registers); g alone 8.63 -> ~8.4 ms; hg the best if 16 rows wins at all;
# 3. the verify / MTP / speculative-loop GPU tests under the default (the whole suite but the tensor-core GEMV's op
#    tests, which call 2 ran, when more than 420 s are left).
#   MONORAIL_COMMIT=<sha> [BUDGET=seconds] bash bench/calls/device_s45_call4.sh     (carry .whl and .peer)
set -uo pipefail
BUDGET=${BUDGET:-550}
source bench/device_card.sh
gpu_tests tests-forms-op 120 --timeout 60 tests/test_native_qgemv_mma.py -k "sixteen or work_shape or group_scale"
(cd bench && timeout $(( $(left) - 10 > 170 ? 170 : $(left) - 10 )) python3 mma_shape_sweep.py \
  --shapes "8,0;8,0,h;8,0,g;8,0,hg;16,0,h;8,0;8,0,h;8,0,g;8,0,hg" --widths 2,4,16 --reps 5 \
  --out "$out/mma-shape-sweep-$gpu.json") 2>&1 | tail -10
echo "($(left) s left)"
if [[ $(left) -gt 60 ]]; then   # the engine's steps of T > 1 under the new default; the whole suite if time allows
  files="tests/test_native_verify.py tests/test_native_mtp.py tests/test_native_speculative_loop.py"
  [[ $(left) -gt 420 ]] && files="tests/test_native*.py tests/test_plan.py --ignore tests/test_native_qgemv_mma.py"
  gpu_tests tests 600 --timeout 120 $files -k "not timing_probe"
fi
echo "total $(( $(date +%s) - start )) s"
