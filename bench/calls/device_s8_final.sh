#!/usr/bin/env bash
# Session 8, final call: the decode benchmark at the final code (route 34 / 30 / 4, the GDN conv inside the one-token
# step, the new attention combine), then the GPU tests, then llama.cpp's decode peer if time is left. The benchmark
# runs first because four refused starts left one short call: its figures are kept whatever the tests then show, and
# the tests' outcome is reported beside them (bench/NOTES.md).
#   MONORAIL_COMMIT=<sha> [BUDGET=seconds] [TESTS=core] bash bench/calls/device_s8_final.sh     (carry .whl and .peer)
set -uo pipefail
start=$(date +%s)
left() { echo $(( ${BUDGET:-585} - ($(date +%s) - start) )); }  # BUDGET: the seconds the call may run
source bench/device_setup.sh
timeout 230 python3 bench/decode.py --out $out/decode-h200.json --quick > $out/decode.log 2>&1
echo "decode rc=$? ($(left) s left)"; grep -E "copy bandwidth|\"depth\"|without PDL|leave-one-out" $out/decode.log | head -16
# TESTS=core: the modules this session's changes touch, without the timing probes
if [[ "${TESTS:-all}" == core ]]; then
  mods="tests/test_native_ops.py tests/test_native_attn_decode.py tests/test_native_gdn_chunk.py tests/test_native_model.py
        tests/test_native_engine.py tests/test_native_lanes.py tests/test_native_prefill.py tests/test_native_artifact.py"
else
  mods="tests/test_native_*.py"
fi
tt=$(( $(left) - 15 )); [[ $tt -gt 230 ]] && tt=230
timeout $tt python3 -m pytest -q -p no:cacheprovider -rfE --timeout 90 $mods -k "not timing_probe" > $out/tests.log 2>&1
echo "tests rc=$? ($(left) s left)"; grep -E "^(FAILED|ERROR)|passed|failed" $out/tests.log | head -24
if [[ -d .peer && $(left) -gt 130 ]]; then
  timeout 110 bash .peer/llamacpp-peer.sh -fa on -p 0 -n 64 -d 0,8192,32768 -r 1 > "$out/llamacpp-f16.json" 2>> "$out/peer.log"
  echo "peer f16 rc=$? ($(left) s left)"
  if [[ $(left) -gt 60 ]]; then
    timeout $(( $(left) - 10 )) bash .peer/llamacpp-peer.sh -fa on -p 0 -n 64 -d 0,8192,32768 -r 1 -ctk q8_0 -ctv q8_0 \
      > "$out/llamacpp-q8.json" 2>> "$out/peer.log"
    echo "peer q8_0 rc=$? ($(left) s left)"
  fi
fi
echo "total $(( $(date +%s) - start )) s"
