#!/usr/bin/env bash
# Session 45: the whole native GPU suite under the default that call 2 timed (the tensor-core GEMV's loads first,
# spans by width). On an H200 the decode record instead (bench/device_card.sh).
#   MONORAIL_COMMIT=<sha> [BUDGET=seconds] bash bench/calls/device_s45_call3.sh     (carry .whl and .peer)
set -uo pipefail
BUDGET=${BUDGET:-500}
source bench/device_card.sh
whole_suite tests
echo "total $(( $(date +%s) - start )) s"
