#!/usr/bin/env bash
# Written in session 45, not run there (its device time went to refused starts); for session 46. On an H200: the
# decode record (bench/device_card.sh). Otherwise:
# 1. the op tests of the 16-row form of the tensor-core GEMV (set_qgemv_mma_shape(8, 0, 16): one m16 tile a warp, x
#    read a span at a time, 96 registers, 5 blocks an SM) and the work-shape checks;
# 2. whole steps of T = 2, 4, 16 under it (and at 16 warps an SM, which splits the 5120-row outputs' K further)
#    against the default (8, 0, 32), 8,0 and 8,0,h twice. Prediction: Nsight Compute found
#    the 4-token gate_up kernel at 8.2 warps an SM waiting on loads 58 % of its cycles; 16.5 warps an SM should cover
#    those round trips: gate_up 52 -> ~40 us a layer, a 4-token step 8.63 -> ~7.9 ms; T = 16 less (two n8 tiles at
#    96 registers spill);
# 3. the verify / MTP / speculative-loop GPU tests under the default (the whole suite but the tensor-core GEMV's op
#    tests, which call 2 ran, when more than 420 s are left).
#   MONORAIL_COMMIT=<sha> [BUDGET=seconds] bash bench/calls/device_s45_call4.sh     (carry .whl and .peer)
set -uo pipefail
BUDGET=${BUDGET:-550}
source bench/device_card.sh
gpu_tests tests-16rows-op 90 --timeout 60 tests/test_native_qgemv_mma.py -k "sixteen or work_shape"
(cd bench && timeout $(( $(left) - 10 > 130 ? 130 : $(left) - 10 )) python3 mma_shape_sweep.py \
  --shapes "8,0;8,0,h;16,0,h;8,0;8,0,h" --widths 2,4,16 --reps 5 --out "$out/mma-shape-sweep-$gpu.json") 2>&1 | tail -6
echo "($(left) s left)"
if [[ $(left) -gt 60 ]]; then   # the engine's steps of T > 1 under the new default; the whole suite if time allows
  files="tests/test_native_verify.py tests/test_native_mtp.py tests/test_native_speculative_loop.py"
  [[ $(left) -gt 420 ]] && files="tests/test_native*.py tests/test_plan.py --ignore tests/test_native_qgemv_mma.py"
  gpu_tests tests 600 --timeout 120 $files -k "not timing_probe"
fi
echo "total $(( $(date +%s) - start )) s"
