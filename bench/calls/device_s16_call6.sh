#!/usr/bin/env bash
# Session 16: a probe for q4-27b's 6-bit lm_head (296 us a step on ring 18, 3.36 TB/s; every kernel tried lands at
# 3.36-3.45). Variant 47 runs it on the split kernel with no head rows: the fused norm (no norm kernel), then row groups
# of 4 on fp16 x in shared memory, one 16-warp block per SM. Tests, then q4-27b steps with the built-in route and with
# 248320x5120=47, and the timeline with 47 (the lm_head's own increment).
#   bash bench/calls/device_s16_call6.sh     (carry .whl)
set -uo pipefail
source bench/device_setup.sh
timeout 150 python3 -m pytest -q -p no:cacheprovider -rfE --timeout 90 tests/test_native_ops.py \
  -k "headless or normed_split or launch_variants_epilogues" > $out/tests.log 2>&1
echo "tests rc=$?"; grep -E "^(FAILED|ERROR)|passed|failed" $out/tests.log | head -12
timeout 150 python3 bench/step_probe.py --recipe q4-27b --kv int8 --depths 0 --routes "248320x5120=47;248320x5120=18" \
  2>&1 | grep -E "recipe|step|route|Error|error" | tee $out/steps.txt
timeout 90 python3 bench/step_timeline.py --recipe q4-27b --pdl 1 --route "248320x5120=47" > $out/timeline.txt 2>&1
echo "timeline rc=$?"; grep -E "graph step|lm_head|rmsnorm" $out/timeline.txt
echo "total $(( $(date +%s) - t0 )) s"
