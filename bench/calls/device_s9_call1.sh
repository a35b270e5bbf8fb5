#!/usr/bin/env bash
# Session 9, call 1: the GEMV ablation for the 5120-row shapes (bench/gemv_ablation.cu, standalone), then the engine
# build and the amended fused-GDN-step test (session 8's final call ran it as a bit-identity test: 8 failures) with
# the other GDN / model tests.
#   bash bench/calls/device_s9_call1.sh     (carry .whl)
set -uo pipefail
out=${OUT:-/tmp/out}; mkdir -p "$out"
nvcc -O3 -std=c++17 -arch=sm_90 -Icsrc/cuda -o /tmp/ga bench/gemv_ablation.cu && timeout 120 /tmp/ga > $out/ablation.txt 2>&1
cat $out/ablation.txt
source bench/device_setup.sh
timeout 200 python3 -m pytest -q -p no:cacheprovider -rfE --timeout 90 tests/test_native_ops.py tests/test_native_model.py \
  -k "gdn or conv or model" > $out/tests.log 2>&1
echo "tests rc=$?"; grep -E "^(FAILED|ERROR)|passed|failed|rel_err|assert" $out/tests.log | head -40
echo "total $(( $(date +%s) - t0 )) s"
