#!/usr/bin/env bash
# Session 18 call 2: bench/stream_probe.cu with x staged free of bank conflicts (call 1 was compute-bound everywhere).
#   bash bench/device_s18_call2.sh     (no carry; ~1 minute)
out=${OUT:-/tmp/out}; mkdir -p "$out"
nvcc -std=c++17 -O3 -arch=sm_90 -o /tmp/sp bench/stream_probe.cu -Ibench && timeout 120 /tmp/sp 16 | tee $out/stream-probe.txt
