#!/usr/bin/env bash
# Session 2, call 3: all GPU tests after the call-2 fixes, then the decode benchmark (quick mode).
set -uo pipefail
source bench/device_setup.sh
timeout 240 python3 -m pytest -q -p no:cacheprovider -s -rfE --timeout 90 tests/test_native_prefill.py \
  tests/test_native_engine.py tests/test_native_artifact.py tests/test_native_attn_prefill.py tests/test_native_gemm.py \
  tests/test_native_gdn_chunk.py tests/test_native_attn_decode.py tests/test_native_ops.py tests/test_native_model.py \
  tests/test_plan.py > $out/tests.log 2>&1
echo "tests rc=$?"
grep -E "^(FAILED|ERROR)|passed|failed" $out/tests.log | head -30
grep -E "prefill in chunks|rel err|agree" $out/tests.log | head -30
timeout 280 python3 bench/decode.py --out $out/decode-h200.json --quick 2>&1 | grep -v "^   " > $out/bench.log
echo "bench rc=$?"; grep -E "copy bandwidth|route|variant times|depth\"|leave-one-out" $out/bench.log | head -30
