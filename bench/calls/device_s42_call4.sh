#!/usr/bin/env bash
# Session 42, call 4, for whichever card comes (a call for an H200 may run on an H100):
#   H200: the decode benchmark of record with both llama.cpp peers, speculative rounds and step widths
#         (bench/calls/device_s41_h200.sh) at this commit, the tensor-core GEMV at its new 4-span default;
#   H100: the trace of a 4-token step under the 4-span default (bench/step_timeline.py --tokens 4), beside session 41's
#         at 2 spans (bench/results/timeline-T4-pdl1-h100-s41-call3.txt). Prediction: gate_up ~45 us a layer (57.4 at
#         2 spans), the reduce kernels unchanged at ~0.5 ms, the step ~8.7 ms.
#   MONORAIL_COMMIT=<sha> [BUDGET=seconds] bash bench/calls/device_s42_call4.sh     (carry .whl and .peer)
set -uo pipefail
if nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then
  exec bash bench/calls/device_s41_h200.sh
fi
source bench/device_setup.sh
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1 | sed 's/NVIDIA //; s/ .*//' | tr 'A-Z' 'a-z')
timeout 200 python3 bench/step_timeline.py --tokens 4 --pdl 1 --steps 5 --json "$out/timeline-T4-pdl1-$gpu.json" > "$out/timeline-T4-pdl1-$gpu.txt" 2>&1
tail -45 "$out/timeline-T4-pdl1-$gpu.txt"
