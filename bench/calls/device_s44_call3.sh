#!/usr/bin/env bash
# Session 44, call 3, for whichever card comes.
# - H200: the decode record at this commit with both llama.cpp peers (device_s41_h200.sh, within BUDGET).
# - otherwise (an H100): Nsight Compute on the tensor-core GEMV of 4 tokens, gate_up's shape (34816 x 5120, one wave)
#   and lm_head's (248320 x 5120, ~7 waves), beside the one-token kernel on gate_up (variant 37). Question: call 2's
#   trace streams lm_head at 2.1 TB/s at T = 4 with many waves (2.9 at T = 1), so the kernel's own throughput, not
#   the wave, bounds it; which unit: issue, a pipe (fp16, ALU, tensor), L1 wavefronts, or stalls on memory?
#   MONORAIL_COMMIT=<sha> [BUDGET=seconds] bash bench/calls/device_s44_call3.sh     (carry .whl and .peer)
set -uo pipefail
BUDGET=${BUDGET:-300}
source bench/device_card.sh
sections="--section SpeedOfLight --section Occupancy --section WarpStateStats --section ComputeWorkloadAnalysis \
  --section MemoryWorkloadAnalysis --section InstructionStats --section LaunchStats"
for spec in "34816 5120 0 4 mma" "248320 5120 0 4 mma" "34816 5120 37 1 qgemv"; do
  set -- $spec
  [[ $(left) -lt 40 ]] && break
  timeout $(( $(left) - 20 > 120 ? 120 : $(left) - 20 )) ncu --clock-control none -k regex:$5 --launch-skip 2 \
    --launch-count 1 $sections python3 bench/ncu_gemv.py $1 $2 $3 $4 > "$out/ncu-$1-T$4.txt" 2>&1
  echo "ncu $1 T=$4 rc=$? ($(left) s left)"
  grep -E "Duration|DRAM Throughput|Memory Throughput|Compute \(SM\)|Issue Slots Busy|Executed Ipc A|Achieved Occupancy|Registers Per|Warp Cycles Per Issued|One or More|No Eligible|L1/TEX Hit" "$out/ncu-$1-T$4.txt" | head -16
done
echo "total $(( $(date +%s) - start )) s"
