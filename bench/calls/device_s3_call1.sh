#!/usr/bin/env bash
# Session 3, call 1: the step-inputs race fix (commit 4f7989d) on the GPU with every GPU test, then
# hardware counters for the two kernels the helpers will work on: the T = 1 GEMV (variants 4 and 6,
# the routed ones on down / gate_up) and the int8 attention prefill kernel.
set -uo pipefail
source bench/device_setup.sh
timeout 300 python3 -m pytest -q -p no:cacheprovider -s -rfE --timeout 120 tests/test_native_prefill.py \
  tests/test_native_engine.py tests/test_native_artifact.py tests/test_native_attn_prefill.py tests/test_native_gemm.py \
  tests/test_native_gdn_chunk.py tests/test_native_attn_decode.py tests/test_native_ops.py tests/test_native_model.py \
  tests/test_native_lanes.py tests/test_plan.py > $out/tests.log 2>&1
echo "tests rc=$?"
grep -E "^(FAILED|ERROR)|passed|failed" $out/tests.log | head -30
grep -E "attn_prefill (int8|bf16)|implied" $out/tests.log | head -10
sec="--section SpeedOfLight --section MemoryWorkloadAnalysis --section WarpStateStats --section Occupancy --section LaunchStats --section SchedulerStats"
timeout 120 ncu --clock-control none -k regex:qgemv --launch-skip 12 --launch-count 4 $sec \
  python3 bench/gemv_probe.py --variants 6 --reps 5 > $out/ncu_gemv6.txt 2>&1; echo "ncu gemv6 rc=$?"
timeout 120 ncu --clock-control none -k regex:qgemv --launch-skip 12 --launch-count 4 $sec \
  python3 bench/gemv_probe.py --variants 4 --reps 5 > $out/ncu_gemv4.txt 2>&1; echo "ncu gemv4 rc=$?"
timeout 150 ncu --clock-control none -k regex:attn_prefill_kernel --launch-skip 1 --launch-count 2 $sec \
  python3 -m pytest -q -p no:cacheprovider -s tests/test_native_attn_prefill.py -k throughput > $out/ncu_attn.txt 2>&1
echo "ncu attn rc=$?"
timeout 60 ncu --clock-control none -k regex:gdn_kernel --launch-skip 50 --launch-count 1 $sec \
  python3 bench/gdn_probe.py > $out/ncu_gdn.txt 2>&1; echo "ncu gdn rc=$?"
timeout 200 python3 bench/prefill.py --out $out/prefill-probe.json --prompts 8192,32768 --overlap-probe --no-share \
  --chunks-probe 1024,2048 > $out/prefill-probe.log 2>&1; echo "prefill probe rc=$?"
grep -E "chunk|overlap|GEMMs|tok_s" $out/prefill-probe.log | head -12
grep -E "Duration|DRAM Throughput|Memory Throughput|Compute \(SM\)|Registers Per|Achieved Occupancy|Theoretical Occ|Stall|Eligible|Issued Warp" $out/ncu_gemv6.txt | head -40
