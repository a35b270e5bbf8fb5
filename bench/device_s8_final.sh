#!/usr/bin/env bash
# Session 8, final call: every GPU test module at the final code (route 34 / 30 / 4, the GDN conv inside the one-token
# step, the new attention combine); if the model, engine, lanes, prefill, artifact and fused-norm tests pass, the final
# benchmark (decode.py --quick and the llama.cpp peer in the same call).
#   MONORAIL_COMMIT=<sha> [BUDGET=seconds] [TESTS=core] bash bench/device_s8_final.sh     (carry .whl and .peer)
set -uo pipefail
start=$(date +%s)
left() { echo $(( ${BUDGET:-585} - ($(date +%s) - start) )); }  # BUDGET: the seconds the call may run
source bench/device_setup.sh
source bench/device_decode_peers.sh
# TESTS=core (device time short): the modules this session's changes touch, without the timing probes
if [[ "${TESTS:-all}" == core ]]; then
  mods="tests/test_native_ops.py tests/test_native_attn_decode.py tests/test_native_gdn_chunk.py tests/test_native_model.py
        tests/test_native_engine.py tests/test_native_lanes.py tests/test_native_prefill.py tests/test_native_artifact.py"
  timeout 200 python3 -m pytest -q -p no:cacheprovider -rfE --timeout 90 $mods -k "not timing_probe" > $out/tests.log 2>&1
else
  timeout 230 python3 -m pytest -q -p no:cacheprovider -rfE --timeout 90 tests/test_native_*.py > $out/tests.log 2>&1
fi
echo "all native tests rc=$? ($(left) s left)"; grep -E "^(FAILED|ERROR)|passed|failed" $out/tests.log | head -24
if grep -E "^(FAILED|ERROR)" $out/tests.log | grep -qE "native_(model|engine|lanes|prefill|artifact)|normed|attn|attention|conv|gdn"; then
  echo "core tests failed: no benchmark"; exit 1
fi
decode_and_peers 130
echo "total $(( $(date +%s) - start )) s"
