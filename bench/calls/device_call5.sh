#!/usr/bin/env bash
# Session 2, call 5: the review refactors on the GPU (shared attention prep, lane/layer helper, binding
# helpers, test helpers), then compute-sanitizer memcheck on the two-engine prefill test.
set -uo pipefail
source bench/device_setup.sh
timeout 150 python3 -m pytest -q -p no:cacheprovider -rfE --timeout 60 -k "not throughput and not probe and not performance" \
  tests/test_native_attn_prefill.py tests/test_native_ops.py tests/test_native_gdn_chunk.py tests/test_native_gemm.py \
  tests/test_native_attn_decode.py "tests/test_native_model.py::test_full_width_layers_vs_reference" \
  "tests/test_native_model.py::test_multi_token_step_equals_single_steps" \
  "tests/test_native_prefill.py::test_greedy_after_multi_chunk_prompt_matches_reference" > $out/tests.log 2>&1
echo "tests rc=$?"; grep -E "^(FAILED|ERROR)|passed|failed" $out/tests.log | head -20
timeout 170 compute-sanitizer --tool memcheck --print-limit 8 python3 -m pytest -q -x -p no:cacheprovider \
  "tests/test_native_prefill.py::test_prefill_at_odd_chunks_equals_decode_path_and_decode_continues[bf16-0.02]" \
  > $out/sanitizer.log 2>&1
echo "sanitizer rc=$?"; grep -E "Invalid|at 0x|by thread|Address|ERROR SUMMARY|passed|failed|Saved host|kernel" $out/sanitizer.log | head -30
