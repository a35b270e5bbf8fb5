#!/usr/bin/env bash
# Session 19, call 6: attention variant 7 for int4 KV (variant 4 with two 16-position chunks a loop step: both chunks'
# score chains in flight together, one softmax update for 32 positions, 6 ring stages). Its oracle tests (the attention
# module with 7 in the family; the tiny model's int4 teacher-forced steps on 7), then whole steps, route (4) against
# 7 alternating: q4g64 int4 at 0 / 128K, q4-27b int4 at 0 / 128K / 256K; the 128K timeline on 7.
#   bash bench/calls/device_s19_call6.sh     (carry .whl; ~5 minutes)
set -uo pipefail
source bench/device_setup.sh
timeout 200 python3 -m pytest -q -p no:cacheprovider -rfE --timeout 150 tests/test_native_attn_decode.py \
  -k "not timing" > $out/tests.log 2>&1
echo "tests rc=$?"; grep -E "^(FAILED|ERROR)|passed|failed" $out/tests.log | head -12
timeout 150 python3 -m pytest -q -p no:cacheprovider -rfE --timeout 120 tests/test_native_model.py -k "int4 or carveout" \
  > $out/tests-model.log 2>&1
echo "model tests rc=$?"; grep -E "^(FAILED|ERROR)|passed|failed" $out/tests-model.log | head -8
echo "total $(( $(date +%s) - t0 )) s"
probe() { timeout 200 python3 bench/step_probe.py "$@" 2>&1 | grep -E "recipe|step|Error|error" | tee -a $out/steps.txt; }
probe --kv int4 --depths 0,131072 --attn-variants 7,-1,7
probe --recipe q4-27b --kv int4 --depths 0,131072,262080 --attn-variants 7,-1,7
echo "total $(( $(date +%s) - t0 )) s"
timeout 100 python3 bench/step_timeline.py --kv int4 --depth 131072 --pdl 1 --attn-variant 7 > $out/timeline-int4-128k-v7.txt 2>&1
echo "timeline rc=$?"; grep -E "graph step|attn_split|attn_combine" $out/timeline-int4-128k-v7.txt | head -4
echo "total $(( $(date +%s) - t0 )) s"
