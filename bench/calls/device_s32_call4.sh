#!/usr/bin/env bash
# Session 32, call 4: finish_wide's select by linear buckets over the list's key range (2048 a pass; passes after
# the first histogram only the chosen bucket's ids) instead of 8-bit digits over every id each pass, and a warp's ids
# in one bucket added as one (warp reductions, no __match_any_sync). bench/wide_select_emulation.py checked the new
# select against the old and a direct answer on the CPU.
#  1. each sampler kernel's duration under ncu, flat and broad rows, top-p 0.9; prediction: flat finish 204 -> 90-130
#     us; broad finish (the sorted path, not finish_wide) unchanged at ~62;
#  2. finish's warp states and SASS-line samples;
#  3. sampler_time (prediction: flat top-p 0.9 241 -> 130-170 us a draw);
#  4. the sampler and token-loop tests (the whole sampler module among them).
#   bash bench/calls/device_s32_call4.sh     (carry .whl; ~5 minutes)
exec bash bench/calls/device_s32_call3.sh "$@"
