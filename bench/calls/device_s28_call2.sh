#!/usr/bin/env bash
# Session 28: the slice draw on by default (sampler.cu g_slice_draw), and top-p's narrowing (sample_narrow) on its first
# GPU run. The sampler and loop tests at the new default
# (the candidate-path tests now set it off themselves), the draw's cost by mode off and on, and the app's loop.
#   MONORAIL_COMMIT=<sha> bash bench/calls/device_s28_call2.sh     (carry .whl; ~3 minutes)
set -uo pipefail
source bench/device_setup.sh
timeout 300 python3 -m pytest -q -p no:cacheprovider -rfE --timeout 120 tests/test_native_sampler.py \
  tests/test_native_ops.py tests/test_native_model.py -k "sampl or memory or draw or loop or broken" > $out/tests.log 2>&1
echo "tests rc=$?"; grep -E "^(FAILED|ERROR)|passed|failed|Error|assert" $out/tests.log | head -20
timeout 200 python3 bench/sampler_time.py --slice-draw 0,1 --json $out/sampler-time.json 2>&1 | tail -42
timeout 120 python3 bench/token_loop.py --tokens 64 --json $out/token-loop.json 2>&1 | tail -4
echo "total $(( $(date +%s) - t0 )) s"
