#!/usr/bin/env bash
# Session 23, call 5: DRAM bandwidth of a subset of the SMs (bench/sm_share_probe.cu: one 1024-thread block an SM,
# each streaming its own contiguous share; grids of 1..132 SMs). No engine build.
#   bash bench/calls/device_s23_call5.sh     (no carry; ~1 minute)
set -uo pipefail
out=${OUT:-/tmp/out}; mkdir -p "$out"
nvcc -O3 -arch=sm_90 -o /tmp/sm_share_probe bench/sm_share_probe.cu && /tmp/sm_share_probe | tee "$out/sm-share.txt"
