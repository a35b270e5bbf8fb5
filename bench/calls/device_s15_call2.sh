#!/usr/bin/env bash
# Session 15, call 2. (a) 5-bit down / gdn_out / o now route to variant 36 (call 1: 6.400 -> 5.658 ms a q4-27b step):
# the q4-27b artifact end to end against the reference (tiny shapes: every 5-bit matrix there has <= 5120 rows, so
# all of them run 36) and the native model tests. (b) variants 45 / 46 (qgemv_col_kernel: a warp owns a 1024-wide
# column of K for a run of rows, partial sums reduced per block in shared memory): the GEMV tests, then whole steps
# with them on down and on gdn_out / o, q4g64 and q4-27b; 36 on the 6-bit lm_head and k|v; the q4-27b timeline.
#   bash bench/calls/device_s15_call2.sh     (carry .whl)
set -uo pipefail
source bench/device_setup.sh
timeout 150 python3 -m pytest -q -p no:cacheprovider -rfE --timeout 90 tests/test_native_ops.py -k qgemv \
  > $out/tests-gemv.log 2>&1
echo "gemv tests rc=$?"; grep -E "^(FAILED|ERROR)|passed|failed" $out/tests-gemv.log | head -12
timeout 120 python3 bench/step_probe.py --kv int8 --depths 0 \
  --routes "5120x17408=45;5120x17408=46;5120x6144=45;5120x6144=46" 2>&1 | grep -E "recipe|step|Error|error" \
  | tee $out/steps-q4g64.txt
timeout 150 python3 bench/step_probe.py --recipe q4-27b --kv int8 --depths 0 \
  --routes "5120x17408=45;5120x6144=45;5120x6144=46;248320x5120=36;248320x5120=45;2048x5120=36" 2>&1 \
  | grep -E "recipe|step|Error|error" | tee $out/steps-q4-27b.txt
timeout 120 python3 -m pytest -q -p no:cacheprovider -rfE --timeout 90 tests/test_native_artifact.py \
  tests/test_native_model.py -k "not timing_probe" > $out/tests-model.log 2>&1
echo "model tests rc=$?"; grep -E "^(FAILED|ERROR)|passed|failed" $out/tests-model.log | head -8
timeout 60 python3 bench/step_timeline.py --recipe q4-27b --pdl 1 --json $out/timeline.json > $out/timeline.txt 2>&1
echo "timeline rc=$?"; grep -A16 "increments" $out/timeline.txt
echo "total $(( $(date +%s) - t0 )) s"
