#!/usr/bin/env bash
# Session 41, call 4: the tensor-core GEMV's shape of work (set_qgemv_mma_shape). Call 3's timeline of a 4-token step
# (bench/results/timeline-T4-pdl1-h100-s41-call3.txt) put its loss on the GEMV's stream rate: gate_up 57 us against
# 35 at T = 1, each of its 1,088 warps walking all of K with 4 KB in flight (8 warps an SM), and on 192 split-K reduce
# kernels. Prediction: 4 spans a pass (8 KB in flight a warp) brings gate_up to ~40 us and a 4-token step from 9.2 to
# ~8.2 ms; more warps an SM (K split further) helps gate_up less (a reduce kernel more) and the 5120-row shapes little;
# the split-K sums in the kernel (",f": set_qgemv_mma_fused_reduce) save most of the 0.52 ms the reduce kernels take.
# This sweeps the shapes on whole steps, then runs the op, verify and MTP tests and spec_decode under the best.
# Not run in session 41 (its device time was spent on refused starts): the next session's first call. Its MTP tests
# include the hand-over to the decode loop (test_rounds_that_keep_nothing_hand_over_to_the_decode_loop), which has
# not run on a GPU yet.
#   [BUDGET=seconds] bash bench/calls/device_s41_call4.sh     (carry .whl; ~5-6 minutes)
set -uo pipefail
start=$(date +%s)
left() { echo $(( ${BUDGET:-500} - ($(date +%s) - start) )); }
source bench/device_setup.sh
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1 | sed 's/NVIDIA //; s/ .*//' | tr 'A-Z' 'a-z')
(cd bench && timeout 100 python3 mma_shape_sweep.py --shapes "8,2;8,4;16,2;16,4;8,2,f;8,4,f;16,4,f" --widths 1,2,4,16 --reps 5 \
  --out "$out/mma-shape-sweep-$gpu.json") 2>&1 | tail -8
best=$(python3 -c "import json; print(','.join(map(str, json.load(open('$out/mma-shape-sweep-$gpu.json'))['best'])))" \
  2>/dev/null || echo "8,2")
fused=$(python3 -c "import json; print(int(json.load(open('$out/mma-shape-sweep-$gpu.json'))['best_fused_reduce']))" \
  2>/dev/null || echo 0)
echo "best shape: $best, fused reduce $fused ($(left) s left)"
export MONORAIL_QGEMV_MMA_SHAPE=$best MONORAIL_QGEMV_MMA_FUSED_REDUCE=$fused
timeout $(( $(left) - 60 > 200 ? 200 : $(left) - 60 )) python3 -m pytest -q -p no:cacheprovider -rfE --timeout 120 \
  tests/test_native_qgemv_mma.py tests/test_native_verify.py tests/test_native_mtp.py \
  "tests/test_native_sampler.py::test_decode_loop_from_a_later_draw_index" > "$out/tests.log" 2>&1
echo "tests rc=$? ($(left) s left)"; grep -E "^(FAILED|ERROR)|passed|failed" "$out/tests.log" | tail -8
if [[ $(left) -gt 70 ]]; then
  (cd bench && timeout $(( $(left) - 10 )) python3 spec_decode.py --drafts 1,3 --accept 0.8,1 \
    --out "$out/spec-decode-$gpu.json") 2>&1 | tail -8
fi
if [[ $(left) -gt 70 ]]; then   # sampled and penalised rounds (the app's instruct preset: presence penalty 1.5)
  (cd bench && timeout $(( $(left) - 10 )) python3 spec_decode.py --drafts 3 --accept 0.8,1 --sampling instruct \
    --out "$out/spec-decode-instruct-$gpu.json") 2>&1 | tail -6
fi
echo "total: $(( $(date +%s) - start )) s"
