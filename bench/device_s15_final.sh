#!/usr/bin/env bash
# Session 15, final call: the decode benchmark of record (q4g64, bench/results/decode-h200.json) and, first time, the
# converter's default recipe q4-27b (decode-h200-q4-27b.json: 5-bit down / gdn_out / o on variant 36, the split
# tails on the column split with the norm fused), llama.cpp's decode peer (q8_0 KV) between them, then GPU tests in
# the time left.
#   MONORAIL_COMMIT=<sha> [BUDGET=seconds] bash bench/device_s15_final.sh     (carry .whl and .peer)
set -uo pipefail
start=$(date +%s)
left() { echo $(( ${BUDGET:-585} - ($(date +%s) - start) )); }
source bench/device_setup.sh
timeout 230 python3 bench/decode.py --out $out/decode-h200.json --quick > $out/decode.log 2>&1
echo "decode q4g64 rc=$? ($(left) s left)"
grep -E "copy bandwidth|\"depth\"|without PDL" $out/decode.log | head -12
if [[ -d .peer && $(left) -gt 300 ]]; then
  timeout 80 bash .peer/llamacpp-peer.sh -fa on -p 0 -n 64 -d 0,8192,32768 -r 1 -ctk q8_0 -ctv q8_0 \
    > "$out/llamacpp-q8.json" 2>> "$out/peer.log"
  echo "peer q8_0 rc=$? ($(left) s left)"
fi
t=$(( $(left) - 40 )); (( t > 220 )) && t=220
timeout $t python3 bench/decode.py --recipe q4-27b --out $out/decode-h200-q4-27b.json --quick \
  > $out/decode-q4-27b.log 2>&1
echo "decode q4-27b rc=$? ($(left) s left)"
grep -E "\"depth\"|without PDL" $out/decode-q4-27b.log | head -12
t=$(( $(left) - 5 ))
if (( t > 30 )); then
  timeout $t python3 -m pytest -q -p no:cacheprovider -rfE --timeout 90 tests/test_native_engine.py \
    tests/test_native_lanes.py tests/test_native_prefill.py -k "not timing_probe" > $out/tests.log 2>&1
  echo "tests rc=$? ($(left) s left)"; grep -E "^(FAILED|ERROR)|passed|failed" $out/tests.log | tail -8
fi
echo "total $(( $(date +%s) - start )) s"
