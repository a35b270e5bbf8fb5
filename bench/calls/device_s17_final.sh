#!/usr/bin/env bash
# Session 17's last call: the decode benchmark of the uniform q5g64 recipe (its normed GEMVs on the walk 47 since this
# session), then the GEMV ops tests for the time left. The q4g64 / q4-27b records are not rerun: no 4-bit kernel or
# route changed (q4-27b's 6-bit lm_head moved to the walk kernel: -0.05 ms against ring 18 in call 5).
#   MONORAIL_COMMIT=<sha> [BUDGET=seconds] bash bench/calls/device_s17_final.sh     (carry .whl)
set -uo pipefail
start=$(date +%s)
left() { echo $(( ${BUDGET:-300} - ($(date +%s) - start) )); }
source bench/device_setup.sh
t=$(( $(left) - 40 )); (( t > 150 )) && t=150
timeout $t python3 bench/decode.py --recipe q5g64 --out $out/decode-h200-q5g64.json --quick > $out/decode-q5g64.log 2>&1
echo "decode q5g64 rc=$? ($(left) s left)"
grep -E "copy bandwidth|\"depth\"|without PDL" $out/decode-q5g64.log | head -12
timeout $(( $(left) - 5 )) python3 -m pytest -q -p no:cacheprovider -rfE --timeout 60 tests/test_native_ops.py \
  > $out/tests-ops.log 2>&1
echo "ops tests rc=$? ($(left) s left)"; grep -E "^(FAILED|ERROR)|passed|failed" $out/tests-ops.log | tail -4
echo "total $(( $(date +%s) - start )) s"
