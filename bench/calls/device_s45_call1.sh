#!/usr/bin/env bash
# For session 45, whichever card comes.
# - H200: the decode record at this commit with both llama.cpp peers (device_s41_h200.sh; decode-h200.json is still
#   session 26's).
# - otherwise (an H100): the tensor-core GEMV with each pass's weight loads issued before its first product
#   (set_qgemv_mma_loads_first, written in session 44 after its SASS showed ptxas issuing spans 2 and 3 of a pass only
#   after spans 0 and 1 were multiplied). Prediction: if those serial round trips are what held the 4-token kernel at
#   1.8 TB/s on gate_up (Nsight Compute: 70 % of cycles waiting on L1TEX), gate_up 53.6 -> ~40 us a layer and a
#   4-token step 8.8 -> ~7.9 ms, T = 16 12.0 -> ~11; if not, nothing moves. Op tests first (the same values as the
#   default form), then the sweep, then Nsight Compute on gate_up's shape under the better form, then the op / verify /
#   MTP tests under it.
#   MONORAIL_COMMIT=<sha> [BUDGET=seconds] bash bench/calls/device_s45_call1.sh     (carry .whl and .peer)
set -uo pipefail
BUDGET=${BUDGET:-450}
source bench/device_card.sh
timeout 120 python3 -m pytest -q -p no:cacheprovider -rfE tests/test_native_qgemv_mma.py -k "loads_first" \
  > "$out/tests-loads-first-op.log" 2>&1
echo "op tests rc=$? ($(left) s left)"; grep -E "^(FAILED|ERROR)|passed|failed" "$out/tests-loads-first-op.log" | tail -6
(cd bench && timeout $(( $(left) - 10 > 160 ? 160 : $(left) - 10 )) python3 mma_shape_sweep.py \
  --shapes "8,4;8,4,l;8,2,l;8,4;8,4,l" --widths 4,2,16 --reps 5 --out "$out/mma-shape-sweep-$gpu.json") 2>&1 | tail -7
first=$(python3 -c "import json; print(int(json.load(open('$out/mma-shape-sweep-$gpu.json'))['best_loads_first']))" \
  2>/dev/null || echo 0)
export MONORAIL_QGEMV_MMA_LOADS_FIRST=$first
echo "loads first: $first ($(left) s left)"
if [[ $(left) -gt 60 ]]; then
  timeout 60 ncu --clock-control none -k regex:qgemv_mma --launch-skip 2 --launch-count 1 --section SpeedOfLight \
    --section Occupancy --section WarpStateStats python3 bench/ncu_gemv.py 34816 5120 0 4 > "$out/ncu-34816-T4.txt" 2>&1
  grep -E "Duration|DRAM Throughput|Warp Cycles Per Issued|Achieved Active Warps" "$out/ncu-34816-T4.txt" | head -6
fi
if [[ $(left) -gt 60 ]]; then
  timeout $(( $(left) - 15 )) python3 -m pytest -q -p no:cacheprovider -rfE --timeout 120 tests/test_native_qgemv_mma.py \
    tests/test_native_verify.py tests/test_native_mtp.py > "$out/tests.log" 2>&1
  echo "tests rc=$? ($(left) s left)"; grep -E "^(FAILED|ERROR)|passed|failed" "$out/tests.log" | tail -8
fi
echo "total $(( $(date +%s) - start )) s"
