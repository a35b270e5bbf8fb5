#!/usr/bin/env bash
# Session 40, call 2 (the device time's last ~5 minutes): the tensor-core GEMV with the ld_after_wait fix, PDL on
# (the engine's default), on the engine-level tests: causality / one-token agreement, verify checkpoints and commit,
# the MTP head and speculative rounds.
set -uo pipefail
source bench/device_setup.sh
export MONORAIL_QGEMV_MMA=1
timeout 100 python3 -m pytest -q -p no:cacheprovider -rfE -s tests/test_native_qgemv_mma.py -k engine_steps \
  tests/test_native_verify.py > "$out/tests-mma-fixed.log" 2>&1
echo "engine + verify rc=$?"; grep -E "k = |passed|failed|^E  |^FAILED" "$out/tests-mma-fixed.log" | head -20
timeout 90 python3 -m pytest -q -p no:cacheprovider -rfE -s tests/test_native_mtp.py > "$out/tests-mtp-mma-fixed.log" 2>&1
echo "mtp rc=$?"; grep -E "MTP|k=|engine:|passed|failed|^E  |^FAILED" "$out/tests-mtp-mma-fixed.log" | head -20
echo "total: $(( $(date +%s) - t0 )) s"
