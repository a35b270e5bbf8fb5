#!/usr/bin/env bash
# Session 26, call 1: every GPU test module at HEAD (session 25's review refactors, never run on a GPU, and the
# fallback's float32 filter), the draw's cost by mode, and the boundary probe's new --replicas mode (is the x read in
# front of each phase slow because every SM reads the same L2 lines at once?).
#   bash bench/calls/device_s26_call1.sh     (carry .whl; ~8 minutes)
set -uo pipefail
out=${OUT:-/tmp/out}; mkdir -p "$out"
nvcc -O3 -std=c++17 -arch=sm_90 -o /tmp/bp bench/boundary_probe.cu && timeout 120 /tmp/bp --replicas > $out/replicas.txt 2>&1
cat $out/replicas.txt
source bench/device_setup.sh
timeout 60 python3 bench/sampler_time.py --json $out/sampler-time.json 2>&1 | tail -14
timeout 420 python3 -m pytest -q -p no:cacheprovider -rfE --timeout 120 tests/test_native*.py \
  -k "not timing_probe" > $out/tests.log 2>&1
echo "tests rc=$?"; grep -E "^(FAILED|ERROR)|passed|failed" $out/tests.log | tail -12
echo "total $(( $(date +%s) - t0 )) s"
