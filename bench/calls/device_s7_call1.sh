#!/usr/bin/env bash
# Session 7, call 1: what a kernel boundary costs against a grid barrier (bench/boundary_probe.cu, standalone),
# then every GPU test module at HEAD (the regression the session-6 note asked for) and the int8 step.
set -uo pipefail
source bench/device_setup.sh
nvcc -O3 -std=c++17 -arch=sm_90 -o /tmp/bp bench/boundary_probe.cu && timeout 120 /tmp/bp | tee $out/boundary.txt
timeout 330 python3 -m pytest -q -p no:cacheprovider -rfE --timeout 90 tests/test_native_*.py > $out/tests.log 2>&1
echo "all native tests rc=$?"; grep -E "^(FAILED|ERROR)|passed|failed" $out/tests.log | head -12
timeout 60 python3 bench/step_probe.py --kv int8 --depths 0 2>&1 | grep step
echo "total $(( $(date +%s) - t0 )) s"
