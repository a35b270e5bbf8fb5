#!/usr/bin/env bash
# Written in session 40 for the next session's first call: the tensor-core GEMV of T = 2..16 is on by default since
# session 40 (its x loads after the PDL wait), and only part of the GPU suite has run with it (bench/NOTES.md, session
# 40, calls 2-4). This runs every GPU test module on the default route, then times whole steps of T = 1, 4, 16 and
# speculative decoding (oracle drafts at a set acceptance) on random 27B weights.
#   bash bench/calls/device_s41_call1.sh     (carry .whl; ~9-10 minutes: split it if the device's per-call limit bites)
set -uo pipefail
source bench/device_setup.sh
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1 | sed 's/NVIDIA //; s/ .*//' | tr 'A-Z' 'a-z')
timeout 330 python3 -m pytest -q -p no:cacheprovider -rfE --timeout 120 tests/test_native*.py \
  -k "not timing_probe" > "$out/tests.log" 2>&1
echo "tests rc=$? ($(( $(date +%s) - t0 )) s)"; grep -E "^(FAILED|ERROR)|passed|failed" "$out/tests.log" | tail -12
(cd bench && timeout 90 python3 step_widths.py --depths 0 --widths 1,4,16 --reps 5 \
  --out "$out/step-widths-$gpu.json") 2>&1 | tail -6
(cd bench && timeout 120 python3 spec_decode.py --drafts 1,3 --accept 0,0.6,0.8,1 \
  --out "$out/spec-decode-$gpu.json") 2>&1 | tail -10
echo "total: $(( $(date +%s) - t0 )) s"
