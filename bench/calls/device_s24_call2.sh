#!/usr/bin/env bash
# Session 24, call 2: the register cap of call 1's variant 51 made robust (idle warps in the block instead of clock
# readings held live, whose register cost depended on ptxas) and applied to gdn_out / o (52: variant 4 so). Tests
# (bit-equal to 36 / 4), whole steps alternating with the route, per-role timelines.
#   bash bench/calls/device_s24_call2.sh     (carry .whl; ~5 minutes)
set -uo pipefail
source bench/device_setup.sh
timeout 200 python3 -m pytest -q -p no:cacheprovider -rfE --timeout 120 tests/test_native_ops.py \
  -k "pp_variants or launch_variants or x_layout" > $out/tests.log 2>&1
echo "tests rc=$?"; grep -E "^(FAILED|ERROR)|passed|failed" $out/tests.log | head -12
base="5120x17408=36,5120x6144=4"
probe() { timeout 240 python3 bench/step_probe.py --kv int8 --depths 0,131072 "$@" 2>&1 | grep -E "recipe|step|Error|error" \
  | tee -a $out/steps.txt; }
probe --routes "$base;5120x17408=51;5120x6144=52;5120x17408=51,5120x6144=52;$base;5120x17408=51,5120x6144=52;5120x6144=52;5120x17408=51;$base"
for r in "$base" "5120x17408=51,5120x6144=52"; do
  timeout 90 python3 bench/step_timeline.py --kv int8 --steps 6 --pdl 1 --depth 0 --route "$r" 2>&1 | grep -v Warn \
    | tail -14 | tee -a $out/timeline.txt
done
echo "total $(( $(date +%s) - t0 )) s"
