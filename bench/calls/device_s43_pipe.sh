#!/usr/bin/env bash
# Session 43 (written as session 42 call 5, never run there): the tensor-core GEMV with each warp's next pass of weights loaded before it multiplies the
# current one (set_qgemv_mma_pipelined, qgemv_mma_kernel's PIPE). Call 4's trace of a 4-token step at 4 spans
# (bench/results/timeline-T4-pdl1-spans4-h100-s42-call4.txt) has gate_up at 53.6 us a layer (1.77 TB/s) against 35.3
# for the one-token kernel. Prediction: if a warp's loads idling while it multiplies is what holds gate_up back,
# pipelining brings it toward ~40 us and a 4-token step from 8.8 to ~8.0 ms; if it is the access pattern (a warp reads
# 256 bytes of each of 32 rows 2.5 KB apart a pass), nothing moves. The op tests (same bits as the default kernel,
# fp64 tolerance) run first; then the sweep at 8 warps an SM and 4 spans, plain, p (pipelined), n (the next
# input's norm in the residual add's reduce kernel (qgemv_add_normed_next; prediction: a 4-token step ~0.25 ms less,
# the 129 norm kernels at ~2.6 us gone, each reduce ~1 us longer) and pn; under the best, the op, verify and MTP tests.
# (The reduce-norm, its tests and the sweep's n flag were removed after this ran: rerun it only at e846c25.)
#   [BUDGET=seconds] bash bench/calls/device_s43_pipe.sh     (carry .whl; ~5 minutes)
set -uo pipefail
start=$(date +%s)
left() { echo $(( ${BUDGET:-450} - ($(date +%s) - start) )); }
source bench/device_setup.sh
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1 | sed 's/NVIDIA //; s/ .*//' | tr 'A-Z' 'a-z')
timeout $(( $(left) - 10 > 200 ? 200 : $(left) - 10 )) python3 -m pytest -q -p no:cacheprovider -rfE --timeout 120 tests/test_native_qgemv_mma.py -k "pipelined or normalise or norm_in_the_reduce" \
  > "$out/tests-pipelined-op.log" 2>&1
echo "op tests rc=$? ($(left) s left)"; grep -E "^(FAILED|ERROR)|passed|failed" "$out/tests-pipelined-op.log" | tail -8
[[ $(left) -gt 90 ]] && (cd bench && timeout $(( $(left) - 10 > 180 ? 180 : $(left) - 10 )) python3 mma_shape_sweep.py --shapes "8,4;8,4,n;8,4,p;8,4,pn" --widths 1,2,4,16 --reps 5 \
  --out "$out/mma-shape-sweep-$gpu.json") 2>&1 | tail -6
best=$(python3 -c "import json; print(','.join(map(str, json.load(open('$out/mma-shape-sweep-$gpu.json'))['best'])))" \
  2>/dev/null || echo "8,4")
pipe=$(python3 -c "import json; print(int(json.load(open('$out/mma-shape-sweep-$gpu.json'))['best_pipelined']))" \
  2>/dev/null || echo 0)
rnorm=$(python3 -c "import json; print(int(json.load(open('$out/mma-shape-sweep-$gpu.json'))['best_reduce_norm']))" \
  2>/dev/null || echo 0)
echo "best shape: $best, pipelined $pipe, reduce_norm $rnorm ($(left) s left)"
export MONORAIL_QGEMV_MMA_SHAPE=$best MONORAIL_QGEMV_MMA_PIPELINED=$pipe MONORAIL_QGEMV_REDUCE_NORM=$rnorm
if [[ $(left) -gt 80 ]]; then
  timeout $(( $(left) - 20 > 200 ? 200 : $(left) - 20 )) python3 -m pytest -q -p no:cacheprovider -rfE --timeout 120 \
    tests/test_native_qgemv_mma.py tests/test_native_verify.py tests/test_native_mtp.py > "$out/tests.log" 2>&1
  echo "tests rc=$? ($(left) s left)"; grep -E "^(FAILED|ERROR)|passed|failed" "$out/tests.log" | tail -8
fi
if [[ ($pipe == 1 || $rnorm == 1) && $(left) -gt 60 ]]; then
  timeout $(( $(left) - 15 )) python3 bench/step_timeline.py --tokens 4 --pdl 1 --steps 5 \
    --json "$out/timeline-T4-best-$gpu.json" > "$out/timeline-T4-best-$gpu.txt" 2>&1
  grep -E "gate_up|down|gdn_in|reduce|norm|step" "$out/timeline-T4-best-$gpu.txt" | head -12
fi
echo "total: $(( $(date +%s) - start )) s"
