#!/usr/bin/env bash
# Session 19, call 5: Nsight Compute on the routed attention split kernels at 128K (int4 on variant 4, int8 on 6):
# where the int4 kernel's 60.7 us a layer (2.35 TB/s, call 2) goes: stalls, issue slots, occupancy.
#   bash bench/calls/device_s19_call5.sh     (carry .whl; ~3 minutes)
set -uo pipefail
source bench/device_setup.sh
sections="--section SpeedOfLight --section Occupancy --section WarpStateStats --section SchedulerStats --section InstructionStats --section LaunchStats"
for kv_v in "2 4" "1 6"; do
  set -- $kv_v
  timeout 150 ncu --clock-control none -k regex:attn_split_v4 --launch-skip 2 --launch-count 1 $sections \
    python3 bench/ncu_attn.py $1 $2 > $out/ncu-attn-kv$1-v$2.txt 2>&1
  echo "kv $1 variant $2 rc=$?"
  grep -E "Duration|DRAM Throughput|Achieved Occupancy|Registers Per|Warp Cycles Per Issued|Issue Slots Busy|Issued Ipc|No Eligible|Executed Instructions  |Stall" $out/ncu-attn-kv$1-v$2.txt | head -30
done
echo "total $(( $(date +%s) - t0 )) s"
