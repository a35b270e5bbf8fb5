#!/usr/bin/env bash
# Written in session 16 for the next one: variant 47 (the split kernel with no head rows: the fused norm, row groups of
# 4 on fp16 x) is routed for the 6-bit lm_head only (q4-27b: 296 -> 255 us). Whole steps of uniform recipes whose
# lm_head is 5 or 8 bits (q5g64, q8g64: today on ring 18 / the generic kernel) with the lm_head on 47 against the
# built-in route, alternating, to decide whether normed_wide_variant should route those widths too.
#   bash bench/calls/device_s17_call1.sh     (carry .whl; ~2 minutes)
set -uo pipefail
source bench/device_setup.sh
# the GPU tests session 16 added after its last call (variant 47 forced on every shape, the demo's K = 128, the routes)
timeout 200 python3 -m pytest -q -p no:cacheprovider -rfE --timeout 90 tests/test_native_ops.py \
  -k "headless or launch_variants" > $out/tests.log 2>&1
echo "tests rc=$?"; grep -E "^(FAILED|ERROR)|passed|failed" $out/tests.log | head -12
for recipe in q5g64 q8g64; do
  timeout 150 python3 bench/step_probe.py --recipe $recipe --kv int8 --depths 0 \
    --routes "248320x5120=47;248320x5120=0;248320x5120=47" 2>&1 | grep -E "recipe|step|Error|error" \
    | tee -a $out/steps-lmhead47.txt
done
echo "total $(( $(date +%s) - t0 )) s"
