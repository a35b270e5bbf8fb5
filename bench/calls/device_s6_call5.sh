#!/usr/bin/env bash
# Session 6, call 5: the GEMVs' prologue L2 prefetch (the rest of each warp's first row group before pdl_wait) off
# and on, on whole steps; the route search for down over every candidate with more bytes in flight per warp (2, 3,
# 5, 35..37 never searched on steps); every qgemv test (qgemv_kernel is now two kernels: with and without a
# register cap).
set -uo pipefail
echo "record of session 6 call 5: the prologue L2 prefetch it measured was removed after it (bench/NOTES.md)"; exit 2
source bench/device_setup.sh
timeout 200 python3 -m pytest -q -p no:cacheprovider -rfE --timeout 60 tests/test_native_ops.py -k "qgemv" > $out/tests.log 2>&1
echo "qgemv tests rc=$?"; grep -E "^(FAILED|ERROR)|passed|failed" $out/tests.log | head -16
timeout 120 python3 bench/step_probe.py --depths 0 --steps 30 --prologue-prefetch 5 2>&1 | tee $out/step-probe.txt
timeout 150 python3 bench/route_search.py --depth 0 --steps 30 --shapes 5120x17408,5120x6144 --candidates 2,3,4,5,6,35,36,37 \
  --json $out/route-search.json 2>&1 | tee $out/route-search.txt
echo "total $(( $(date +%s) - t0 )) s"
