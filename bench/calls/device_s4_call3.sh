#!/usr/bin/env bash
# Session 4, call 3: programmatic dependent launch in the decode step (first run): model/engine tests with
# PDL on (the default) and the bit-identity test against plain launches; ops tests; step time with and
# without PDL at depth 0 and 128K; the GEMV's read pattern alone (CuPy probe).
set -uo pipefail
source bench/device_setup.sh
timeout 200 python3 -m pytest -q -p no:cacheprovider -rfE --timeout 90 tests/test_native_model.py \
  tests/test_native_engine.py tests/test_native_lanes.py > $out/tests_model.log 2>&1
echo "model tests rc=$?"; grep -E "^(FAILED|ERROR)|passed|failed" $out/tests_model.log | head -12
timeout 150 python3 -m pytest -q -p no:cacheprovider -rfE --timeout 60 tests/test_native_ops.py \
  tests/test_native_attn_decode.py -x > $out/tests_ops.log 2>&1
echo "ops tests rc=$?"; grep -E "^(FAILED|ERROR)|passed|failed" $out/tests_ops.log | head -8
timeout 150 python3 bench/step_probe.py --kv int8 --depths 0,131072 --pdl 1,0 2>&1 | tail -5
timeout 60 python3 bench/read_probe.py --json $out/read_probe.json 2>&1 | tail -6
timeout 90 python3 bench/step_timeline.py --kv int8 --depth 0 --steps 5 --json $out/timeline-d0-pdl.json 2>&1 | grep -v Warn | tail -12
echo "total $(( $(date +%s) - t0 )) s"
