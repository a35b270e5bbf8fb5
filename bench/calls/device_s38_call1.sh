#!/usr/bin/env bash
# Session 38, call 1: everything session 37 changed after its call 2, on a GPU, in one call:
#   bench/prefix_reuse.py (step-path routing for short turns, the edited third turn after a switch back, the restart
#   from a state saved to disk), then every native test module and tests/test_plan.py (the last full GPU suite was
#   session 36 at 4afef56), saved states' GPU tests among them.
#   bash bench/calls/device_s38_call1.sh     (carry .whl; ~7 minutes on a fresh machine)
set -uo pipefail
source bench/device_setup.sh
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > "$out/gpu.txt" 2>&1
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1 | sed 's/NVIDIA //; s/ .*//' | tr 'A-Z' 'a-z')
python3 bench/prefix_reuse.py --out "$out/prefix-reuse-$gpu.json" --histories ${HISTORIES:-32768,131072} \
  2>&1 | tee "$out/prefix-reuse.log" | tail -6
echo "bench done: $(( $(date +%s) - t0 )) s"
left=$(( 570 - ($(date +%s) - t0) ))   # the call's 600 s, less what the bench took
timeout $left python3 -m pytest -q -p no:cacheprovider -rfE tests/test_native*.py tests/test_plan.py \
  -k "not timing_probe" > "$out/tests.log" 2>&1
echo "tests rc=$?"; grep -E "^(FAILED|ERROR)|passed|failed" "$out/tests.log" | tail -20
echo "total: $(( $(date +%s) - t0 )) s"
