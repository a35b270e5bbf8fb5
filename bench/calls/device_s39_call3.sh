#!/usr/bin/env bash
# Session 39, call 3: where greedy speculative tokens leave the one-token greedy tokens on a tiny checkpoint
# (bench/spec_divergence.py, tensor-core GEMV off), then the MTP / speculative tests as revised after call 2
# (near ties checked by teacher forcing; the oracle follows the committed tokens).
set -uo pipefail
source bench/device_setup.sh
timeout 60 python3 bench/spec_divergence.py --mma 0 2>&1 | grep -E "<--|kept|Error" | head -30
timeout 120 python3 -m pytest -q -p no:cacheprovider -rfE -s tests/test_native_mtp.py > "$out/tests-mtp.log" 2>&1
echo "mtp tests rc=$?"; grep -E "MTP|k=|engine:|passed|failed|^E  |^FAILED" "$out/tests-mtp.log" | head -30
echo "total: $(( $(date +%s) - t0 )) s"
