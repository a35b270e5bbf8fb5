#!/usr/bin/env bash
# Session 14, call 2: the route now runs 36 on down and 37 on gate_up / lm_head (call 1's winners). The GEMV tests
# (36 / 39 / 40 bit-equal to 4), then whole steps: the new route first, the old route (4 / 34) as an override, then
# gdn_out / o and down on 36 / 39 / 40 (2 / 1 / 0 batches before the PDL wait), the route again last (drift); then the
# per-role timeline of the route.
#   bash bench/calls/device_s14_call2.sh     (carry .whl)
set -uo pipefail
source bench/device_setup.sh
timeout 150 python3 -m pytest -q -p no:cacheprovider -rfE --timeout 120 tests/test_native_ops.py \
  -k "qgemv and not timing_probe" > $out/tests.log 2>&1
echo "gemv tests rc=$?"; grep -E "^(FAILED|ERROR)|passed|failed" $out/tests.log | head -12
old="5120x17408=4,34816x5120=34,248320x5120=34"
timeout 300 python3 bench/step_probe.py --kv int8 --depths 0,131072 \
  --routes "$old;5120x6144=39;5120x6144=40;5120x6144=36;5120x17408=39;5120x17408=40;5120x17408=36" 2>&1 \
  | grep -E "step|Error|error" | tee $out/steps.txt
timeout 90 python3 bench/step_timeline.py --kv int8 --steps 6 --pdl 1 --depth 0 \
  --json $out/timeline.json > $out/timeline.txt 2>&1
echo "timeline rc=$?"; grep -A14 "increments" $out/timeline.txt | head -14
echo "total $(( $(date +%s) - t0 )) s"
