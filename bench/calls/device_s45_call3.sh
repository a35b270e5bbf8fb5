#!/usr/bin/env bash
# Session 45: the whole native GPU suite under the default that call 2 timed (the tensor-core GEMV's loads first,
# spans by width). On an H200 the decode record instead (bench/device_card.sh).
#   MONORAIL_COMMIT=<sha> [BUDGET=seconds] bash bench/calls/device_s45_call3.sh     (carry .whl and .peer)
set -uo pipefail
BUDGET=${BUDGET:-500}
source bench/device_card.sh
timeout $(( $(left) - 15 )) python3 -m pytest -q -p no:cacheprovider -rfE tests/test_native*.py tests/test_plan.py \
  -k "not timing_probe" > "$out/tests.log" 2>&1
echo "suite rc=$? ($(left) s left)"; grep -E "^(FAILED|ERROR)|passed|failed" "$out/tests.log" | tail -20
echo "total $(( $(date +%s) - start )) s"
