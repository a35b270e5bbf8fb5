#!/usr/bin/env bash
# Session 25, call 2: the device sampler and decode loop (first GPU run): their tests, the modules that sample,
# then the app's token loop against the step.   bash bench/calls/device_s25_call2.sh   (carry .whl; ~6 minutes)
set -uo pipefail
source bench/device_setup.sh
timeout 300 python3 -m pytest -q -p no:cacheprovider -rfE --timeout 120 -x tests/test_native_sampler.py \
  > $out/tests-sampler.log 2>&1
echo "sampler tests rc=$?"; grep -E "^(FAILED|ERROR)|passed|failed|Error|assert" $out/tests-sampler.log | head -20
timeout 240 python3 -m pytest -q -p no:cacheprovider -rfE --timeout 120 tests/test_native_ops.py tests/test_native_prefill.py \
  tests/test_native_model.py -k "sampl or memory or prefill" > $out/tests-related.log 2>&1
echo "related tests rc=$?"; grep -E "^(FAILED|ERROR)|passed|failed" $out/tests-related.log | tail -8
timeout 150 python3 bench/token_loop.py --tokens 64 --json $out/token-loop.json 2>&1 | tail -6
echo "total $(( $(date +%s) - t0 )) s"
