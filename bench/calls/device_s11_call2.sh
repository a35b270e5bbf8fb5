#!/usr/bin/env bash
# Session 11, call 2: where the step's time goes by role, with PDL on (each kernel's end minus its predecessor's end,
# bench/step_timeline.py) at depth 0 and 128K, and without PDL at depth 0 for comparison (call 1's L2 prefetch
# removed). Then the fused norm's weights loaded before the PDL wait (qgemv.cu load_norm_w): its bit-for-bit test and
# whole steps with it on and off.
#   bash bench/calls/device_s11_call2.sh     (carry .whl)
set -uo pipefail
source bench/device_setup.sh
for args in "--pdl 1 --depth 0" "--pdl 1 --depth 131072" "--pdl 0 --depth 0"; do
  tag=$(echo "$args" | tr -d ' -' )
  timeout 120 python3 bench/step_timeline.py --kv int8 --steps 6 $args --json $out/timeline-$tag.json > $out/timeline-$tag.txt 2>&1
  echo "timeline $args rc=$?"; grep -A30 "increments" $out/timeline-$tag.txt | head -24; grep "graph step" $out/timeline-$tag.txt
done
timeout 60 python3 -m pytest -q -p no:cacheprovider -rfE --timeout 60 tests/test_native_model.py -k "no_bit or teacher" \
  > $out/tests.log 2>&1; echo "tests rc=$?"; grep -E "^(FAILED|ERROR)|passed|failed" $out/tests.log | head
timeout 60 python3 -m pytest -q -p no:cacheprovider -rfE --timeout 60 tests/test_native_ops.py -k "normed" \
  >> $out/tests.log 2>&1; echo "normed op tests rc=$?"; grep -E "^(FAILED|ERROR)|passed|failed" $out/tests.log | tail -3
timeout 120 python3 bench/step_probe.py --kv int8 --depths 0,131072 --norm-early 1,0,1,0 2>&1 | grep -E "step" \
  | tee $out/steps.txt
echo "total $(( $(date +%s) - t0 )) s"
