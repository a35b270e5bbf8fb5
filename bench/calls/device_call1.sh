#!/usr/bin/env bash
# Session 2, call 1: retest commits made after the last device run, end-to-end native Engine, ncu on the GEMV.
set -uo pipefail
out=${OUT:-/tmp/out}; mkdir -p $out
bash bench/device_run.sh tests 2>&1 | tail -25
echo "=== e2e"; timeout 120 python3 bench/native_e2e.py 2>&1 | tail -12
echo "=== chat cli"; timeout 60 monorail chat --backend native --prompt "hello there" --temperature 0 2>&1 | tail -5 || \
  timeout 60 python3 -m engine.cli chat --backend native --prompt "hello there" --temperature 0 2>&1 | tail -5
echo "=== gemv probe"; python3 bench/gemv_probe.py
echo "=== ncu"; timeout 200 ncu --clock-control none -k regex:qgemv --launch-skip 3 --launch-count 1 \
  --section SpeedOfLight --section MemoryWorkloadAnalysis --section WarpStateStats --section Occupancy \
  --section LaunchStats --section SchedulerStats --section SourceCounters python3 bench/gemv_probe.py > $out/ncu_gemv.txt 2>&1
echo "ncu rc=$?"; grep -E "Duration|DRAM Throughput|Memory Throughput|Achieved Occupancy|Theoretical Occupancy|Registers Per|Stall|No Eligible|Issued Warp|L1/TEX Hit|L2 Hit|Block Limit|Waves" $out/ncu_gemv.txt | head -60
