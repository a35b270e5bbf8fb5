#!/usr/bin/env bash
# Session 19: every GPU test module on the session's final tree (product code as 86771b5 but for comments).
#   bash bench/calls/device_s19_tests.sh     (carry .whl; ~6 minutes)
set -uo pipefail
source bench/device_setup.sh
timeout 420 python3 -m pytest -q -p no:cacheprovider -rfE --timeout 120 tests/test_native*.py \
  -k "not timing_probe" > $out/tests.log 2>&1
echo "tests rc=$?"; grep -E "^(FAILED|ERROR)|passed|failed" $out/tests.log | tail -12
echo "total $(( $(date +%s) - t0 )) s"
