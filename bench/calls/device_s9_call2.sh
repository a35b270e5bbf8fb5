#!/usr/bin/env bash
# Session 9, call 2: the GEMV ablation, second round (scale layouts, x staged per block, block sizes).
#   bash bench/calls/device_s9_call2.sh
set -uo pipefail
out=${OUT:-/tmp/out}; mkdir -p "$out"
nvcc -O3 -std=c++17 -arch=sm_90 -Icsrc/cuda -o /tmp/ga bench/gemv_ablation.cu && timeout 150 /tmp/ga > $out/ablation.txt 2>&1
cat $out/ablation.txt
