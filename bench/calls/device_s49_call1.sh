#!/usr/bin/env bash
# Session 49 (written for the next session with a device; it replaces session 47's device_s47_call2.sh, which never
# got a machine and is removed): the unchecked passes switched on for the whole process
# (MONORAIL_QGEMV_MMA_UNCHECKED=1), since session 49 made the checked passes the default until a GPU has run the
# unchecked ones. On an H200 the decode record with both llama.cpp peers (bench/device_card.sh execs
# device_s41_h200.sh before the export below, so the record runs the defaults). On an H100:
# 1. the tensor-core GEMV's whole op-test module under unchecked passes: every fp64 check then runs them, and
#    test_unchecked_passes_change_no_value / test_the_warps_a_block_change_no_value compare bit for bit;
# 2. the A/B sweep, T = 2, 4, 9, 16, unchecked (no flag) / checked (c) / unchecked with 1 and 2 warps a block, twice.
#    Predictions (H100, session 46: T = 4 8.17, T = 16 11.96 ms): unchecked T = 4 ~7.7 ms, T = 16 ~11.3; one-warp
#    blocks a further ~0.2 ms at T = 4;
# 3. Nsight Compute on gate_up's 4-token kernel (unchecked, 4 and 1 warps a block) and a 4-token step's trace;
# 4. the engine-level GPU tests (tokenizer-dependent ones first) under unchecked passes.
# If 1 and 4 pass and 2 wins: set g_mma_unchecked = true (qgemv_mma.cu), refit round_cost_steps (device_s46_call3.sh).
#   MONORAIL_COMMIT=<sha> [BUDGET=seconds] bash bench/calls/device_s49_call1.sh     (carry .whl and .peer)
# A warm follow-up must `source bench/device_setup.sh` first (the carried wheels on PYTHONPATH; the build a no-op).
set -uo pipefail
BUDGET=${BUDGET:-540}
source bench/device_card.sh
export MONORAIL_QGEMV_MMA_UNCHECKED=1
gpu_tests tests-mma-op-unchecked 200 --timeout 90 tests/test_native_qgemv_mma.py
(cd bench && timeout 90 python3 mma_shape_sweep.py --shapes "0,0;0,0,c;0,0,1;0,0,2;0,0;0,0,c;0,0,1" \
  --widths 2,4,9,16 --reps 5 --out "$out/mma-unchecked-sweep-$gpu.json") 2>&1 | tail -9
for w in 4 1; do
  MONORAIL_QGEMV_MMA_BLOCK_WARPS=$w timeout 60 ncu --clock-control none -k regex:qgemv --launch-skip 2 --launch-count 1 \
    --section SpeedOfLight --section Occupancy --section WarpStateStats --section LaunchStats --section SchedulerStats \
    python3 bench/ncu_gemv.py 34816 5120 0 4 > "$out/ncu-34816-T4-unchecked-block-warps$w-$gpu.txt" 2>&1
  echo "== $w warps a block"; grep -E "Duration|DRAM Throughput|Achieved Occupancy|Issue Slots Busy|Grid Size|Block Size" \
    "$out/ncu-34816-T4-unchecked-block-warps$w-$gpu.txt"
done
timeout 90 python3 bench/step_timeline.py --tokens 4 --pdl 1 --steps 5 --json "$out/timeline-T4-pdl1-unchecked-$gpu.json" \
  > "$out/timeline-T4-pdl1-unchecked-$gpu.txt" 2>&1; tail -25 "$out/timeline-T4-pdl1-unchecked-$gpu.txt"
gpu_tests tests-tokenizer-engine-unchecked 200 --timeout 150 tests/test_native_worker.py tests/test_native_engine.py \
  tests/test_native_saved_states.py tests/test_native_prefix_reuse.py tests/test_native_artifact.py \
  tests/test_native_mtp.py -k "not timing_probe"
if [[ $(left) -gt 60 ]]; then
  gpu_tests tests-engine-rest-unchecked $(( $(left) - 15 )) --timeout 150 tests/test_native_verify.py \
    tests/test_native_speculative_loop.py tests/test_native_model.py tests/test_native_prefill.py -k "not timing_probe"
fi
echo "total $(( $(date +%s) - start )) s"
