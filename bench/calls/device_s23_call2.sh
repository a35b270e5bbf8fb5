#!/usr/bin/env bash
# Session 23, call 2: gate_up (and lm_head) on variant 37 with 2 rows a warp instead of 4 (49: R2 U4, 50: R2 U2; the
# same 22-warp block), so that each warp walks 6 row groups of ~4 us instead of 3 of ~8 us and the last warps end
# closer to the median (37's tail is 3.0 us a launch in session 19's anatomy). Tests (bit-equal to 37), whole steps
# alternating with the route, the per-role timeline of the better one.
#   at commit 2fe34cd (the variants removed after the call): bash bench/calls/device_s23_call2.sh     (carry .whl; ~5 minutes)
set -uo pipefail
source bench/device_setup.sh
timeout 200 python3 -m pytest -q -p no:cacheprovider -rfE --timeout 120 tests/test_native_ops.py \
  -k "lazy_scale or launch_variants or x_layout or qgemv_normed" > $out/tests.log 2>&1
echo "tests rc=$?"; grep -E "^(FAILED|ERROR)|passed|failed" $out/tests.log | head -12
base="34816x5120=37,248320x5120=37"
probe() { timeout 240 python3 bench/step_probe.py --kv int8 --depths 0,131072 "$@" 2>&1 | grep -E "recipe|step|Error|error" \
  | tee -a $out/steps.txt; }
probe --routes "$base;34816x5120=49;34816x5120=50;248320x5120=49;$base;34816x5120=49;34816x5120=50;34816x5120=49,248320x5120=49;$base"
for r in "$base" "34816x5120=49"; do
  timeout 90 python3 bench/step_timeline.py --kv int8 --steps 6 --pdl 1 --depth 0 --route "$r" 2>&1 | grep -v Warn \
    | tail -14 | tee -a $out/timeline.txt
done
echo "total $(( $(date +%s) - t0 )) s"
