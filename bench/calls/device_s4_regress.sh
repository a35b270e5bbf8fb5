#!/usr/bin/env bash
# Regression call at the final code (sessions 4 and 5): every GPU test module, and the int4-KV decode step with PDL.
set -uo pipefail
source bench/device_setup.sh
timeout 330 python3 -m pytest -q -p no:cacheprovider -rfE --timeout 90 tests/test_native_*.py > $out/tests.log 2>&1
echo "all native tests rc=$?"; grep -E "^(FAILED|ERROR)|passed|failed" $out/tests.log | head -12
timeout 60 python3 bench/step_probe.py --kv int4 --depths 0,131072 2>&1 | grep step
echo "total $(( $(date +%s) - t0 )) s"
