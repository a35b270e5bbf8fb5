#!/usr/bin/env bash
# Session 3, call 2: the new attention prefill kernel (variants 0/2/3, never run before) and the
# re-mapped gdn_step, checked against their oracles; their speed; the decode step and the headline
# prefill figures (8K, 128K) with the default routes.
set -uo pipefail
source bench/device_setup.sh
timeout 240 python3 -m pytest -q -p no:cacheprovider -s -rfE --timeout 120 tests/test_native_attn_prefill.py \
  tests/test_native_gdn_chunk.py tests/test_native_ops.py tests/test_native_prefill.py tests/test_native_model.py \
  > $out/tests.log 2>&1
echo "tests rc=$?"
grep -E "^(FAILED|ERROR)|passed|failed" $out/tests.log | head -30
grep -E "attn_prefill .*TFLOP|implied" $out/tests.log | head -24
timeout 90 python3 bench/step_probe.py --kv int8 --depths 0,131072 > $out/step.log 2>&1; echo "step rc=$?"; cat $out/step.log | grep step
timeout 150 python3 bench/prefill.py --out $out/prefill-probe.json --prompts 8192,131072 --no-share > $out/prefill.log 2>&1
echo "prefill rc=$?"; grep -E "chunk|GEMMs|tok_s" $out/prefill.log | head
