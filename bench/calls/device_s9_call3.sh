#!/usr/bin/env bash
# Session 9, call 3: GEMV variants 36..38 (fp16 x staged per 4-warp block, one row group per warp) for the 5120-row
# shapes: their oracle tests, the isolated table, then whole decode steps with them routed to down / gdn_out / o.
#   bash bench/calls/device_s9_call3.sh     (carry .whl)
set -uo pipefail
source bench/device_setup.sh
timeout 150 python3 -m pytest -q -p no:cacheprovider -rfE --timeout 90 tests/test_native_ops.py -k "launch_variants" \
  > $out/tests.log 2>&1; echo "tests rc=$?"; grep -E "^(FAILED|ERROR)|passed|failed" $out/tests.log | head -12
timeout 100 python3 bench/gemv_probe.py --bits 4 --variants 0,4,36,37,38 --reps 30 2>&1 | tee $out/gemv.txt | tail -10
D=5120x17408; O=5120x6144
timeout 200 python3 bench/step_probe.py --kv int8 --depths 0 \
  --routes "$D=36;$D=37;$D=38;$O=36;$O=38;$D=36,$O=36;$D=38,$O=38;$D=37,$O=38" 2>&1 | grep -E "step|route" | tee $out/steps.txt
echo "total $(( $(date +%s) - t0 )) s"
