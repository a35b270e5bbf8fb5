#!/usr/bin/env bash
# Session 46, call 3, on the machine call 2 left warm (the module built there): speculative rounds with every draft
# rejected / kept (k = 1, 3) to refit engine/native_speculative.py's round_cost_steps under the new default, and whole
# steps of T = 1..16. Predictions (H100): k = 1 rejected 113.9 -> ~118 tok/s, k = 3 kept 384 -> ~400 (a 4-token
# verify step 8.63 -> 8.06 ms); T = 2 / 4 ~7.6 / 8.1 ms, T = 16 unchanged ~11.8.
#   MONORAIL_COMMIT=<sha> bash bench/calls/device_s46_call3.sh
set -uo pipefail
out=${OUT:-/tmp/out}; mkdir -p "$out"
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1 | sed 's/NVIDIA //; s/ .*//' | tr 'A-Z' 'a-z')
start=$(date +%s)
(cd bench && timeout 150 python3 spec_decode.py --drafts 1,3 --accept 0,1 --out "$out/spec-decode-$gpu-s46.json") 2>&1 \
  | tail -8
(cd bench && timeout 150 python3 step_widths.py --depths 0 --widths 1,2,3,4,6,8,16 --reps 5 \
  --out "$out/step-widths-$gpu-s46.json") 2>&1 | tail -8
echo "total $(( $(date +%s) - start )) s"
