#!/usr/bin/env bash
# Session 3, last seconds of device time: the tensor-core 4-bit GEMV variants 20/21 (never run before)
# against the fp64 oracle, and their times beside the route.
set -uo pipefail
source bench/device_setup.sh
ids=$(python3 -m pytest --collect-only -q -p no:cacheprovider tests/test_native_ops.py 2>/dev/null | grep qgemv \
  | grep -E "(-20|-21)\]")
timeout 25 python3 -m pytest -q -p no:cacheprovider -rfE --timeout 10 $ids > $out/tests.log 2>&1
echo "tc tests rc=$?"; grep -E "^(FAILED|ERROR)|passed|failed" $out/tests.log | head -12
timeout 20 python3 bench/gemv_probe.py --bits 4 --variants 0,6,20,21 --reps 20 2>&1 | tail -8
