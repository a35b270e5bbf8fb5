#!/usr/bin/env bash
# Session 22: every GPU test module at HEAD (the default build's PTX as 9873ce4's; the stamps' macros since).
#   bash bench/calls/device_s22_tests.sh     (carry .whl; ~6 minutes)
set -uo pipefail
source bench/device_setup.sh
timeout 420 python3 -m pytest -q -p no:cacheprovider -rfE --timeout 120 tests/test_native*.py \
  -k "not timing_probe" > $out/tests.log 2>&1
echo "tests rc=$?"; grep -E "^(FAILED|ERROR)|passed|failed" $out/tests.log | tail -12
echo "total $(( $(date +%s) - t0 )) s"
