#!/usr/bin/env bash
# Session 18 calls 2-11: bench/stream_probe.cu alone (calls 2-6, 8 and 10 ran successive edits of it: x staged free of bank
# conflicts, whole stages a consumer warp, the no-fold bound, 2 / 4 producer warps, bulk copies, interleaved tiles,
# two blocks an SM).
#   bash bench/calls/device_s18_call2.sh     (no carry; ~10 s on a warm machine)
out=${OUT:-/tmp/out}; mkdir -p "$out"
nvcc -std=c++17 -O3 -arch=sm_90 -o /tmp/sp bench/stream_probe.cu -Ibench && timeout 120 /tmp/sp 16 | tee $out/stream-probe.txt
