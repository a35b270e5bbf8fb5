#!/usr/bin/env bash
# Session 7, call 2: boundary_probe.cu v2 (flat per phase, the row-major GEMV pattern against a consumption-ordered
# layout, per shape), and the four engine tests call 1 lost to the missing tokenizer wheel (carry .whl).
set -uo pipefail
out=${OUT:-/tmp/out}; mkdir -p "$out"
nvcc -O3 -std=c++17 -arch=sm_90 -o /tmp/bp bench/boundary_probe.cu && timeout 200 /tmp/bp | tee $out/boundary2.txt
source bench/device_setup.sh
timeout 200 python3 -m pytest -q -p no:cacheprovider -rfE --timeout 90 tests/test_native_engine.py tests/test_native_artifact.py 2>&1 | tail -3
echo "total $(( $(date +%s) - t0 )) s"
