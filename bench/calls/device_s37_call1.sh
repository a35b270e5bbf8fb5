#!/usr/bin/env bash
# Session 37, call 1: prefix reuse (and conversations set aside into host memory, KV included) timed on random 27B-shaped weights (bench/prefix_reuse.py: a 32K and a 128K
# history, the next turn resumed vs prefilled whole, 24 GiB plan, int8 KV), and the GPU prefix-reuse tests after the
# snapshot was made to advance every turn (engine/api.py _prefill).
#   bash bench/calls/device_s37_call1.sh     (carry .whl; ~4-5 minutes on a fresh machine)
set -uo pipefail
source bench/device_setup.sh
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv > "$out/gpu.txt" 2>&1
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1 | sed 's/NVIDIA //; s/ .*//' | tr 'A-Z' 'a-z')
python3 -m pytest -q -p no:cacheprovider -rfE tests/test_native_prefix_reuse.py tests/test_prefix_reuse.py \
  > "$out/tests.log" 2>&1
echo "tests rc=$?"; tail -3 "$out/tests.log"
python3 bench/prefix_reuse.py --out "$out/prefix-reuse-$gpu.json" --histories ${HISTORIES:-32768,131072} \
  2>&1 | tee "$out/prefix-reuse.log" | tail -8
echo "total: $(( $(date +%s) - t0 )) s"
