#!/usr/bin/env bash
# Final benchmark call (sessions 4 and 5): the GEMV tests, the decode benchmark (24 GiB plans, PDL on
# with a plain-launch A/B), and the llama.cpp decode peer in the same call (tg64, f16 and q8_0 KV at depths 0,
# 8K, 32K; q8_0 at 128K when the time allows). Every step has its own time cap inside the tool's 600 s.
#   MONORAIL_COMMIT=<sha> bash bench/calls/device_s4_final.sh
set -uo pipefail
start=$(date +%s)
left() { echo $(( 585 - ($(date +%s) - start) )); }
source bench/device_setup.sh
timeout 60 python3 -m pytest -q -p no:cacheprovider -rfE --timeout 60 tests/test_native_ops.py -k "qgemv" > $out/tests.log 2>&1
echo "qgemv tests rc=$? ($(left) s left)"; grep -E "^(FAILED|ERROR)|passed|failed" $out/tests.log | head -8
timeout 230 python3 bench/decode.py --out $out/decode-h200.json --quick > $out/decode.log 2>&1
echo "decode rc=$? ($(left) s left)"; grep -E "copy bandwidth|\"depth\"|without PDL|leave-one-out" $out/decode.log | head -16
if [[ -d .peer ]]; then
  timeout 110 bash .peer/llamacpp-peer.sh -fa on -p 0 -n 64 -d 0,8192,32768 -r 1 > "$out/llamacpp-f16.json" 2>> "$out/peer.log"
  echo "peer f16 rc=$? ($(left) s left)"
  timeout 90 bash .peer/llamacpp-peer.sh -fa on -p 0 -n 64 -d 0,8192,32768 -r 1 -ctk q8_0 -ctv q8_0 \
    > "$out/llamacpp-q8.json" 2>> "$out/peer.log"
  echo "peer q8_0 rc=$? ($(left) s left)"
  if [[ $(left) -gt 140 ]]; then
    timeout $(( $(left) - 15 )) bash .peer/llamacpp-peer.sh -fa on -p 0 -n 64 -d 131072 -r 1 -ctk q8_0 -ctv q8_0 \
      > "$out/llamacpp-q8-128k.json" 2>> "$out/peer.log"
    echo "peer q8_0 128K rc=$? ($(left) s left)"
    python3 - "$out" <<'PY'
import json, sys
out = sys.argv[1]
try:
    a = json.load(open(f"{out}/llamacpp-q8.json")); b = json.load(open(f"{out}/llamacpp-q8-128k.json"))
    json.dump(a + b, open(f"{out}/llamacpp-q8.json", "w"), indent=1)
except Exception as exc:
    print("128K peer not merged:", exc)
PY
  fi
  python3 bench/decode.py --out "$out/decode-h200.json" --fill-peers-only --llamacpp-f16 "$out/llamacpp-f16.json" \
    --llamacpp-q8 "$out/llamacpp-q8.json" --shared-peer .peer/llamacpp-h200.json | head -c 1500; echo
fi
echo "total $(( $(date +%s) - start )) s"
