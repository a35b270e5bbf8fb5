#!/usr/bin/env bash
# Session 14, call 6 (the last ~230 s of device time): variant 36 at 5 / 6 bits (qgemv_pp_kernel with the high plane,
# qgemv_pp_wide_kernel: 96 registers, 5 blocks an SM) on the q4-27b recipe's 5-bit down / gdn_out / attention output.
# Its tests first (bit-equal to ring 17, and against fp64), then whole steps at depth 0 (route first).
#   bash bench/calls/device_s14_call6.sh     (carry .whl)
set -uo pipefail
source bench/device_setup.sh
timeout 60 python3 -m pytest -q -p no:cacheprovider -rfE --timeout 50 tests/test_native_ops.py \
  -k "pp_wide or wide_widths or (widths_t1 and (5-36 or 6-36))" > $out/tests.log 2>&1
echo "tests rc=$?"; grep -E "^(FAILED|ERROR)|passed|failed" $out/tests.log | head -8
timeout 100 python3 bench/step_probe.py --recipe q4-27b --kv int8 --depths 0 \
  --routes "5120x17408=36;5120x6144=36;5120x17408=36,5120x6144=36" 2>&1 \
  | grep -E "recipe|step|Error|error" | tee $out/steps.txt
echo "total $(( $(date +%s) - t0 )) s"
