#!/usr/bin/env bash
# Session 10, final call: the engine's GPU test modules at the final code (the lanes layout, the int8 attention route,
# the two lanes test fixes after call 2), int4 KV steps at depth 0 / 128K, then llama.cpp's decode peer with f16 KV
# (call 2 measured q8_0) in the time left.
#   [BUDGET=seconds] bash bench/calls/device_s10_final.sh     (carry .whl and .peer)
set -uo pipefail
start=$(date +%s)
left() { echo $(( ${BUDGET:-585} - ($(date +%s) - start) )); }
source bench/device_setup.sh
mods="tests/test_native_ops.py tests/test_native_attn_decode.py tests/test_native_gdn_chunk.py tests/test_native_model.py
      tests/test_native_engine.py tests/test_native_lanes.py tests/test_native_prefill.py tests/test_native_artifact.py"
timeout 250 python3 -m pytest -q -p no:cacheprovider -rfE --timeout 90 $mods -k "not timing_probe" > $out/tests.log 2>&1
echo "tests rc=$? ($(left) s left)"; grep -E "^(FAILED|ERROR)|passed|failed" $out/tests.log | head -24
timeout 60 python3 bench/step_probe.py --kv int4 --depths 0,131072 2>&1 | grep -E "step" | tee $out/steps-int4.txt
echo "int4 done ($(left) s left)"
if [[ -d .peer && $(left) -gt 80 ]]; then
  timeout $(( $(left) - 10 )) bash .peer/llamacpp-peer.sh -fa on -p 0 -n 64 -d 0,8192,32768 -r 1 \
    > "$out/llamacpp-f16.json" 2>> "$out/peer.log"
  echo "peer f16 rc=$? ($(left) s left)"
fi
echo "total $(( $(date +%s) - start )) s"
