#!/usr/bin/env bash
# Session 23, call 3: the preload kernel (call 1's, now variants 49: 20 warps x 2 rows, 50: 12 x 4) on gdn_out alone
# (set_gdn_out_variant; the attention output keeps variant 4, which call 1 found 2.7 us slower on the preload), with
# its grid on every SM (reserved 0) or on the 84 the GDN step's 48 blocks leave free (reserved 48), so that no block
# starts when the step ends with a full claim (call 1's reading of why gdn_out gained only 0.3 us). Tests, whole steps
# alternating with the route, the per-role timeline of 49 with 48 reserved.
#   at commit 1f8e858 (the variants and switches removed after the call): bash bench/calls/device_s23_call3.sh     (carry .whl; ~5 minutes)
set -uo pipefail
source bench/device_setup.sh
timeout 240 python3 -m pytest -q -p no:cacheprovider -rfE --timeout 120 tests/test_native_ops.py tests/test_native_artifact.py \
  -k "preload or gdn_out_variant or launch_variants or x_layout" > $out/tests.log 2>&1
echo "tests rc=$?"; grep -E "^(FAILED|ERROR)|passed|failed" $out/tests.log | head -12
probe() { timeout 200 python3 bench/step_probe.py --kv int8 --depths 0,131072 "$@" 2>&1 | grep -E "recipe|variant|Error|error" \
  | tee -a $out/steps.txt; }
probe --gdn-out-variants 0,49,50,0,49,50,0 --preload-reserved 48
probe --gdn-out-variants 0,49,0 --preload-reserved 0
timeout 90 python3 bench/step_timeline.py --kv int8 --steps 6 --pdl 1 --depth 0 --gdn-out-variant 49 --preload-reserved 48 \
  2>&1 | grep -v Warn | tail -14 | tee -a $out/timeline.txt
echo "total $(( $(date +%s) - t0 )) s"
