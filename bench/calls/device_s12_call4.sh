#!/usr/bin/env bash
# Session 12, call 4: GEMV variant 36, the block's 8 rows of gdn_out / the attention output (5120 x 6144) copied into
# shared memory before the PDL wait, i.e. while the latency-bound GDN step / attention combine runs. Its op tests
# (bit-equal to variant 4), whole steps with 5120x6144 on it, and the per-role timeline with it.
#   bash bench/calls/device_s12_call4.sh     (carry .whl)
set -uo pipefail
source bench/device_setup.sh
timeout 90 python3 -m pytest -q -p no:cacheprovider -rfE --timeout 60 tests/test_native_ops.py \
  -k "lanes_input_equals_perm8 or x_layout_follows or (launch_variants and 36)" > $out/tests.log 2>&1
echo "tests rc=$?"; grep -E "^(FAILED|ERROR)|passed|failed" $out/tests.log | head -8
timeout 150 python3 bench/step_probe.py --kv int8 --depths 0,131072 --routes "5120x6144=36" 2>&1 | grep -E "step" \
  | tee $out/steps.txt
timeout 120 python3 bench/step_timeline.py --kv int8 --depth 0 --pdl 1 --route "5120x6144=36" \
  --json $out/timeline-36.json > $out/timeline-36.txt 2>&1
grep -E "gdn_out|attn_o|gdn_step|attn_combine|graph step" $out/timeline-36.txt
echo "total $(( $(date +%s) - t0 )) s"
