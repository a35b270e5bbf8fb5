#!/usr/bin/env bash
# Session 47 (written in session 46): half of the whole native GPU suite (bench/device_card.sh whole_suite: every other
# module of the sorted list), so that the suite fits two calls: half 1 in a cold call beside the build, half 2 in a
# warm follow-up (whose build is a no-op; device_setup.sh also puts the carried wheels on PYTHONPATH). On an H200
# the decode record instead.
#   MONORAIL_COMMIT=<sha> [BUDGET=seconds] bash bench/calls/device_s47_suite.sh 1|2     (carry .whl and .peer)
set -uo pipefail
BUDGET=${BUDGET:-560}
half=${1:?which half: 1 or 2}
source bench/device_card.sh
whole_suite "tests-native-half$half" "$half"
echo "total $(( $(date +%s) - start )) s"
