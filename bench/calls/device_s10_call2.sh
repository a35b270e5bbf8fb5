#!/usr/bin/env bash
# Session 10, call 2: the inputs of down, gdn_out and the attention output in the lanes layout (csrc/cuda/ops.h GEMV_X_LANES, common.cuh lanes_pos): variant 4
# reads x with each 16-byte load of the warp one contiguous 512 bytes instead of 16 lines, and gate_up's SwiGLU
# epilogue, the GDN step and the attention combine write them so. Its oracle tests (op level and the engine's bit-for-bit step), the ablation's isolated
# numbers, whole steps with it on and off; then the attention split variant 6 for int8 KV on whole steps at 8K / 32K /
# 128K (call 1: 6.085 against 6.243 ms at 128K), now the route for int8 (-1 = route).
#   bash bench/calls/device_s10_call2.sh     (carry .whl)
set -uo pipefail
source bench/device_setup.sh
timeout 220 python3 -m pytest -q -p no:cacheprovider -rfE --timeout 120 tests/test_native_ops.py \
  -k "lanes or x_layout or swiglu or normed or gdn_conv or (launch_variants and not epilogues) or teacher_forced or variant_bounds" \
  tests/test_native_model.py tests/test_native_attn_decode.py \
  > $out/tests.log 2>&1; echo "tests rc=$?"; grep -E "^(FAILED|ERROR)|passed|failed" $out/tests.log | head -12
nvcc -O3 -std=c++17 -arch=sm_90 -Icsrc/cuda -o /tmp/ga bench/gemv_ablation.cu && timeout 60 /tmp/ga > $out/ablation.txt 2>&1
grep -E "^(down|gdn_out)|v4|lanes|bare: |flat" $out/ablation.txt | head -16
echo "ablation done: $(( $(date +%s) - t0 )) s"
timeout 120 python3 bench/step_probe.py --kv int8 --depths 0,131072 --lanes 1,0,1 2>&1 | grep -E "step" | tee $out/steps.txt
timeout 150 python3 bench/step_probe.py --kv int8 --depths 8192,32768,131072 --attn-variants 4,6,4,6 --gemv-variants 0 2>&1 \
  | grep -E "step" | tee -a $out/steps.txt
echo "total $(( $(date +%s) - t0 )) s"
