#!/usr/bin/env bash
# Session 25, call 1: the app's token loop against the step (bench/token_loop.py, first GPU run), then every
# GPU test module at HEAD.   bash bench/calls/device_s25_call1.sh     (carry .whl; ~8 minutes)
set -uo pipefail
source bench/device_setup.sh
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv,noheader
timeout 120 python3 bench/token_loop.py --tokens 64 --json $out/token-loop.json 2>&1 | tail -8
echo "token loop: $(( $(date +%s) - t0 )) s"
timeout 440 python3 -m pytest -q -p no:cacheprovider -rfE --timeout 120 tests/test_native*.py \
  -k "not timing_probe" > $out/tests.log 2>&1
echo "tests rc=$?"; grep -E "^(FAILED|ERROR)|passed|failed" $out/tests.log | tail -12
echo "total $(( $(date +%s) - t0 )) s"
