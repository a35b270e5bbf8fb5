#!/usr/bin/env bash
# Session 4, call 4: the 4-bit T = 1 GEMV table after the LOP3 change, with three new variants that keep more
# bytes in flight per warp (20: R2 U5, 21: R2 U3, 22: R1 U5), their oracle tests, the route's decode step.
set -uo pipefail
source bench/device_setup.sh
timeout 120 python3 -m pytest -q -p no:cacheprovider -rfE --timeout 60 tests/test_native_ops.py -k "qgemv" > $out/tests.log 2>&1
echo "qgemv tests rc=$?"; grep -E "^(FAILED|ERROR)|passed|failed" $out/tests.log | head -8
timeout 120 python3 bench/gemv_probe.py --bits 4 --reps 40 2>&1 | tee $out/gemv-probe.txt | tail -28
timeout 60 python3 bench/step_probe.py --kv int8 --depths 0 2>&1 | tail -2
echo "total $(( $(date +%s) - t0 )) s"
