#!/usr/bin/env bash
# Session 41, second call (after device_s41_call1.sh on the same machine): speculative decoding on random 27B weights
# with oracle drafts at a set acceptance (bench/spec_decode.py), k = 1 and 3; then where a verify-sized step's time
# goes: the kernel timeline of steps of T = 4 tokens (PDL on: increments per role; PDL off: each kernel's own time)
# beside T = 1 (session 39: 9.4 ms for T = 4 against 5.9 for T = 1 on an H100; a step of T tokens streams the weights
# once, so most of the 3.5 ms is not bytes); step widths where call 1 had no time (WIDTHS=1).
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
for spec in "4 1" "4 0" "1 1"; do
  set -- $spec
  [[ $(left) -gt 80 ]] || break
  (cd bench && timeout 75 python3 step_timeline.py --tokens $1 --pdl $2 --steps 4 \
    --json "$out/timeline-T$1-pdl$2-$gpu.json") > "$out/timeline-T$1-pdl$2-$gpu.txt" 2>&1
  echo "timeline T=$1 pdl=$2 rc=$?"; grep -A 30 "increments" "$out/timeline-T$1-pdl$2-$gpu.txt" | head -24
done
if [[ ${WIDTHS:-0} == 1 && $(left) -gt 100 ]]; then
  (cd bench && timeout $(( $(left) - 10 )) python3 step_widths.py --depths 0 --widths 1,4,16 --reps 5 \
    --out "$out/step-widths-$gpu.json") 2>&1 | tail -6
fi
echo "total: $(( $(date +%s) - start )) s"
