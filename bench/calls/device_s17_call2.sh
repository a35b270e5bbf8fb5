#!/usr/bin/env bash
# Session 17: variant 47 (the fused norm + the split kernel's walk on fp16 x) for the store and SwiGLU epilogues at
# 5 / 6 / 8 bits (gate_up, the input projections and lm_head of the uniform recipes: today ring 18 or the generic
# path at 2.1-2.4 TB/s, each after a norm kernel), and variant 48 (the same walk on given x, every epilogue: 8-bit's
# route instead of the generic path; tried on the 5-bit down / gdn_out / o). Tests, then whole steps, the new route
# against the old one forced per shape, alternating.
#   bash bench/calls/device_s17_call2.sh     (carry .whl; ~5 minutes)
set -uo pipefail
source bench/device_setup.sh
timeout 240 python3 -m pytest -q -p no:cacheprovider -rfE --timeout 120 tests/test_native_ops.py \
  -k "headless or walk or normed_split or launch_variants or x_layout or wide_equals or col_normed" > $out/tests.log 2>&1
echo "tests rc=$?"; grep -E "^(FAILED|ERROR)|passed|failed" $out/tests.log | head -12
old5="34816x5120=18,16480x5120=18,16384x5120=18,14336x5120=18,248320x5120=18"
old6="34816x5120=18,16480x5120=18,16384x5120=18,14336x5120=18,248320x5120=18,5120x17408=17"
old8="34816x5120=1,16480x5120=1,16384x5120=1,14336x5120=1,248320x5120=1,5120x17408=1,5120x6144=1"
w48="5120x17408=48,5120x6144=48"
probe() { timeout 170 python3 bench/step_probe.py --kv int8 --depths 0 "$@" 2>&1 | grep -E "recipe|step|Error|error" \
  | tee -a $out/steps.txt; }
probe --recipe q5g64 --routes "$old5;$w48;$old5"
probe --recipe q8g64 --budget-gib 34 --routes "$old8;$old8"
probe --recipe q6g64 --routes "$old6;$w48"
probe --recipe q4-27b --routes "$w48;5120x17408=48;5120x6144=48"
echo "total $(( $(date +%s) - t0 )) s"
timeout 90 python3 bench/step_timeline.py --recipe q5g64 --pdl 1 > $out/timeline-q5g64.txt 2>&1
echo "timeline rc=$?"; grep -E "graph step|gate_up|down|gdn_in|gdn_out|attn_qkv|attn_o|lm_head|rmsnorm" $out/timeline-q5g64.txt | head -20
echo "total $(( $(date +%s) - t0 )) s"
