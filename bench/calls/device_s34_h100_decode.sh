#!/usr/bin/env bash
# Session 34: the decode benchmark on an H100 (the device pool's usual card; the record is on an H200), int8 KV at
# depths 0 and 128K, with llama.cpp's q8_0-KV decode peer at depth 0 in the same call. Question: does the engine's
# fraction of the copy roofline rise on a card with less bandwidth, as a fixed cost per dependency (README "What
# limits it") predicts? Prediction: ~170 tok/s at depth 0 (session 28's token loop on an H100), 72-79 % of the
# roofline depending on the copy rate measured here, against 69.6 % on the H200.
#   bash bench/calls/device_s34_h100_decode.sh     (carry .whl and .peer; ~6 min with a fresh build)
set -uo pipefail
start=$(date +%s)
source bench/device_setup.sh
timeout 200 python3 bench/decode.py --out $out/decode-h100-s34.json --quick --kv int8 --depths 0,131072 \
  > $out/decode-h100-s34.log 2>&1
echo "decode rc=$? ($(( $(date +%s) - start )) s)"
grep -E "copy bandwidth|\"depth\"|tok/s|without PDL" $out/decode-h100-s34.log | head -12
if [[ -d .peer ]]; then
  timeout 150 bash .peer/llamacpp-peer.sh -fa on -p 0 -n 64 -d 0 -r 1 -ctk q8_0 -ctv q8_0 \
    > "$out/llamacpp-q8-h100-s34.json" 2> "$out/peer-h100-s34.log"
  echo "peer q8_0 rc=$? ($(( $(date +%s) - start )) s)"
  python3 bench/decode.py --out "$out/decode-h100-s34.json" --fill-peers-only --llamacpp-q8 "$out/llamacpp-q8-h100-s34.json" \
    | head -c 1200; echo
fi
echo "total $(( $(date +%s) - start )) s"
