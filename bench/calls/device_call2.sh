#!/usr/bin/env bash
# Session 2, call 2: first run of the prefill kernels (GEMM via cuBLAS, chunked GDN, flash attention),
# the engine's prefill path, the GEMV variants 6..15, native Engine end to end; quick prefill timing.
set -uo pipefail
source bench/device_setup.sh; grep -i "cublas" $out/build.log | head -3
timeout 280 python3 -m pytest -q -p no:cacheprovider -s -rfE --timeout 90 tests/test_native_gemm.py tests/test_native_gdn_chunk.py \
  tests/test_native_attn_prefill.py tests/test_native_prefill.py tests/test_native_engine.py tests/test_native_artifact.py \
  tests/test_native_attn_decode.py tests/test_native_ops.py tests/test_native_model.py tests/test_plan.py > $out/tests.log 2>&1
echo "tests rc=$?"
grep -E "^(FAILED|ERROR)|passed|failed" $out/tests.log | head -60
grep -E "TFLOP|ms per|ms for|implied|seconds|rel err|agree|slices" $out/tests.log | head -60
echo "=== gemv variants"; timeout 50 python3 bench/gemv_probe.py 2>&1 | tail -25
echo "=== prefill quick"; timeout 150 python3 bench/prefill.py --out $out/prefill-quick.json --prompts 8192 \
  --chunks-probe 1024,4096 --no-share --shared-peer .peer/llamacpp-h200.json 2>&1 | tail -12
