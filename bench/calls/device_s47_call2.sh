#!/usr/bin/env bash
# Session 47, written after session 47's CPU work (bench/NOTES.md "Written while loans were paused"). On an H200: the
# decode record with both llama.cpp peers (bench/device_card.sh; the one-token kernels did not change). Otherwise (an
# H100), with the tensor-core GEMV changed twice since its last GPU run:
# 1. its whole op-test module: session 46's warps a block (a prologue change) and session 47's unchecked passes (every
#    tensor-core kernel's loop) have not run on a GPU; the module holds both bit-equality tests
#    (test_the_warps_a_block_change_no_value, test_unchecked_passes_change_no_value) and the fp64 checks;
# 2. whole steps of T = 2, 4, 9, 16 with unchecked passes on / off (c) and 4 / 1 / 2 warps a block, twice.
#    Predictions (H100, session 46: T = 4 8.17, T = 16 11.96 ms): unchecked passes (a 4-token pass 720 -> 577
#    instructions, sass-loops-mma-s47.txt; the 16-row kernel is issue-bound at T = 4) T = 4 ~7.7 ms, T = 16 ~11.3;
#    one-warp blocks a further ~0.2 ms at T = 4;
# 3. Nsight Compute on gate_up's 4-token kernel with 4 and 1 warps a block, and the trace of a 4-token step;
# 4. the GPU tests that need the carried tokenizer wheel and did not start in session 46's whole run, then the rest of
#    the engine-level modules with the time left.
#   MONORAIL_COMMIT=<sha> [BUDGET=seconds] bash bench/calls/device_s47_call2.sh     (carry .whl and .peer)
# A warm follow-up must `source bench/device_setup.sh` first (the carried wheels on PYTHONPATH; the build a no-op).
set -uo pipefail
BUDGET=${BUDGET:-540}
source bench/device_card.sh
gpu_tests tests-mma-op 200 --timeout 90 tests/test_native_qgemv_mma.py
(cd bench && timeout 90 python3 mma_shape_sweep.py --shapes "0,0;0,0,c;0,0,1;0,0,2;0,0;0,0,c;0,0,1" \
  --widths 2,4,9,16 --reps 5 --out "$out/mma-unchecked-sweep-$gpu.json") 2>&1 | tail -9
for w in 4 1; do
  MONORAIL_QGEMV_MMA_BLOCK_WARPS=$w timeout 60 ncu --clock-control none -k regex:qgemv --launch-skip 2 --launch-count 1 \
    --section SpeedOfLight --section Occupancy --section WarpStateStats --section LaunchStats --section SchedulerStats \
    python3 bench/ncu_gemv.py 34816 5120 0 4 > "$out/ncu-34816-T4-unchecked-block-warps$w-$gpu.txt" 2>&1
  echo "== $w warps a block"; grep -E "Duration|DRAM Throughput|Achieved Occupancy|Issue Slots Busy|Grid Size|Block Size" \
    "$out/ncu-34816-T4-unchecked-block-warps$w-$gpu.txt"
done
timeout 90 python3 bench/step_timeline.py --tokens 4 --pdl 1 --steps 5 --json "$out/timeline-T4-pdl1-$gpu.json" \
  > "$out/timeline-T4-pdl1-$gpu.txt" 2>&1; tail -25 "$out/timeline-T4-pdl1-$gpu.txt"
gpu_tests tests-tokenizer-engine 200 --timeout 150 tests/test_native_worker.py tests/test_native_engine.py \
  tests/test_native_saved_states.py tests/test_native_prefix_reuse.py tests/test_native_artifact.py \
  tests/test_native_mtp.py -k "not timing_probe"
if [[ $(left) -gt 60 ]]; then
  gpu_tests tests-engine-rest $(( $(left) - 15 )) --timeout 150 tests/test_native_verify.py \
    tests/test_native_speculative_loop.py tests/test_native_model.py tests/test_native_prefill.py -k "not timing_probe"
fi
echo "total $(( $(date +%s) - start )) s"
