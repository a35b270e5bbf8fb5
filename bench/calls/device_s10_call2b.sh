#!/usr/bin/env bash
# Session 10, call 2 (devices were scarce, so one call does the work of two): device_s10_call2.sh's checks of the
# lanes layout and the int8 attention route (oracle tests, the ablation, whole steps A/B), then the decode benchmark
# at this commit and llama.cpp's decode peer in the time left.
#   MONORAIL_COMMIT=<sha> [BUDGET=seconds] bash bench/calls/device_s10_call2b.sh     (carry .whl and .peer)
set -uo pipefail
start=$(date +%s)
left() { echo $(( ${BUDGET:-585} - ($(date +%s) - start) )); }
bash bench/calls/device_s10_call2.sh
out=${OUT:-/tmp/out}
echo "checks done ($(left) s left)"
timeout 230 python3 bench/decode.py --out $out/decode-h200.json --quick > $out/decode.log 2>&1
echo "decode rc=$? ($(left) s left)"; grep -E "copy bandwidth|\"depth\"|without PDL|leave-one-out|attention variant" $out/decode.log | head -16
if [[ -d .peer && $(left) -gt 90 ]]; then
  timeout $(( $(left) - 10 )) bash .peer/llamacpp-peer.sh -fa on -p 0 -n 64 -d 0,8192,32768 -r 1 -ctk q8_0 -ctv q8_0 \
    > "$out/llamacpp-q8.json" 2>> "$out/peer.log"
  echo "peer q8_0 rc=$? ($(left) s left)"
fi
echo "total $(( $(date +%s) - start )) s"
