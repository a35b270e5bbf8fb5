#!/usr/bin/env bash
# Session 12, call 5: the preload kernel without the shared-memory carveout hint (36) against with it (37, call 4's
# 36): call 4 made every role slower, not only the preloaded ones (gdn_in, down, lm_head too), as if the SMs'
# L1 / shared split had to change around it. Op tests, whole steps, the timeline of 36.
#   bash bench/calls/device_s12_call5.sh     (carry .whl)
set -uo pipefail
source bench/device_setup.sh
timeout 90 python3 -m pytest -q -p no:cacheprovider -rfE --timeout 60 tests/test_native_ops.py \
  -k "lanes_input_equals_perm8 or x_layout_follows or (launch_variants and (36 or 37))" > $out/tests.log 2>&1
echo "tests rc=$?"; grep -E "^(FAILED|ERROR)|passed|failed" $out/tests.log | head -8
timeout 150 python3 bench/step_probe.py --kv int8 --depths 0,131072 --routes "5120x6144=36;5120x6144=37" 2>&1 \
  | grep -E "step" | tee $out/steps.txt
timeout 120 python3 bench/step_timeline.py --kv int8 --depth 0 --pdl 1 --route "5120x6144=36" \
  --json $out/timeline-36.json > $out/timeline-36.txt 2>&1
grep -E "^  [a-z_]+ +n|graph step" $out/timeline-36.txt
echo "total $(( $(date +%s) - t0 )) s"
