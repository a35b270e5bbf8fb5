#!/usr/bin/env bash
# Session 43, call 1, for whichever card comes:
#   H200: the decode benchmark of record with both llama.cpp peers, speculative rounds and step widths
#         (bench/calls/device_s41_h200.sh) at the tensor-core GEMV's 4-span default. Prediction: depth 0 int8 ~74-77 %
#         of the copy roofline (the H100 gives 78.2 % in decode-h100-s42.json; the session-26 H200 record is 69.8 %).
#   H100: the pipelined tensor-core GEMV's op tests and shape sweep (bench/calls/device_s43_pipe.sh).
#   MONORAIL_COMMIT=<sha> [BUDGET=seconds] bash bench/calls/device_s43_call1.sh     (carry .whl and .peer)
set -uo pipefail
if nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then
  exec bash bench/calls/device_s41_h200.sh
fi
exec bash bench/calls/device_s43_pipe.sh
