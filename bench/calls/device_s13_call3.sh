#!/usr/bin/env bash
# Session 13, call 3: the attention's post-wait round trips cut (prep: norm weight, rotation and slot before the PDL
# wait; split: the step's bounds and the cache chunks wholly before kv_start before the wait, the rest of the prologue
# in flight with the query loads; combine: the partials' values in the maxima's round, the gate before the wait).
# GPU tests of the GDN step, attention, prefill and model modules; then whole steps new / old / new (the old
# attention files carried in .ab/old, rebuilt incrementally), and the per-role timeline of the new tree.
#   bash bench/calls/device_s13_call3.sh     (carry .whl, .ab)
set -uo pipefail
source bench/device_setup.sh
timeout 300 python3 -m pytest -q -p no:cacheprovider -rfE --timeout 200 tests/test_native_attn_decode.py \
  tests/test_native_prefill.py tests/test_native_model.py tests/test_native_ops.py -k "not timing_probe" \
  > $out/tests.log 2>&1; echo "tests rc=$?"; grep -E "^(FAILED|ERROR)|passed|failed" $out/tests.log | head -20
probe() { timeout 150 python3 bench/step_probe.py --kv int8 --depths 0,8192,131072 2>&1 | grep -E "step|Error|error" \
  | sed "s/^/$1 /" | tee -a $out/steps.txt; }
rebuild() { MONORAIL_CUDA_ARCHS=90 python3 -m pip install -q --no-build-isolation --no-deps -e . > "$out/build-$1.log" 2>&1 \
  || { echo "REBUILD $1 FAILED"; grep -E "error" "$out/build-$1.log" | head; exit 1; }; }
probe new
cp .ab/old/* csrc/cuda/ && rebuild old && probe old
cp .ab/new/* csrc/cuda/ && rebuild new && probe new
timeout 120 python3 bench/step_timeline.py --kv int8 --steps 6 --pdl 1 --depth 0 --json $out/timeline.json \
  > $out/timeline.txt 2>&1; echo "timeline rc=$?"; grep -A14 "increments" $out/timeline.txt | head -14
echo "total $(( $(date +%s) - t0 )) s"
