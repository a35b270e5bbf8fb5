#!/usr/bin/env bash
# Session 7, call 3: the probe with less x staged per block; GEMV variants 29 / 30 (23 / 27 as one block per SM, so x
# is staged once per SM): their tests, the isolated table, and whole steps with them routed in.
set -uo pipefail
out=${OUT:-/tmp/out}; mkdir -p "$out"
nvcc -O3 -std=c++17 -arch=sm_90 -o /tmp/bp bench/boundary_probe.cu && timeout 100 /tmp/bp > $out/boundary3.txt; sed -n '/x staged per block/,$p' $out/boundary3.txt
source bench/device_setup.sh
timeout 200 python3 -m pytest -q -p no:cacheprovider -rfE --timeout 90 tests/test_native_ops.py -k "normed or 29 or 30" 2>&1 | tail -3
timeout 100 python3 bench/gemv_probe.py --bits 4 --variants 0,23,27,29,30 --reps 30 2>&1 | tee $out/gemv.txt | tail -12
G=34816x5120; I=16480x5120; Q=14336x5120; L=248320x5120
timeout 150 python3 bench/step_probe.py --kv int8 --depths 0 --routes "$G=29;$I=30,$Q=30;$G=29,$I=30,$Q=30,$L=29;$G=29,$I=29,$Q=29,$L=29;$I=29,$Q=29" 2>&1 | grep step
echo "total $(( $(date +%s) - t0 )) s"
