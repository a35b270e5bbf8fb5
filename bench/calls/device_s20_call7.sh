#!/usr/bin/env bash
# Session 20, call 7: gate_up's and lm_head's variant 37 with even SM sub-partitions. Call 2's stamps: the 22-warp
# block puts 6 warps on sub-partitions 0 / 1 and 5 on 2 / 3 (warp w on w % 4), 18 against 15 row groups, and the
# 6-warp ones end 1.1 us later (lm_head 3.4). 49: 37 in 24 warps, each block walking its own contiguous run of row
# groups (65-66 for gate_up: 16-17 a sub-partition, at most 3 a warp); 50: the same run in 22 warps (the assignment
# alone). Tests (bit-equal to 37), then whole steps alternating with the route.
#   at commit "qgemv variants 49 / 50" (removed after the call): bash bench/calls/device_s20_call7.sh     (carry .whl; ~4 minutes)
set -uo pipefail
source bench/device_setup.sh
timeout 150 python3 -m pytest -q -p no:cacheprovider -rfE --timeout 120 tests/test_native_ops.py \
  -k "lazy_scale or launch_variants or x_layout or qgemv_normed" > $out/tests.log 2>&1
echo "tests rc=$?"; grep -E "^(FAILED|ERROR)|passed|failed" $out/tests.log | head -12
base="34816x5120=37,248320x5120=37"
timeout 200 python3 bench/step_probe.py --kv int8 --depths 0,131072 \
  --routes "$base;34816x5120=49;34816x5120=50;248320x5120=49;34816x5120=49,248320x5120=49;$base;34816x5120=49;$base" 2>&1 \
  | grep -E "recipe|step|Error|error" | tee -a $out/steps.txt
echo "total $(( $(date +%s) - t0 )) s"
