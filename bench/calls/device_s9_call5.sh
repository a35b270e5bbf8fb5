#!/usr/bin/env bash
# Session 9, call 5: GEMV variant 40 (variant 4 with each row pair's walk over K rotated, so the grid's warps do not all
# read the same x lines at once): the T = 1 variant tests, the isolated table, whole steps with 40 on the 5120-row shapes.
#   bash bench/calls/device_s9_call5.sh     (carry .whl)
set -uo pipefail
source bench/device_setup.sh
timeout 150 python3 -m pytest -q -p no:cacheprovider -rfE --timeout 90 tests/test_native_ops.py -k "launch_variants" \
  > $out/tests.log 2>&1; echo "tests rc=$?"; grep -E "^(FAILED|ERROR)|passed|failed" $out/tests.log | head -12
timeout 100 python3 bench/gemv_probe.py --bits 4 --variants 0,40 --reps 30 2>&1 | tee $out/gemv.txt | tail -6
D=5120x17408; O=5120x6144
timeout 200 python3 bench/step_probe.py --kv int8 --depths 0 \
  --routes "$D=40;$O=40;$D=40,$O=40;$D=40,$O=40" 2>&1 | grep -E "step|route" | tee $out/steps.txt
echo "total $(( $(date +%s) - t0 )) s"
