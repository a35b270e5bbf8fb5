#!/usr/bin/env bash
# Session 45, call 4 cut to the ~280 s of device time left after refused starts: the 16-row form's op tests, then whole
# steps of T = 2, 4, 16 under it against the default, each twice (call 4's prediction: a 4-token step 8.63 -> ~7.9 ms),
# then the verify / MTP / speculative tests under the default with what is left. On an H200 the decode record instead.
#   MONORAIL_COMMIT=<sha> [BUDGET=seconds] bash bench/calls/device_s45_call5.sh     (carry .whl and .peer)
set -uo pipefail
BUDGET=${BUDGET:-280}
source bench/device_card.sh
gpu_tests tests-16rows-op 60 --timeout 60 tests/test_native_qgemv_mma.py -k "sixteen"
(cd bench && timeout $(( $(left) - 10 > 90 ? 90 : $(left) - 10 )) python3 mma_shape_sweep.py \
  --shapes "8,0;8,0,h;8,0,h;8,0" --widths 2,4,16 --reps 5 --out "$out/mma-shape-sweep-$gpu.json") 2>&1 | tail -6
echo "($(left) s left)"
if [[ $(left) -gt 40 ]]; then
  gpu_tests tests 600 --timeout 120 tests/test_native_verify.py tests/test_native_mtp.py \
    tests/test_native_speculative_loop.py -k "not timing_probe"
fi
echo "total $(( $(date +%s) - start )) s"
