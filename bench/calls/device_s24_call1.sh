#!/usr/bin/env bash
# Session 24, call 1: the 5120-row GEMVs held to 5 blocks an SM (49: down's 36 by a shared-memory request under a
# fixed carveout; 50: gdn_out / o's variant 4 so; 51: 36 by registers, 95 instead of 80), so that no SM takes 24 of
# their warps while others take 4 (session 20 call 2). Tests (bit-equal to 36 / 4), whole steps alternating with
# the route, the per-role timeline of 51 on down.
#   bash bench/calls/device_s24_call1.sh     (carry .whl; ~5 minutes)
set -uo pipefail
source bench/device_setup.sh
timeout 200 python3 -m pytest -q -p no:cacheprovider -rfE --timeout 120 tests/test_native_ops.py \
  -k "pp_variants or launch_variants or x_layout" > $out/tests.log 2>&1
echo "tests rc=$?"; grep -E "^(FAILED|ERROR)|passed|failed" $out/tests.log | head -12
base="5120x17408=36,5120x6144=4"
probe() { timeout 240 python3 bench/step_probe.py --kv int8 --depths 0,131072 "$@" 2>&1 | grep -E "recipe|step|Error|error" \
  | tee -a $out/steps.txt; }
probe --routes "$base;5120x17408=49;5120x17408=51;5120x6144=50;$base;5120x17408=51;5120x17408=49;5120x17408=51,5120x6144=50;$base"
for r in "$base" "5120x17408=51" "5120x17408=49,5120x6144=50"; do
  timeout 90 python3 bench/step_timeline.py --kv int8 --steps 6 --pdl 1 --depth 0 --route "$r" 2>&1 | grep -v Warn \
    | tail -14 | tee -a $out/timeline.txt
done
echo "total $(( $(date +%s) - t0 )) s"
