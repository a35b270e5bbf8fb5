#!/usr/bin/env bash
# Session 46, call 2: the whole native GPU suite under the new default of the tensor-core GEMV (shape by width: 16 rows
# a warp at 16 warps an SM for T <= 6, 32 rows at 8 above; loads first), which no whole-suite run has covered (nor
# session 45's loads-first default). On an H200 the decode record instead (bench/device_card.sh).
# Follow with bench/calls/device_s46_call3.sh on the warm machine (the speculative round cost refit, step widths).
#   MONORAIL_COMMIT=<sha> [BUDGET=seconds] bash bench/calls/device_s46_call2.sh     (carry .whl and .peer)
set -uo pipefail
BUDGET=${BUDGET:-585}
source bench/device_card.sh
whole_suite tests-native
echo "total $(( $(date +%s) - start )) s"
