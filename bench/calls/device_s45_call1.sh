#!/usr/bin/env bash
# For session 45, whichever card comes.
# - H200: the decode record at this commit with both llama.cpp peers (device_s41_h200.sh; decode-h200.json is still
#   session 26's).
# - otherwise (an H100): where the 4-token tensor-core GEMV's warps wait. Session 44's Nsight Compute had them ~70 % of
#   their cycles on L1TEX (bench/results/ncu-34816-T4-h100-s44-call3.txt), yet more warps, a second register set,
#   longer row runs and 6 spans a pass all made it slower; the source page names the instructions they wait at (the
#   weight loads' first use, the x loads', the 2-byte scale loads', or the mma chain). ncu's warp-state sampler on
#   gate_up's shape at T = 4, the SASS rows and (with nvdisasm) the CUDA lines of qgemv_mma.cuh.
#   MONORAIL_COMMIT=<sha> [BUDGET=seconds] bash bench/calls/device_s45_call1.sh     (carry .whl and .peer)
set -uo pipefail
BUDGET=${BUDGET:-300}
source bench/device_card.sh
timeout 120 ncu --clock-control none -k regex:qgemv_mma -s 2 -c 1 --section SourceCounters --section WarpStateStats \
  --section LaunchStats --import-source yes -o $out/mma-t4 python3 bench/ncu_gemv.py 34816 5120 0 4 \
  > $out/ncu-mma.log 2>&1
echo "ncu source rc=$? ($(left) s left)"
ncu --import $out/mma-t4.ncu-rep --page source --csv --print-source sass > $out/mma-t4-sass.csv 2>&1
python3 bench/ncu_source_top.py $out/mma-t4-sass.csv --top 30 | tee $out/mma-t4-top.txt
python3 bench/ncu_source_top.py $out/mma-t4-sass.csv --lines csrc/cuda/qgemv.cu --kernel qgemv_mma_kernelILi4ELi1ELi4EE --top 25 \
  | tee $out/mma-t4-lines.txt
ncu --import $out/mma-t4.ncu-rep --page details > $out/mma-t4-details.txt 2>&1
grep -E "Warp Cycles|Stall|Registers Per" $out/mma-t4-details.txt | head -12
rm -f $out/mma-t4.ncu-rep $out/build.log
echo "total $(( $(date +%s) - start )) s"
