#!/usr/bin/env bash
# Session 5, call 1: the 4-bit integer-dot GEMV (variants 20..25: x staged as 16-bit integers, dp4a) against
# the routed half2 kernels: oracle tests of every GEMV, the 4-bit table, and the decode step with each forced.
set -uo pipefail
source bench/device_setup.sh
timeout 150 python3 -m pytest -q -p no:cacheprovider -rfE --timeout 60 tests/test_native_ops.py -k "qgemv" > $out/tests.log 2>&1
echo "qgemv tests rc=$?"; grep -E "^(FAILED|ERROR)|passed|failed" $out/tests.log | head -12
timeout 150 python3 bench/gemv_probe.py --bits 4 --reps 40 --variants 0,4,6,7,10,1,20,21,22,23,24,25 2>&1 | tee $out/gemv-probe.txt | tail -18
timeout 120 python3 bench/step_probe.py --kv int8 --depths 0 --gemv-variants 0,20,21,22,23,24 2>&1 | tail -8
echo "total $(( $(date +%s) - t0 )) s"
