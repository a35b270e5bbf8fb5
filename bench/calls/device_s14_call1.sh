#!/usr/bin/env bash
# Written in session 13 for the next session's first call (not yet run): the variants session 13 wrote from the SASS
# after its last device call. 36 (qgemv_pp_kernel): variant 4 with a working software pipeline, for down / gdn_out /
# the attention output; 37 / 38: the sx kernels 34 / 30 with their scales and norm weights converted where used, for
# gate_up and lm_head / gdn_in and the attention qkv. Their bit-equality tests, then whole steps on the route against
# each override and the combination (the route is always timed first), then the per-role timeline of the combination.
#   bash bench/calls/device_s14_call1.sh     (carry .whl)
set -uo pipefail
source bench/device_setup.sh
timeout 150 python3 -m pytest -q -p no:cacheprovider -rfE --timeout 120 tests/test_native_ops.py \
  -k "qgemv and not timing_probe" > $out/tests.log 2>&1
echo "gemv tests rc=$?"; grep -E "^(FAILED|ERROR)|passed|failed" $out/tests.log | head -12
all="5120x17408=36,5120x6144=36,34816x5120=37,248320x5120=37,16480x5120=38,14336x5120=38"
timeout 240 python3 bench/step_probe.py --kv int8 --depths 0,131072 \
  --routes "5120x17408=36;5120x6144=36;34816x5120=37,248320x5120=37;16480x5120=38,14336x5120=38;$all" 2>&1 \
  | grep -E "step|Error|error" | tee $out/steps.txt
timeout 90 python3 bench/step_timeline.py --kv int8 --steps 6 --pdl 1 --depth 0 --route "$all" \
  --json $out/timeline.json > $out/timeline.txt 2>&1
echo "timeline rc=$?"; grep -A14 "increments" $out/timeline.txt | head -14
echo "total $(( $(date +%s) - t0 )) s"
