#!/usr/bin/env bash
# Session 38, call 2: the worker race fix on the GPU (test_native_worker's cancelled reply then an immediate next
# one), the saved-states and prefix-reuse GPU tests again, and where a resumed turn's ~0.2 s goes
# (bench/turn_profile.py at 32K and 128K).
#   bash bench/calls/device_s38_call2.sh     (carry .whl; ~4 minutes on a fresh machine)
set -uo pipefail
source bench/device_setup.sh
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > "$out/gpu.txt" 2>&1
python3 -m pytest -q -p no:cacheprovider -rfE tests/test_native_worker.py tests/test_native_saved_states.py \
  tests/test_native_prefix_reuse.py tests/test_worker.py > "$out/tests.log" 2>&1
echo "tests rc=$?"; tail -3 "$out/tests.log"
for h in 32768 131072; do
  (cd bench && timeout 200 python3 turn_profile.py --history $h) > "$out/turn-profile-$h.txt" 2>&1
  echo "profile $h rc=$?"; grep -E "^== |^step T" "$out/turn-profile-$h.txt"
done
echo "total: $(( $(date +%s) - t0 )) s"
