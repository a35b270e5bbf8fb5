#!/usr/bin/env bash
# Session 8, call 1: boundary_probe --anatomy (the launch floor; per-block globaltimer stamps of every phase, with all
# and with half of the block slots per SM), then a CUPTI trace of the engine's step without PDL (per-kernel busy time).
set -uo pipefail
out=${OUT:-/tmp/out}; mkdir -p "$out"
nvcc -O3 -std=c++17 -arch=sm_90 -o /tmp/bp bench/boundary_probe.cu && timeout 120 /tmp/bp --anatomy > $out/anatomy.txt 2>&1; cat $out/anatomy.txt
source bench/device_setup.sh
timeout 200 python3 bench/step_timeline.py --kv int8 --depth 0 --steps 6 --json $out/timeline-pdl0.json 2>&1 | tail -40
echo "total $(( $(date +%s) - t0 )) s"
