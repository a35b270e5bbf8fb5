#!/usr/bin/env bash
# Session 5, call 2: more bytes in flight for the integer-dot sx kernel (26..28) and the x-in-register kernel
# (29..33), their oracle tests, the 4-bit table with every matrix read from DRAM (copies cycled past L2), and
# whole decode steps under per-shape routes: call 1's best pair, and this table's per-shape best.
set -uo pipefail
echo "record of session 5 call 2: the x-in-register variants 29..33 it measured were removed after it (bench/NOTES.md)"; exit 2
source bench/device_setup.sh
timeout 200 python3 -m pytest -q -p no:cacheprovider -rfE --timeout 60 tests/test_native_ops.py -k "qgemv" > $out/tests.log 2>&1
echo "qgemv tests rc=$?"; grep -E "^(FAILED|ERROR)|passed|failed" $out/tests.log | head -12
timeout 200 python3 bench/gemv_probe.py --bits 4 --reps 30 --variants 0,1,4,6,10,23,24,26,27,28,29,30,31,32,33 \
  --json $out/gemv-probe.json 2>&1 | tee $out/gemv-probe.txt | tail -20
timeout 150 python3 bench/step_probe.py --kv int8 --depths 0 --route-from $out/gemv-probe.json \
  --routes "34816x5120=23,16480x5120=24;34816x5120=29,16480x5120=29,14336x5120=29,248320x5120=29,5120x6144=30,5120x17408=32" 2>&1 | tail -6
echo "total $(( $(date +%s) - t0 )) s"
