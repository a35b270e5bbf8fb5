#!/usr/bin/env bash
# Session 17: the walk kernel with two chunks a lane in flight (47 now runs on it with the norm fused; the split kernel
# keeps its one-chunk tail walk). Tests of every walk / split path, then whole steps against the old route forced
# (compare with call 3's deltas: q5g64 -1.03, q8g64 -0.68 ms), the q5g64 timeline.
#   bash bench/calls/device_s17_call5.sh     (carry .whl; ~5 minutes)
set -uo pipefail
source bench/device_setup.sh
timeout 200 python3 -m pytest -q -p no:cacheprovider -rfE --timeout 120 tests/test_native_ops.py \
  -k "headless or walk or normed_split or launch_variants or x_layout or wide_equals" > $out/tests.log 2>&1
echo "tests rc=$?"; grep -E "^(FAILED|ERROR)|passed|failed" $out/tests.log | head -12
old5="34816x5120=18,16480x5120=18,16384x5120=18,14336x5120=18,248320x5120=18"
old8="34816x5120=1,16480x5120=1,16384x5120=1,14336x5120=1,248320x5120=1,5120x17408=1,5120x6144=1"
probe() { timeout 170 python3 bench/step_probe.py --kv int8 --depths 0 "$@" 2>&1 | grep -E "recipe|step|Error|error" \
  | tee -a $out/steps.txt; }
probe --recipe q5g64 --routes "$old5"
probe --recipe q8g64 --budget-gib 34 --routes "$old8"
probe --recipe q4-27b --routes "248320x5120=18"
timeout 90 python3 bench/step_timeline.py --recipe q5g64 --pdl 1 > $out/timeline-q5g64.txt 2>&1
echo "timeline rc=$?"; grep -E "graph step|gate_up|down|gdn_in|gdn_out|attn_qkv|attn_o|lm_head|rmsnorm" $out/timeline-q5g64.txt | head -20
echo "total $(( $(date +%s) - t0 )) s"
