#!/usr/bin/env bash
# Session 6, call 1: the block-wide cp.async ring GEMV (variants 29..33, csrc/cuda/qgemv_pipe.cuh): its oracle
# tests with every other qgemv test, the isolated GEMV table, then whole decode steps with each shape searched
# over the route's variants and the ring's (bench/route_search.py, int8 KV, depth 0).
set -uo pipefail
echo "record of session 6 call 1: the block-wide cp.async ring (variants 29..33 then) it measured were removed after it (bench/NOTES.md)"; exit 2
source bench/device_setup.sh
timeout 200 python3 -m pytest -q -p no:cacheprovider -rfE --timeout 60 tests/test_native_ops.py -k "qgemv" > $out/tests.log 2>&1
echo "qgemv tests rc=$?"; grep -E "^(FAILED|ERROR)|passed|failed" $out/tests.log | head -16
timeout 120 python3 bench/gemv_probe.py --variants 0,4,23,27,29,30,31,32,33 --json $out/gemv-probe.json 2>&1 | tee $out/gemv-probe.txt
timeout 300 python3 bench/route_search.py --depth 0 --steps 30 --candidates 4,23,27,29,30,31,32,33 --json $out/route-search.json 2>&1 | tee $out/route-search.txt | grep -v "^  "
echo "total $(( $(date +%s) - t0 )) s"
