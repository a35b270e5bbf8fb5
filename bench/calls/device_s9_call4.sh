#!/usr/bin/env bash
# Session 9, call 4: GEMV variant 39 (variant 4 with its weights and scales loaded past L1, so x keeps its L1 lines):
# the oracle tests of every T = 1 variant, the isolated table, then whole decode steps with 39 routed to down / gdn_out / o.
#   bash bench/calls/device_s9_call4.sh     (carry .whl)
set -uo pipefail
source bench/device_setup.sh
timeout 150 python3 -m pytest -q -p no:cacheprovider -rfE --timeout 90 tests/test_native_ops.py -k "launch_variants" \
  > $out/tests.log 2>&1; echo "tests rc=$?"; grep -E "^(FAILED|ERROR)|passed|failed" $out/tests.log | head -12
timeout 100 python3 bench/gemv_probe.py --bits 4 --variants 0,4,39 --reps 30 2>&1 | tee $out/gemv.txt | tail -7
D=5120x17408; O=5120x6144
timeout 200 python3 bench/step_probe.py --kv int8 --depths 0 \
  --routes "$D=39;$O=39;$D=39,$O=39;$D=4;$D=39,$O=39" 2>&1 | grep -E "step|route" | tee $out/steps.txt
echo "total $(( $(date +%s) - t0 )) s"
