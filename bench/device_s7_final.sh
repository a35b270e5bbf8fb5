#!/usr/bin/env bash
# Session 7, final call: every GPU test module at the final code (route 29 / 30); if the model, engine, lanes,
# prefill, artifact and fused-norm tests pass, the final benchmark (decode.py --quick and the llama.cpp peer in the
# same call); then, with the time left, call 4's experiment (variants 31..33 on the 5120-row shapes, whole steps).
# Device time was short (two refused starts), hence one call.
#   MONORAIL_COMMIT=<sha> bash bench/device_s7_final.sh     (carry .whl and .peer)
set -uo pipefail
start=$(date +%s)
left() { echo $(( 585 - ($(date +%s) - start) )); }
source bench/device_setup.sh
timeout 210 python3 -m pytest -q -p no:cacheprovider -rfE --timeout 90 tests/test_native_*.py > $out/tests.log 2>&1
echo "all native tests rc=$? ($(left) s left)"; grep -E "^(FAILED|ERROR)|passed|failed" $out/tests.log | head -16
if grep -E "^(FAILED|ERROR)" $out/tests.log | grep -qE "native_(model|engine|lanes|prefill|artifact)|normed"; then
  echo "core tests failed: no benchmark"; exit 1
fi
timeout 230 python3 bench/decode.py --out $out/decode-h200.json --quick > $out/decode.log 2>&1
echo "decode rc=$? ($(left) s left)"; grep -E "copy bandwidth|\"depth\"|without PDL|leave-one-out" $out/decode.log | head -16
if [[ -d .peer && $(left) -gt 130 ]]; then
  timeout 110 bash .peer/llamacpp-peer.sh -fa on -p 0 -n 64 -d 0,8192,32768 -r 1 > "$out/llamacpp-f16.json" 2>> "$out/peer.log"
  echo "peer f16 rc=$? ($(left) s left)"
  timeout $(( $(left) > 100 ? 90 : $(left) - 10 )) bash .peer/llamacpp-peer.sh -fa on -p 0 -n 64 -d 0,8192,32768 -r 1 -ctk q8_0 -ctv q8_0 \
    > "$out/llamacpp-q8.json" 2>> "$out/peer.log"
  echo "peer q8_0 rc=$? ($(left) s left)"
  python3 bench/decode.py --out "$out/decode-h200.json" --fill-peers-only --llamacpp-f16 "$out/llamacpp-f16.json" \
    --llamacpp-q8 "$out/llamacpp-q8.json" --shared-peer .peer/llamacpp-h200.json | head -c 1500; echo
fi
if [[ $(left) -gt 60 ]]; then
  G=34816x5120; I=16480x5120; Q=14336x5120; L=248320x5120; D=5120x17408; O=5120x6144
  timeout $(( $(left) - 10 )) python3 bench/step_probe.py --kv int8 --depths 0 --steps 30 \
    --routes "$D=31;$D=32;$D=33;$O=31;$O=32;$O=33" 2>&1 | grep step
fi
echo "total $(( $(date +%s) - start )) s"
