#!/usr/bin/env bash
# Session 15, call 4: the column split takes the norm fused (qgemv_normed, every width), and the engine's split input
# projections (q4-27b: GDN b|a, attention k|v) run head and tail each on the normalised residual, with no norm kernel
# where both fuse it. Tests (the fused column split against fp64; the q4-27b artifact end to end; the native model),
# then q4-27b steps: the route (45 with the fused norm on the tails), 46 on the tails, and the old tails (generic /
# ring 18: the norm kernel comes back); q4g64 on the route (unchanged code path: a check).
#   bash bench/calls/device_s15_call4.sh     (carry .whl)
set -uo pipefail
source bench/device_setup.sh
timeout 200 python3 -m pytest -q -p no:cacheprovider -rfE --timeout 90 tests/test_native_ops.py \
  tests/test_native_artifact.py tests/test_native_model.py \
  -k "not timing_probe and (not qgemv or col or normed or x_layout or widths_t1)" > $out/tests.log 2>&1
echo "tests rc=$?"; grep -E "^(FAILED|ERROR)|passed|failed" $out/tests.log | head -12
timeout 150 python3 bench/step_probe.py --recipe q4-27b --kv int8 --depths 0 \
  --routes "96x5120=46,2048x5120=46;96x5120=1,2048x5120=18" 2>&1 | grep -E "recipe|step|Error|error" \
  | tee $out/steps.txt
timeout 60 python3 bench/step_probe.py --kv int8 --depths 0 2>&1 | grep -E "recipe|step|Error|error" | tee -a $out/steps.txt
echo "total $(( $(date +%s) - t0 )) s"
