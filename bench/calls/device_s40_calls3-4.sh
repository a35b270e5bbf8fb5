#!/usr/bin/env bash
# Session 40, calls 3 and 4, as they ran (two commands on the warm H100 after call 2, the tensor-core GEMV forced on):
# the verify / commit tests with the non-fp64 tensor-core tests, then the model, prefill and routing modules.
#   bash bench/calls/device_s40_calls3-4.sh     (carry .whl; ~2.5 minutes)
# Results: bench/results/tests-verify-mma-fixed-h100-s40-call3.txt, tests-model-mma-fixed-h100-s40-call4.txt.
set -uo pipefail
source bench/device_setup.sh
MONORAIL_QGEMV_MMA=1 timeout 100 python3 -m pytest -q -p no:cacheprovider -rfE -s tests/test_native_verify.py \
  tests/test_native_qgemv_mma.py -k "not against_fp64" > "$out/tests-verify-mma-fixed.log" 2>&1
echo "call 3 rc=$?"; grep -E "k = |passed|failed|^E  |^FAILED" "$out/tests-verify-mma-fixed.log" | head -20
MONORAIL_QGEMV_MMA=1 timeout 120 python3 -m pytest -q -p no:cacheprovider -rfE -x tests/test_native_model.py \
  tests/test_native_prefill.py tests/test_native_routing.py > "$out/tests-model-mma-fixed.log" 2>&1
echo "call 4 rc=$?"; grep -E "passed|failed|^E  |^FAILED" "$out/tests-model-mma-fixed.log" | head -20
