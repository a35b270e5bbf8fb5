#!/usr/bin/env bash
# Session 15, call 2: 5-bit down / gdn_out / o now route to variant 36 (call 1: 6.400 -> 5.658 ms a q4-27b step).
# The GEMV tests of the wide kernel and the layouts, the q4-27b artifact end to end against the reference (tiny
# shapes: every 5-bit matrix there has <= 5120 rows, so the route sends all of them to 36), the native model tests;
# then q4-27b steps at depth 0 and 128K on the new route, with 36 tried on the 6-bit lm_head and k|v; then the
# per-role timeline of a q4-27b step.
#   bash bench/device_s15_call2.sh     (carry .whl)
set -uo pipefail
source bench/device_setup.sh
timeout 200 python3 -m pytest -q -p no:cacheprovider -rfE --timeout 90 tests/test_native_artifact.py \
  tests/test_native_model.py tests/test_native_ops.py -k "not timing_probe and (not qgemv or pp_wide or x_layout
  or widths_t1)" > $out/tests.log 2>&1
echo "tests rc=$?"; grep -E "^(FAILED|ERROR)|passed|failed" $out/tests.log | head -8
timeout 200 python3 bench/step_probe.py --recipe q4-27b --kv int8 --depths 0,131072 \
  --routes "248320x5120=36;2048x5120=36" 2>&1 | grep -E "recipe|step|Error|error" | tee $out/steps.txt
timeout 100 python3 bench/step_timeline.py --recipe q4-27b --pdl 1 --json $out/timeline.json > $out/timeline.txt 2>&1
echo "timeline rc=$?"; grep -A30 "increments" $out/timeline.txt
echo "total $(( $(date +%s) - t0 )) s"
