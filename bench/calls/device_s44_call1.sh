#!/usr/bin/env bash
# Session 44, first call, for whichever card comes.
# - H200: the decode record at this commit with both llama.cpp peers (device_s41_h200.sh). Prediction: depth 0 int8
#   ~73-76 % of the copy roofline (the H100 gives 78.2 % at the same T = 1 kernels; the H200's fixed per-step costs
#   weigh more against its 4.3 TB/s), 128K int8 ~76-80 %.
# - otherwise (an H100): every native GPU test at this commit (none has run on a GPU since the session-43 removal of
#   the reduce-norm), as bench/device_run.sh tests, bounded by the time left.
#   MONORAIL_COMMIT=<sha> [BUDGET=seconds] bash bench/calls/device_s44_call1.sh     (carry .whl and .peer)
set -uo pipefail
BUDGET=${BUDGET:-570}
source bench/device_card.sh
timeout $(( $(left) - 15 )) python3 -m pytest -q -p no:cacheprovider -rfE tests/test_native*.py tests/test_plan.py \
  -k "not timing_probe" > "$out/tests.log" 2>&1
echo "pytest rc=$?"
grep -E "^(FAILED|ERROR)|passed|failed" "$out/tests.log" | tail -20
echo "total $(( $(date +%s) - start )) s"
