#!/usr/bin/env bash
# Session 16, after the final benchmark: llama.cpp's decode peer with f16 KV (beside the q8_0 one of the final call),
# then every GPU test module (tests/test_native*.py): the sx GEMV kernel's body moved into a device function this
# session (sx_gemv, shared with the split kernel), so every variant's tests run again.
#   bash bench/calls/device_s16_tests.sh     (carry .whl and .peer)
set -uo pipefail
start=$(date +%s)
left() { echo $(( ${BUDGET:-560} - ($(date +%s) - start) )); }
source bench/device_setup.sh
if [[ -d .peer ]]; then
  timeout 100 bash .peer/llamacpp-peer.sh -fa on -p 0 -n 64 -d 0,8192,32768 -r 1 > "$out/llamacpp-f16.json" 2>> "$out/peer.log"
  echo "peer f16 rc=$? ($(left) s left)"
fi
timeout $(( $(left) - 10 )) python3 -m pytest -q -p no:cacheprovider -rfE --timeout 120 tests/test_native*.py \
  -k "not timing_probe" > $out/tests.log 2>&1
echo "tests rc=$? ($(left) s left)"; grep -E "^(FAILED|ERROR)|passed|failed" $out/tests.log | tail -12
echo "total $(( $(date +%s) - start )) s"
