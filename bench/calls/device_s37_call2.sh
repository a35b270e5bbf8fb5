#!/usr/bin/env bash
# Session 37, call 2: bench/prefix_reuse.py on random 27B-shaped weights (a 32K and a 128K history: the next turn
# resumed vs prefilled whole, a regenerate, another conversation and back), after call 1 stopped it at random_27b's
# 1-token plan; then the native prefix-reuse tests again (NativeModel.forward's step width changed).
#   bash bench/calls/device_s37_call2.sh     (carry .whl; ~4 minutes on a fresh machine)
set -uo pipefail
source bench/device_setup.sh
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > "$out/gpu.txt" 2>&1
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1 | sed 's/NVIDIA //; s/ .*//' | tr 'A-Z' 'a-z')
python3 bench/prefix_reuse.py --out "$out/prefix-reuse-$gpu.json" --histories ${HISTORIES:-32768,131072} \
  2>&1 | tee "$out/prefix-reuse.log" | tail -4
python3 -m pytest -q -p no:cacheprovider -rfE tests/test_native_prefix_reuse.py > "$out/tests.log" 2>&1
echo "tests rc=$?"; tail -1 "$out/tests.log"
echo "total: $(( $(date +%s) - t0 )) s"
