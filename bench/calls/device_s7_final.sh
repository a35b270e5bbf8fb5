#!/usr/bin/env bash
# Session 7, final call: every GPU test module at the final code (route 29 / 30); if the model, engine, lanes,
# prefill, artifact and fused-norm tests pass, the final benchmark (decode.py --quick and the llama.cpp peer in the
# same call); then, with the time left, call 4's experiment (variants 31..33 on the 5120-row shapes, whole steps).
# Device time was short (two refused starts), hence one call.
#   MONORAIL_COMMIT=<sha> bash bench/calls/device_s7_final.sh     (carry .whl and .peer)
set -uo pipefail
start=$(date +%s)
left() { echo $(( 585 - ($(date +%s) - start) )); }
source bench/device_setup.sh
source bench/device_decode_peers.sh
timeout 210 python3 -m pytest -q -p no:cacheprovider -rfE --timeout 90 tests/test_native_*.py > $out/tests.log 2>&1
echo "all native tests rc=$? ($(left) s left)"; grep -E "^(FAILED|ERROR)|passed|failed" $out/tests.log | head -16
if grep -E "^(FAILED|ERROR)" $out/tests.log | grep -qE "native_(model|engine|lanes|prefill|artifact)|normed"; then
  echo "core tests failed: no benchmark"; exit 1
fi
decode_and_peers 130
if [[ $(left) -gt 60 ]]; then
  D=5120x17408; O=5120x6144
  timeout $(( $(left) - 10 )) python3 bench/step_probe.py --kv int8 --depths 0 --steps 30 \
    --routes "$D=31;$D=32;$D=33;$O=31;$O=32;$O=33" 2>&1 | grep step
fi
echo "total $(( $(date +%s) - start )) s"
