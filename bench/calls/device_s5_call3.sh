#!/usr/bin/env bash
# Session 5, call 3: the GEMV oracle tests after removing the x-in-register kernel, then the T = 1 route chosen on
# whole decode steps (bench/route_search.py, int8 KV, depth 0).
set -uo pipefail
source bench/device_setup.sh
timeout 150 python3 -m pytest -q -p no:cacheprovider -rfE --timeout 60 tests/test_native_ops.py -k "qgemv" > $out/tests.log 2>&1
echo "qgemv tests rc=$?"; grep -E "^(FAILED|ERROR)|passed|failed" $out/tests.log | head -12
timeout 330 python3 bench/route_search.py --depth 0 --steps 30 --json $out/route-search.json 2>&1 | tee $out/route-search.txt | grep -v "^  "
echo "total $(( $(date +%s) - t0 )) s"
