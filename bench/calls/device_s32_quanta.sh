#!/usr/bin/env bash
# Written in session 32 for the next device session (not yet run): finish_wide's draw with narrow's score quanta
# (bench/patches/finish-wide-score-quanta.patch). narrow stores each wide candidate's float32 draw score, quantized
# to 19 bits, above its 45-bit mass; finish_wide takes the best quantum over the kept ids, then computes the Philox
# noise only for kept ids within score_window of it (bench/wide_select_emulation.py checks the window on the CPU),
# instead of for all ~37K kept ids on one SM (~40 % of finish's instructions in session 32's call 4).
#  1. each sampler kernel's duration under ncu, flat and broad rows, top-p 0.9; prediction (H200, session 32 call 4:
#     flat finish 132.5 us, narrow 33.1): flat finish 80-100 us, flat narrow +1-4 us, broad unchanged;
#  2. finish's warp states and SASS page;
#  3. sampler_time (prediction: flat top-p 0.9 178 -> 125-150 us a draw on the H200);
#  4. the sampler and token-loop tests (the whole sampler module among them).
# If they pass: commit the patch's change with the figures and delete the patch file; then run every GPU module
# (bash bench/calls/device_s31_tests.sh, ~7.5 min).
#   bash bench/calls/device_s32_quanta.sh     (carry .whl; ~5 minutes)
set -uo pipefail
git apply bench/patches/finish-wide-score-quanta.patch || { echo "PATCH DID NOT APPLY"; exit 1; }
exec bash bench/calls/device_s32_call3.sh "$@"
