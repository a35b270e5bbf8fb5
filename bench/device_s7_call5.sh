#!/usr/bin/env bash
# Session 7, call 5: does keeping DRAM busy across a phase boundary pay? One kernel for all layers, grid barriers,
# each warp L2-prefetching its next PF batches of the next phase before it arrives at a barrier (boundary_probe.cu
# --prefetch-only; standalone, no engine build).
set -uo pipefail
out=${OUT:-/tmp/out}; mkdir -p "$out"
nvcc -O3 -std=c++17 -arch=sm_90 -o /tmp/bp bench/boundary_probe.cu && timeout 150 /tmp/bp --prefetch-only | tee $out/boundary5.txt
