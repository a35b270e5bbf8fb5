#!/usr/bin/env bash
# Session 6, call 4: down with more chunks in flight per warp (35..37), the read pattern alone for gate_up's and
# down's grids in the row-major and a tiled layout (bench/read_probe.py), every qgemv test, the GEMV table, and the
# whole-step route search over the candidates for down.
set -uo pipefail
echo "record of session 6 call 4: variants 35..37 it measured were removed after it (bench/NOTES.md)"; exit 2
source bench/device_setup.sh
timeout 60 python3 bench/read_probe.py --json $out/read-probe.json 2>&1 | tee $out/read-probe.txt
timeout 200 python3 -m pytest -q -p no:cacheprovider -rfE --timeout 60 tests/test_native_ops.py -k "qgemv" > $out/tests.log 2>&1
echo "qgemv tests rc=$?"; grep -E "^(FAILED|ERROR)|passed|failed" $out/tests.log | head -16
timeout 120 python3 bench/gemv_probe.py --variants 0,4,6,23,35,36,37 --json $out/gemv-probe.json 2>&1 | tee $out/gemv-probe.txt
timeout 150 python3 bench/route_search.py --depth 0 --steps 30 --candidates 4,6,35,36,37 --json $out/route-search.json 2>&1 | tee $out/route-search.txt | grep -v "^  "
echo "total $(( $(date +%s) - t0 )) s"
