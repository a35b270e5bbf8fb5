#!/usr/bin/env bash
# Session 3, call 3: the cp.async ring GEMV (variants 16..19) and the fp16 5/6/8-bit T = 1 path, the
# split-format fused roles (per-tensor formats kept at load), checked against their oracles; then the
# GEMV table per width, the decode step per forced GEMV variant, and the prefill breakdown by op class.
set -uo pipefail
source bench/device_setup.sh
timeout 220 python3 -m pytest -q -p no:cacheprovider -rfE --timeout 120 tests/test_native_ops.py -k "qgemv or random_q or gdn" \
  > $out/tests_ops.log 2>&1
echo "ops tests rc=$?"; grep -E "^(FAILED|ERROR)|passed|failed" $out/tests_ops.log | head -20
timeout 200 python3 -m pytest -q -p no:cacheprovider -rfE --timeout 120 tests/test_native_artifact.py tests/test_native_model.py \
  "tests/test_native_prefill.py::test_greedy_after_multi_chunk_prompt_matches_reference" > $out/tests_b.log 2>&1
echo "artifact/model tests rc=$?"; grep -E "^(FAILED|ERROR)|passed|failed" $out/tests_b.log | head -20
timeout 90 python3 bench/gemv_probe.py --bits 4,5,6,8 > $out/gemv.log 2>&1; echo "gemv probe rc=$?"; cat $out/gemv.log
timeout 100 python3 bench/step_probe.py --kv int8 --depths 0 --gemv-variants 0,16,17,18,19 > $out/step.log 2>&1
echo "step rc=$?"; grep step $out/step.log
timeout 80 python3 bench/prefill.py --out $out/prefill-probe.json --prompts 8192 --no-share --breakdown > $out/prefill.log 2>&1
echo "prefill rc=$?"; grep -E "chunk|breakdown|GEMMs" $out/prefill.log
