#!/usr/bin/env bash
# Session 16, second final call: the q4-27b decode benchmark at the commit that also routes its 6-bit lm_head to variant 47
# (the fused norm and the split kernel's walk), with a split projection's head and
# tail in one kernel (qgemv_normed_split; 5-bit down / gdn_out / o on variant 36 as in session 15),
# then the q4-27b artifact end to end against the reference on this route, then llama.cpp's
# decode peer (q8_0 KV) in the time left. The q4g64 benchmark of record (decode-h200.json, a93a5b1) is not rerun:
# no q4g64 kernel or route changed (the split paths are taken only by split recipes).
#   MONORAIL_COMMIT=<sha> [BUDGET=seconds] bash bench/calls/device_s16_final2.sh     (carry .whl and .peer)
set -uo pipefail
start=$(date +%s)
left() { echo $(( ${BUDGET:-330} - ($(date +%s) - start) )); }
source bench/device_setup.sh
timeout 90 python3 -m pytest -q -p no:cacheprovider -rfE --timeout 60 tests/test_native_ops.py \
  -k "headless or normed" > $out/tests-ops.log 2>&1
echo "ops tests rc=$? ($(left) s left)"; grep -E "^(FAILED|ERROR)|passed|failed" $out/tests-ops.log | tail -4
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
