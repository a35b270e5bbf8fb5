#!/usr/bin/env bash
# Session 23, call 1: gdn_out and the attention output with their rows wholly in registers before the PDL wait, the
# rows claimed by blocks from a counter (qgemv_preload_kernel; variants 49 / 50 / 51: 20 warps x 2 rows, 8 x 2, 8 x 4;
# session 20's ids 49..52 were other kernels, since removed), and down's variant 36 held to 72 registers (52), so that
# one down block fits beside gate_up's 22-warp block. Tests (bit-equal to variant 4), then whole steps alternating
# with the route, then the per-role timeline of the route and of 49 on 5120 x 6144.
#   at commit f07f058 (the variants removed after the call): bash bench/calls/device_s23_call1.sh     (carry .whl; ~5 minutes)
set -uo pipefail
source bench/device_setup.sh
timeout 200 python3 -m pytest -q -p no:cacheprovider -rfE --timeout 120 tests/test_native_ops.py \
  -k "preload_and_capped or launch_variants or x_layout" > $out/tests.log 2>&1
echo "tests rc=$?"; grep -E "^(FAILED|ERROR)|passed|failed" $out/tests.log | head -12
base="5120x17408=36,5120x6144=4"
probe() { timeout 240 python3 bench/step_probe.py --kv int8 --depths 0,131072 "$@" 2>&1 | grep -E "recipe|step|Error|error" \
  | tee -a $out/steps.txt; }
probe --routes "$base;5120x6144=49;5120x6144=50;5120x6144=51;5120x17408=52;$base;5120x6144=49;5120x6144=50;5120x6144=51;$base"
for r in "$base" "5120x6144=49"; do
  timeout 90 python3 bench/step_timeline.py --kv int8 --steps 6 --pdl 1 --depth 0 --route "$r" 2>&1 | grep -v Warn \
    | tail -32 | tee -a $out/timeline.txt
done
echo "total $(( $(date +%s) - t0 )) s"
