#!/usr/bin/env bash
# Session 19, call 1: attention variant 7 (variant 5's 3-warp block held to 168 registers: 12 warps an SM instead of
# 8). The split kernel's oracle tests with 7 in the family, its 128K timing probe, then whole steps at 0 / 128K with
# int8 and int4 KV (q4g64, the benchmark's recipe) on the route (6 int8 / 4 int4) against 7, alternating; then the
# converter's recipe with int4 KV out to 256K (the flagship user configuration), route against 7.
#   bash bench/calls/device_s19_call1.sh     (carry .whl; ~6 minutes)
set -uo pipefail
source bench/device_setup.sh
timeout 200 python3 -m pytest -q -p no:cacheprovider -rfE --timeout 150 tests/test_native_attn_decode.py \
  -k "not timing" > $out/tests.log 2>&1
echo "tests rc=$?"; grep -E "^(FAILED|ERROR)|passed|failed" $out/tests.log | head -12
timeout 120 python3 -m pytest -q -p no:cacheprovider -s tests/test_native_attn_decode.py -k timing > $out/timing.log 2>&1
echo "timing rc=$?"; grep -E "attention decode" $out/timing.log | head -20
echo "total $(( $(date +%s) - t0 )) s"
probe() { timeout 200 python3 bench/step_probe.py "$@" 2>&1 | grep -E "recipe|step|Error|error" | tee -a $out/steps.txt; }
probe --kv int8,int4 --depths 0,131072 --attn-variants 7,-1,7
echo "total $(( $(date +%s) - t0 )) s"
probe --recipe q4-27b --kv int4 --depths 0,131072,262080 --attn-variants 7,-1
echo "total $(( $(date +%s) - t0 )) s"
