#!/usr/bin/env bash
# Session 44, call 4, with the device time left (~400 s): the decode record on an H200 only (bench/decode.py --quick
# into decode-h200.json, then llama.cpp's f16 decode peer if time is left; the shared peer file's figures fill the
# rest); on any other card it exits at once (the H100's record at these T = 1 kernels is decode-h100-s42.json).
# Prediction (H200, int8): depth 0 ~72-75 % of the copy roofline, 128K ~76-79 %.
#   MONORAIL_COMMIT=<sha> [BUDGET=seconds] bash bench/calls/device_s44_call4.sh     (carry .whl and .peer)
set -uo pipefail
name=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
echo "gpu: $name"
[[ $name == *H200* ]] || { echo "not an H200: nothing run"; exit 0; }
start=$(date +%s)
left() { echo $(( ${BUDGET:-380} - ($(date +%s) - start) )); }
source bench/device_setup.sh
timeout $(( $(left) - 20 )) python3 bench/decode.py --out $out/decode-h200.json --quick > $out/decode.log 2>&1
echo "decode rc=$? ($(left) s left)"; grep -E "copy bandwidth|\"depth\"|without PDL|leave-one-out" $out/decode.log | head -16
if [[ -d .peer && $(left) -gt 100 ]]; then
  timeout $(( $(left) - 15 )) bash .peer/llamacpp-peer.sh -fa on -p 0 -n 64 -d 0,8192 -r 1 > "$out/llamacpp-f16.json" \
    2>> "$out/peer.log"
  echo "peer f16 rc=$? ($(left) s left)"
  python3 bench/decode.py --out "$out/decode-h200.json" --fill-peers-only --llamacpp-f16 "$out/llamacpp-f16.json" \
    --shared-peer .peer/llamacpp-h200.json | head -c 1500; echo
fi
echo "total $(( $(date +%s) - start )) s"
