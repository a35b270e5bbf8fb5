#!/usr/bin/env bash
# Session 23, final call: the decode benchmark of record at this commit (bench/results/decode-h200.json; the kernels and
# route are session 14's, a93a5b1: only decode.py's reporting changed since, and this session's experiments were
# removed), with both llama.cpp decode peers (q8_0 and f16 KV, depths 0 / 8K / 32K) in the same call.
# The peers' figures were filled into the file afterwards with decode.py --fill-peers-only (bench/NOTES.md, session 23
# final call). A later final call should source bench/device_decode_peers.sh and run decode_and_peers, which does the
# same in one call, fill included (this script is kept as the command that ran).
#   MONORAIL_COMMIT=<sha> [BUDGET=seconds] bash bench/calls/device_s23_final.sh     (carry .whl and .peer)
set -uo pipefail
start=$(date +%s)
left() { echo $(( ${BUDGET:-540} - ($(date +%s) - start) )); }
source bench/device_setup.sh
timeout 240 python3 bench/decode.py --out $out/decode-h200.json --quick > $out/decode.log 2>&1
echo "decode rc=$? ($(left) s left)"
grep -E "copy bandwidth|\"depth\"|without PDL|attention variant" $out/decode.log | head -16
if [[ -d .peer && $(left) -gt 100 ]]; then
  timeout 90 bash .peer/llamacpp-peer.sh -fa on -p 0 -n 64 -d 0,8192,32768 -r 1 -ctk q8_0 -ctv q8_0 \
    > "$out/llamacpp-q8.json" 2>> "$out/peer.log"
  echo "peer q8_0 rc=$? ($(left) s left)"
fi
if [[ -d .peer && $(left) -gt 45 ]]; then
  timeout $(( $(left) - 5 )) bash .peer/llamacpp-peer.sh -fa on -p 0 -n 64 -d 0,8192,32768 -r 1 \
    > "$out/llamacpp-f16.json" 2>> "$out/peer.log"
  echo "peer f16 rc=$? ($(left) s left)"
fi
echo "total $(( $(date +%s) - start )) s"
