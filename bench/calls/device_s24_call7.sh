#!/usr/bin/env bash
# Session 24, call 7: variant 49's launch choice moved into qgemv_spread_launch (exposed for a test): its tests, the
# other GEMV / engine tests that route down through it, and whole steps against 36 to see the speed unchanged.
#   bash bench/calls/device_s24_call7.sh     (carry .whl; ~3 minutes)
set -uo pipefail
source bench/device_setup.sh
timeout 200 python3 -m pytest -q -p no:cacheprovider -rfE --timeout 120 tests/test_native_ops.py tests/test_native_engine.py \
  -k "spread or pp_variants or launch_variants or x_layout or swiglu_lanes or engine" > $out/tests.log 2>&1
echo "tests rc=$?"; grep -E "^(FAILED|ERROR)|passed|failed" $out/tests.log | head -12
timeout 150 python3 bench/step_probe.py --kv int8 --depths 0,131072 --routes "5120x17408=36;5120x17408=49;5120x17408=36" 2>&1 \
  | grep -E "recipe|step|Error|error" | tee $out/steps.txt
echo "total $(( $(date +%s) - t0 )) s"
