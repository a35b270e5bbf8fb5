#!/usr/bin/env bash
# Session 44, for whichever card comes.
# - H200: the decode record at this commit with both llama.cpp peers (device_s41_h200.sh; prediction in
#   device_s44_call1.sh).
# - otherwise (an H100): the tensor-core GEMV's long-run forms (set_qgemv_mma_runs; a warp walks 16-row tiles in turn
#   and reads 512 bytes of each row a pass, where the default reads 256 bytes of each of 32 rows). Prediction: if the
#   run of each row is what holds a 4-token step's gate_up at 1.77 TB/s (53.6 us a layer against 35.3 for the one-token
#   kernel, which reads 512-byte and longer runs), form 1 brings it toward ~40 us and the 4-token step from ~8.8 to
#   ~8.0 ms; if not, nothing moves. Form 2 (four tiles in turn, half the warps, K split twice for gate_up) is the same
#   run with fewer rows streamed at once. First the op tests (the same bits as the default form), then the sweep, a
#   4-token trace under form 1, and with the time left every native GPU test at this commit.
# (The run forms were removed after this ran: rerun it only at 714a2b2.)
#   MONORAIL_COMMIT=<sha> [BUDGET=seconds] bash bench/calls/device_s44_call2.sh     (carry .whl and .peer)
set -uo pipefail
BUDGET=${BUDGET:-570}
source bench/device_card.sh
timeout 150 python3 -m pytest -q -p no:cacheprovider -rfE --timeout 120 tests/test_native_qgemv_mma.py \
  -k "long_run or run_form" > "$out/tests-runs-op.log" 2>&1
echo "op tests rc=$? ($(left) s left)"; grep -E "^(FAILED|ERROR)|passed|failed" "$out/tests-runs-op.log" | tail -8
(cd bench && timeout $(( $(left) - 10 > 200 ? 200 : $(left) - 10 )) python3 mma_shape_sweep.py \
  --shapes "8,4;8,4,r1;8,4,r2;8,4;8,4,r1" --widths 2,4,16 --reps 5 --out "$out/mma-shape-sweep-$gpu.json") 2>&1 | tail -7
echo "($(left) s left)"
if [[ $(left) -gt 60 ]]; then
  MONORAIL_QGEMV_MMA_RUNS=1 timeout $(( $(left) - 15 > 60 ? 60 : $(left) - 15 )) python3 bench/step_timeline.py \
    --tokens 4 --pdl 1 --steps 5 --json "$out/timeline-T4-runs1-$gpu.json" > "$out/timeline-T4-runs1-$gpu.txt" 2>&1
  grep -E "gate_up|down|gdn_in|reduce|step" "$out/timeline-T4-runs1-$gpu.txt" | head -10
fi
if [[ $(left) -gt 300 ]]; then
  timeout $(( $(left) - 15 )) python3 -m pytest -q -p no:cacheprovider -rfE tests/test_native*.py tests/test_plan.py \
    -k "not timing_probe" > "$out/tests.log" 2>&1
  echo "suite rc=$? ($(left) s left)"; grep -E "^(FAILED|ERROR)|passed|failed" "$out/tests.log" | tail -20
fi
echo "total $(( $(date +%s) - start )) s"
