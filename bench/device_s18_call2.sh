#!/usr/bin/env bash
# Session 18 calls 2-8: bench/stream_probe.cu alone (calls 2-6 and 8 ran successive edits of it: x staged free of bank
# conflicts, whole stages a consumer warp, the no-fold bound, 2 / 4 producer warps, bulk copies, interleaved tiles).
#   bash bench/device_s18_call2.sh     (no carry; ~10 s on a warm machine)
out=${OUT:-/tmp/out}; mkdir -p "$out"
nvcc -std=c++17 -O3 -arch=sm_90 -o /tmp/sp bench/stream_probe.cu -Ibench && timeout 120 /tmp/sp 16 | tee $out/stream-probe.txt
