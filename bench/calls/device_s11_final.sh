#!/usr/bin/env bash
# Session 11, final call: the model / engine / lanes tests first (call 2 found the GemvArgs field shift with them),
# the decode benchmark at this commit (bench/results/decode-h200.json), llama.cpp's decode peer with q8_0 KV in the
# same call, the other GPU test modules, the fused norm's weights before / after the PDL wait on whole steps, then the
# f16-KV peer in the time left.
#   MONORAIL_COMMIT=<sha> [BUDGET=seconds] bash bench/calls/device_s11_final.sh     (carry .whl and .peer)
set -uo pipefail
start=$(date +%s)
left() { echo $(( ${BUDGET:-585} - ($(date +%s) - start) )); }
source bench/device_setup.sh
timeout 120 python3 -m pytest -q -p no:cacheprovider -rfE --timeout 90 tests/test_native_model.py \
  tests/test_native_engine.py tests/test_native_lanes.py > $out/tests.log 2>&1
echo "model tests rc=$? ($(left) s left)"; grep -E "^(FAILED|ERROR)|passed|failed" $out/tests.log | head -12
timeout 230 python3 bench/decode.py --out $out/decode-h200.json --quick > $out/decode.log 2>&1
echo "decode rc=$? ($(left) s left)"
grep -E "copy bandwidth|\"depth\"|without PDL|leave-one-out|attention variant" $out/decode.log | head -16
if [[ -d .peer && $(left) -gt 150 ]]; then
  timeout 80 bash .peer/llamacpp-peer.sh -fa on -p 0 -n 64 -d 0,8192,32768 -r 1 -ctk q8_0 -ctv q8_0 \
    > "$out/llamacpp-q8.json" 2>> "$out/peer.log"
  echo "peer q8_0 rc=$? ($(left) s left)"
fi
mods="tests/test_native_ops.py tests/test_native_attn_decode.py tests/test_native_gdn_chunk.py tests/test_native_prefill.py
      tests/test_native_artifact.py"
t=$(( $(left) - 70 )); (( t > 200 )) && t=200
timeout $t python3 -m pytest -q -p no:cacheprovider -rfE --timeout 90 $mods -k "not timing_probe" >> $out/tests.log 2>&1
echo "op tests rc=$? ($(left) s left)"; grep -E "^(FAILED|ERROR)|passed|failed" $out/tests.log | tail -8
if (( $(left) > 60 )); then
  timeout $(( $(left) - 15 )) python3 bench/step_probe.py --kv int8 --depths 0,131072 --norm-early 1,0,1,0 \
    --routes "5120x17408=34;5120x17408=30;5120x6144=34;5120x6144=30" 2>&1 \
    | grep -E "step" | tee $out/steps.txt
fi
echo "total $(( $(date +%s) - start )) s"
