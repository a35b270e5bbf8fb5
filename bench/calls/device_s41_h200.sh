#!/usr/bin/env bash
# Session 41, for an H200: the decode benchmark of record at this commit with both llama.cpp decode peers in the same
# call (bench/device_decode_peers.sh, as device_s25_final.sh), then, with the time left, whole steps of T = 1, 4, 16
# (the tensor-core GEMV of T > 1 is the default since session 40) and speculative rounds at set acceptance rates.
# Prediction: depth 0 int8 ~70-73 % of the copy roofline (no T = 1 kernel changed since the session-26 record's
# 69.8 %, the H100's fixed ~1.2 ms a step since then was measured on the newer token loop); 128K int8 ~73-75 %.
#   MONORAIL_COMMIT=<sha> [BUDGET=seconds] bash bench/calls/device_s41_h200.sh     (carry .whl and .peer)
set -uo pipefail
start=$(date +%s)
left() { echo $(( ${BUDGET:-570} - ($(date +%s) - start) )); }
source bench/device_setup.sh
source bench/device_decode_peers.sh
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1 | sed 's/NVIDIA //; s/ .*//' | tr 'A-Z' 'a-z')
decode_and_peers 120
if [[ $(left) -gt 70 ]]; then
  (cd bench && timeout $(( $(left) - 60 > 90 ? 90 : $(left) - 60 )) python3 spec_decode.py --drafts 1,3 \
    --accept 0,0.6,0.8,1 --out "$out/spec-decode-$gpu.json") 2>&1 | tail -10
fi
if [[ $(left) -gt 40 ]]; then
  (cd bench && timeout $(( $(left) - 10 )) python3 step_widths.py --depths 0 --widths 1,4,16 --reps 5 \
    --out "$out/step-widths-$gpu.json") 2>&1 | tail -6
fi
echo "total $(( $(date +%s) - start )) s"
