#!/usr/bin/env bash
# Written in session 40 for the next session's first call, revised in session 41: the tensor-core GEMV of T = 2..16 is
# on by default since session 40 (its x loads after the PDL wait), and only part of the GPU suite has run with it
# (bench/NOTES.md, session 40, calls 2-4); session 41 added sampled speculative rounds (engine/native_speculative.py)
# and NativeEngine::sample's first_row. This runs every GPU test module on the default route, then, with the time
# left, times whole steps of T = 1, 4, 16 and speculative decoding (oracle drafts at a set acceptance) on random 27B
# weights (bench/calls/device_s41_call2.sh runs what is left of them).
#   [BUDGET=seconds] bash bench/calls/device_s41_call1.sh     (carry .whl)
set -uo pipefail
start=$(date +%s)
left() { echo $(( ${BUDGET:-580} - ($(date +%s) - start) )); }
source bench/device_setup.sh
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1 | sed 's/NVIDIA //; s/ .*//' | tr 'A-Z' 'a-z')
timeout $(( $(left) - 20 )) python3 -m pytest -q -p no:cacheprovider -rfE --timeout 120 tests/test_native*.py \
  -k "not timing_probe" > "$out/tests.log" 2>&1
echo "tests rc=$? ($(left) s left)"; grep -E "^(FAILED|ERROR)|passed|failed" "$out/tests.log" | tail -12
grep -E "sampled|k=[0-9]" "$out/tests.log" | head -8
if [[ $(left) -gt 100 ]]; then
  (cd bench && timeout $(( $(left) - 10 )) python3 step_widths.py --depths 0 --widths 1,4,16 --reps 5 \
    --out "$out/step-widths-$gpu.json") 2>&1 | tail -6
fi
echo "total: $(( $(date +%s) - start )) s"
