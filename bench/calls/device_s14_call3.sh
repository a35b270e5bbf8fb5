#!/usr/bin/env bash
# Session 14, call 3: variants 41 / 42 (qgemv_pp_kernel with 4 rows a warp, 2 / 1 batches before the PDL wait) and
# 43 / 44 (36 / 41 with the weights loaded past L1, ld.global.cg) on
# down and on gdn_out / o, whole steps against the route (36 on down, 4 on gdn_out / o), the route timed first and
# last (drift). The GEMV tests first (41 / 42 bit-equal to variant 4).
#   bash bench/calls/device_s14_call3.sh     (carry .whl)
set -uo pipefail
source bench/device_setup.sh
timeout 150 python3 -m pytest -q -p no:cacheprovider -rfE --timeout 120 tests/test_native_ops.py \
  -k "pp_variants or x_layout or lanes" > $out/tests.log 2>&1
echo "gemv tests rc=$?"; grep -E "^(FAILED|ERROR)|passed|failed" $out/tests.log | head -12
timeout 300 python3 bench/step_probe.py --kv int8 --depths 0,131072 \
  --routes "5120x17408=41;5120x17408=42;5120x17408=43;5120x17408=44;5120x6144=41;5120x6144=43;5120x6144=44;5120x17408=36" 2>&1 \
  | grep -E "step|Error|error" | tee $out/steps.txt
echo "total $(( $(date +%s) - t0 )) s"
