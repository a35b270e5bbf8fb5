#!/usr/bin/env bash
# Session 15, final call (330 s of device time left after the start): the converter's default recipe q4-27b on the
# decode benchmark for the first time (decode-h200-q4-27b.json: 5-bit down / gdn_out / o on variant 36, the split tails
# on the column split 45), then the q4-27b artifact end to end against the reference on this route, then llama.cpp's
# decode peer (q8_0 KV) in the time left. The q4g64 benchmark of record (decode-h200.json, a93a5b1) is not rerun: its
# kernels and route did not change this session (call 4: 4.615 ms a step against its 4.647-4.66).
#   MONORAIL_COMMIT=<sha> [BUDGET=seconds] bash bench/calls/device_s15_final.sh     (carry .whl and .peer)
set -uo pipefail
start=$(date +%s)
left() { echo $(( ${BUDGET:-330} - ($(date +%s) - start) )); }
source bench/device_setup.sh
t=$(( $(left) - 60 )); (( t > 200 )) && t=200
timeout $t python3 bench/decode.py --recipe q4-27b --out $out/decode-h200-q4-27b.json --quick \
  > $out/decode-q4-27b.log 2>&1
echo "decode q4-27b rc=$? ($(left) s left)"
grep -E "copy bandwidth|\"depth\"|without PDL" $out/decode-q4-27b.log | head -12
t=$(( $(left) - 5 )); (( t > 60 )) && t=60
timeout $t python3 -m pytest -q -p no:cacheprovider -rfE --timeout 50 tests/test_native_artifact.py > $out/tests.log 2>&1
echo "tests rc=$? ($(left) s left)"; grep -E "^(FAILED|ERROR)|passed|failed" $out/tests.log | tail -4
if [[ -d .peer && $(left) -gt 70 ]]; then
  timeout $(( $(left) - 5 )) bash .peer/llamacpp-peer.sh -fa on -p 0 -n 64 -d 0,8192,32768 -r 1 -ctk q8_0 -ctv q8_0 \
    > "$out/llamacpp-q8.json" 2>> "$out/peer.log"
  echo "peer q8_0 rc=$? ($(left) s left)"
fi
echo "total $(( $(date +%s) - start )) s"
