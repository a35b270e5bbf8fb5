#!/usr/bin/env bash
# Session 11, call 3 (the last device time): variant 36, the cp.async ring kernel holding only weights (up to 8
# stages of 1.25 KB a warp: ~175 KB in flight an SM for down, against ~40-80 KB in variant 4's registers) with x read
# lazily through L1 as variant 4 reads it. Its op tests (bit-equal to variant 4), then whole steps with down and / or
# gdn_out / o on it.
#   bash bench/calls/device_s11_call3.sh     (carry .whl)
set -uo pipefail
source bench/device_setup.sh
timeout 60 python3 -m pytest -q -p no:cacheprovider -rfE --timeout 30 tests/test_native_ops.py \
  -k "lanes_input_equals_perm8 or x_layout_follows or (launch_variants and 36)" > $out/tests.log 2>&1
echo "tests rc=$?"; grep -E "^(FAILED|ERROR)|passed|failed" $out/tests.log | head -8
timeout 100 python3 bench/step_probe.py --kv int8 --depths 0,131072 \
  --routes "5120x17408=36;5120x6144=36;5120x17408=36,5120x6144=36" 2>&1 | grep -E "step" | tee $out/steps.txt
echo "total $(( $(date +%s) - t0 )) s"
