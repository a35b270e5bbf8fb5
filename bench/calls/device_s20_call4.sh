#!/usr/bin/env bash
# Session 20, call 4: more of a GEMV's first weights in flight before its PDL wait without holding registers: L2
# prefetches (prefetch.global.L2) of the next batches. 49 / 50 / 51: down's variant 36 with 1 / 2 / 4 more batches
# (2 / 4 / 8 KB a warp); 52 / 53: gate_up's 37 with the rest of its first row group (1 / 2 batches, 4 / 8 KB a warp);
# 54 / 55: gdn_in / qkv's 30 with 1 / 2 more batches (4 / 8 KB a warp). Tests (bit-equal to the variants they extend),
# then whole steps, alternating with the route.
#   at commit 4026009 (the variants were removed after the call): bash bench/calls/device_s20_call4.sh     (carry .whl; ~5 minutes)
set -uo pipefail
source bench/device_setup.sh
timeout 200 python3 -m pytest -q -p no:cacheprovider -rfE --timeout 120 tests/test_native_ops.py \
  -k "pp_variants or lazy_scale or launch_variants or x_layout or qgemv_normed" > $out/tests.log 2>&1
echo "tests rc=$?"; grep -E "^(FAILED|ERROR)|passed|failed" $out/tests.log | head -12
base="5120x17408=36,34816x5120=37,16480x5120=30,14336x5120=30"
probe() { timeout 240 python3 bench/step_probe.py --kv int8 --depths 0,131072 "$@" 2>&1 | grep -E "recipe|step|Error|error" \
  | tee -a $out/steps.txt; }
probe --routes "$base;5120x17408=49;5120x17408=50;5120x17408=51;34816x5120=52;34816x5120=53;$base;16480x5120=54,14336x5120=54;16480x5120=55,14336x5120=55;5120x17408=50,34816x5120=52;$base"
echo "total $(( $(date +%s) - t0 )) s"
