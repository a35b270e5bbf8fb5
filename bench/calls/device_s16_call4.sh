#!/usr/bin/env bash
# Session 16: a split projection's head and tail in one kernel (qgemv4_split_kernel: variant 30 with the tail's row
# groups on the warps the head leaves idle; set_qgemv_split_fused, off by default until timed). Tests (the op against
# fp64 and variant 30 alone; a tiny split engine's decode logits), then q4-27b steps with it off / on / off at depth
# 0 and 128K, then the q4-27b route search of bench/calls/device_s16_call3.sh if time is left.
#   bash bench/calls/device_s16_call4.sh     (carry .whl)
set -uo pipefail
source bench/device_setup.sh
timeout 200 python3 -m pytest -q -p no:cacheprovider -rfE -s --timeout 90 tests/test_native_ops.py \
  tests/test_native_artifact.py -k "split or keeps_x or normed" > $out/tests.log 2>&1
echo "tests rc=$?"; grep -E "^(FAILED|ERROR)|passed|failed|vs norm kernel" $out/tests.log | head -12
timeout 200 python3 bench/step_probe.py --recipe q4-27b --kv int8 --depths 0,131072 --split-fused 0,1,0 2>&1 \
  | grep -E "recipe|step|Error|error" | tee $out/steps.txt
echo "steps done at $(( $(date +%s) - t0 )) s"
if [ "${ROUTE_SEARCH:-1}" = 1 ]; then
  timeout 330 python3 bench/route_search.py --recipe q4-27b --steps 20 --verify 3 \
    --shapes 5120x17408,5120x6144,248320x5120,2048x5120,96x5120 --candidates 1,16,17,18,19,36,45,46 \
    --json $out/route-search-q4-27b.json > $out/route-search-q4-27b.txt 2>&1
  echo "route search rc=$?"; tail -15 $out/route-search-q4-27b.txt
fi
echo "total $(( $(date +%s) - t0 )) s"
