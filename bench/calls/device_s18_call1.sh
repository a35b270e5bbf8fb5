#!/usr/bin/env bash
# Session 18 call 1: the GPU tests of session 17's review mends (the walk kernel's output index, not yet run on a GPU),
# then bench/stream_probe.cu (a persistent kernel whose producer warp streams every weight of the step into a
# shared-memory ring while the consumers wait on the previous phase) against a kernel per phase with PDL.
#   bash bench/calls/device_s18_call1.sh     (carry .whl; ~3 minutes)
set -uo pipefail
source bench/device_setup.sh
timeout 240 python3 -m pytest -q -p no:cacheprovider -rfE --timeout 90 tests/test_native_ops.py \
  -k "walk or headless or launch_variants" > $out/tests.log 2>&1
echo "tests rc=$?"; grep -E "^(FAILED|ERROR)|passed|failed" $out/tests.log | head -12
nvcc -std=c++17 -O3 -arch=sm_90 -o /tmp/sp bench/stream_probe.cu -Ibench && timeout 120 /tmp/sp 16 | tee $out/stream-probe.txt
echo "total $(( $(date +%s) - t0 )) s"
