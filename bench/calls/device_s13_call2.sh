#!/usr/bin/env bash
# Session 13, call 2: the GDN decode step's variants 1..3 (gdn.cu gdn_decode_kernel): their op tests against variant
# 0, then whole steps (0, 1, 2, 3, 0) at depth 0 and 128K, and the per-role timeline of 1 and 3 at depth 0.
#   bash bench/calls/device_s13_call2.sh     (carry .whl)
set -uo pipefail
source bench/device_setup.sh
timeout 120 python3 -m pytest -q -p no:cacheprovider -rfE --timeout 100 tests/test_native_ops.py -k "gdn" \
  > $out/tests.log 2>&1; echo "gdn op tests rc=$?"; grep -E "^(FAILED|ERROR)|passed|failed|Error" $out/tests.log | head -20
timeout 200 python3 bench/step_probe.py --kv int8 --depths 0,131072 --gdn-variants 0,1,2,3,0,1,2,3 2>&1 \
  | grep -E "step|Error|error" | tee $out/steps.txt
for v in 1 3; do
  timeout 120 python3 bench/step_timeline.py --kv int8 --steps 6 --pdl 1 --depth 0 --gdn-variant $v \
    --json $out/timeline-gdn$v.json > $out/timeline-gdn$v.txt 2>&1
  echo "timeline gdn variant $v rc=$?"; grep -A8 "increments" $out/timeline-gdn$v.txt | head -8
done
echo "total $(( $(date +%s) - t0 )) s"
