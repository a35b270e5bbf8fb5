#!/usr/bin/env bash
# Session 13, final call: the decode benchmark at this commit (bench/results/decode-h200.json) with llama.cpp's decode
# peer (q8_0 KV) in the same call, the GPU test modules call 3 did not run (engine, lanes, GDN chunk, artifact,
# prefill attention, GEMM, weights), then the f16-KV peer in the time left.
#   MONORAIL_COMMIT=<sha> [BUDGET=seconds] bash bench/calls/device_s13_final.sh     (carry .whl and .peer)
set -uo pipefail
start=$(date +%s)
left() { echo $(( ${BUDGET:-585} - ($(date +%s) - start) )); }
source bench/device_setup.sh
timeout 230 python3 bench/decode.py --out $out/decode-h200.json --quick > $out/decode.log 2>&1
echo "decode rc=$? ($(left) s left)"
grep -E "copy bandwidth|\"depth\"|without PDL|leave-one-out|attention variant" $out/decode.log | head -16
if [[ -d .peer && $(left) -gt 150 ]]; then
  timeout 80 bash .peer/llamacpp-peer.sh -fa on -p 0 -n 64 -d 0,8192,32768 -r 1 -ctk q8_0 -ctv q8_0 \
    > "$out/llamacpp-q8.json" 2>> "$out/peer.log"
  echo "peer q8_0 rc=$? ($(left) s left)"
fi
mods="tests/test_native_engine.py tests/test_native_lanes.py tests/test_native_gdn_chunk.py tests/test_native_artifact.py
      tests/test_native_attn_prefill.py tests/test_native_gemm.py tests/test_native_weights.py tests/test_native_build.py"
t=$(( $(left) - 60 )); (( t > 200 )) && t=200
timeout $t python3 -m pytest -q -p no:cacheprovider -rfE --timeout 90 $mods -k "not timing_probe" > $out/tests.log 2>&1
echo "tests rc=$? ($(left) s left)"; grep -E "^(FAILED|ERROR)|passed|failed" $out/tests.log | tail -8
if [[ -d .peer && $(left) -gt 45 ]]; then
  timeout $(( $(left) - 5 )) bash .peer/llamacpp-peer.sh -fa on -p 0 -n 64 -d 0,8192,32768 -r 1 \
    > "$out/llamacpp-f16.json" 2>> "$out/peer.log"
  echo "peer f16 rc=$? ($(left) s left)"
fi
echo "total $(( $(date +%s) - start )) s"
