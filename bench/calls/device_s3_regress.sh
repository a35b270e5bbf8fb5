#!/usr/bin/env bash
# Session 3, last call: the GPU test modules not run since the int4 plumbing, the split-format roles and
# the GEMV route change (Engine end to end, lanes, artifacts, decode attention in every format and
# variant, every GEMV launch variant, prefill), in the device time left.
set -uo pipefail
source bench/device_setup.sh
timeout 215 python3 -m pytest -v --tb=line -p no:cacheprovider --timeout 60 tests/test_native_engine.py \
  tests/test_native_lanes.py tests/test_native_artifact.py tests/test_native_prefill.py tests/test_native_attn_decode.py \
  tests/test_native_ops.py tests/test_native_model.py > $out/tests.log 2>&1
echo "tests rc=$?"
grep -cE " PASSED" $out/tests.log; grep -E " FAILED| ERROR|passed|failed" $out/tests.log | head -20
