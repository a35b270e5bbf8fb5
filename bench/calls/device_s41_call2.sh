#!/usr/bin/env bash
# Session 41, second call (after device_s41_call1.sh on the same machine): speculative decoding on random 27B weights
# with oracle drafts at a set acceptance (bench/spec_decode.py), k = 1 and 3, and step widths where call 1 had no time.
# Prediction (session 39's H100 figures with the then-wrong route of the same cost): k = 3 ~210 tok/s at 80 % per-draft
# acceptance, ~280 at 100 %, against ~170 plain.
#   [BUDGET=seconds] bash bench/calls/device_s41_call2.sh     (carry .whl)
set -uo pipefail
start=$(date +%s)
left() { echo $(( ${BUDGET:-580} - ($(date +%s) - start) )); }
source bench/device_setup.sh
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1 | sed 's/NVIDIA //; s/ .*//' | tr 'A-Z' 'a-z')
(cd bench && timeout 240 python3 spec_decode.py --drafts 1,3 --accept 0,0.6,0.8,1 \
  --out "$out/spec-decode-$gpu.json") 2>&1 | tail -12
if [[ ${WIDTHS:-0} == 1 && $(left) -gt 100 ]]; then
  (cd bench && timeout $(( $(left) - 10 )) python3 step_widths.py --depths 0 --widths 1,4,16 --reps 5 \
    --out "$out/step-widths-$gpu.json") 2>&1 | tail -6
fi
echo "total: $(( $(date +%s) - start )) s"
