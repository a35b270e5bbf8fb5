#!/usr/bin/env bash
# Session 45, after call 1 measured loads first (mma-shape-sweep-h100-s45-call1.json): the new default (loads first,
# spans by width: 4 at T <= 8, 2 above; set_qgemv_mma_shape(8, 0)) against session 42's (8, 4 without loads first)
# on whole steps of T = 2, 3, 4, 8, 9, 16, each twice; the tensor-core GEMV's op tests under the new default; then
# bench/spec_decode.py at acceptance 0 and 1 with k = 1 and 3 for round_cost_steps. On an H200 the decode record
# instead (bench/device_card.sh).
# Prediction: T = 2 -3 %, T = 4 -2 %, T = 16 -2.5 % (11.8 against 12.1 ms); T = 3, 8, 9 not measured before.
#   MONORAIL_COMMIT=<sha> [BUDGET=seconds] bash bench/calls/device_s45_call2.sh     (carry .whl and .peer)
set -uo pipefail
BUDGET=${BUDGET:-420}
source bench/device_card.sh
timeout 120 python3 -m pytest -q -p no:cacheprovider -rfE --timeout 120 tests/test_native_qgemv_mma.py \
  > "$out/tests-mma-op.log" 2>&1
echo "op tests rc=$? ($(left) s left)"; grep -E "^(FAILED|ERROR)|passed|failed" "$out/tests-mma-op.log" | tail -6
(cd bench && timeout $(( $(left) - 10 > 170 ? 170 : $(left) - 10 )) python3 mma_shape_sweep.py \
  --shapes "8,0;8,4,o;8,0;8,4,o" --widths 2,3,4,8,9,16 --reps 5 --out "$out/mma-shape-sweep-$gpu.json") 2>&1 | tail -6
echo "($(left) s left)"
if [[ $(left) -gt 60 ]]; then
  (cd bench && timeout $(( $(left) - 10 )) python3 spec_decode.py --drafts 1,3 --accept 0,1 \
    --out "$out/spec-decode-$gpu.json") > "$out/spec-decode.log" 2>&1
  echo "spec_decode rc=$? ($(left) s left)"; tail -10 "$out/spec-decode.log"
fi
echo "total $(( $(date +%s) - start )) s"
