#!/usr/bin/env bash
# Session 7, call 5 (the last device time): the conv fused into gdn_in's GEMV epilogue (qgemv_normed_conv) - its op
# test (bit-identical to the GEMV then the conv kernel), the model / engine / lanes tests (decode against the
# reference, PDL bit-identity) and whole steps; then, with the time left, boundary_probe --prefetch-only (one kernel,
# grid barriers, each warp L2-prefetching its next batches of the next phase before the barrier).
# Ran at commit 0fa9518; the conv epilogue was then reverted (no gain), so re-running this now times the step
# without it, and its -k filter selects the remaining norm and conv op tests.
set -uo pipefail
start=$(date +%s)
source bench/device_setup.sh
timeout 60 python3 -m pytest -q -p no:cacheprovider -rfE --timeout 60 tests/test_native_ops.py -k "normed or conv" 2>&1 | tail -3
timeout 120 python3 -m pytest -q -p no:cacheprovider -rfE --timeout 90 tests/test_native_model.py tests/test_native_engine.py tests/test_native_lanes.py 2>&1 | tail -3
timeout 40 python3 bench/step_probe.py --kv int8 --depths 0,131072 --steps 30 2>&1 | grep step
echo "at $(( $(date +%s) - start )) s"
nvcc -O3 -std=c++17 -arch=sm_90 -o /tmp/bp bench/boundary_probe.cu && timeout 60 /tmp/bp --prefetch-only | tee $out/boundary5.txt
echo "total $(( $(date +%s) - start )) s"
