#!/usr/bin/env bash
# Session 19, call 3: the decode benchmark of the configuration users run for the longest sessions: the converter's
# recipe (q4-27b) with int4 KV at 0, 128K and 256K (262,080 tokens: the largest depth a 262,144-token plan takes
# with the probe's 64 spare), in the 24 GiB budget -> decode-h200-q4-27b-int4.json; then llama.cpp's decode with q4_0
# KV at 0 and 128K as its peer, filled into the same file.
#   MONORAIL_COMMIT=<sha> [BUDGET=seconds] bash bench/calls/device_s19_call3.sh     (carry .whl and .peer)
set -uo pipefail
start=$(date +%s)
left() { echo $(( ${BUDGET:-480} - ($(date +%s) - start) )); }
source bench/device_setup.sh
f=$out/decode-h200-q4-27b-int4.json
timeout 240 python3 bench/decode.py --recipe q4-27b --kv int4 --depths 0,131072,262080 --quick --out $f \
  > $out/decode-q4-27b-int4.log 2>&1
echo "decode rc=$? ($(left) s left)"
grep -E "copy bandwidth|attention variant times|\"depth\"|without PDL" $out/decode-q4-27b-int4.log | head -12
if [[ -d .peer && $(left) -gt 90 ]]; then
  timeout $(( $(left) - 10 )) bash .peer/llamacpp-peer.sh -fa on -p 0 -n 64 -d 0,131072 -r 1 -ctk q4_0 -ctv q4_0 \
    > "$out/llamacpp-q4.json" 2>> "$out/peer.log"
  echo "peer q4_0 rc=$? ($(left) s left)"; tail -3 $out/peer.log
  python3 bench/decode.py --fill-peers-only --out $f --llamacpp-q4 $out/llamacpp-q4.json | head -3
fi
echo "total $(( $(date +%s) - start )) s"
