#!/usr/bin/env bash
# Session 20, call 3: down, gdn_out and the attention output in wide blocks (variants 49 / 50: 36 in blocks of 20 /
# 10 warps; 51 / 52: 4 in blocks of 20 / 10), so that no SM holds more than 20 of their warps. Call 2 found 6 of the
# 4-warp blocks (24 warps) on ~100 SMs and none on 15-20 (the 4-warp kernels fit 6 an SM at 78-80 registers, and
# PDL places them greedily on the SMs their predecessor leaves first). Tests (bit-equal to variant 4), then steps.
#   bash bench/calls/device_s20_call3.sh     (carry .whl; ~4 minutes)
set -uo pipefail
source bench/device_setup.sh
timeout 200 python3 -m pytest -q -p no:cacheprovider -rfE --timeout 120 tests/test_native_ops.py \
  -k "pp_variants or launch_variants or x_layout" > $out/tests.log 2>&1
echo "tests rc=$?"; grep -E "^(FAILED|ERROR)|passed|failed" $out/tests.log | head -12
base="5120x17408=36,5120x6144=4"
probe() { timeout 200 python3 bench/step_probe.py --kv int8 --depths 0,131072 "$@" 2>&1 | grep -E "recipe|step|Error|error" \
  | tee -a $out/steps.txt; }
probe --routes "$base;5120x17408=49;5120x17408=50;5120x6144=51;5120x6144=52;$base;5120x17408=49,5120x6144=51;5120x17408=50,5120x6144=52;$base"
echo "total $(( $(date +%s) - t0 )) s"
