#!/usr/bin/env bash
# Session 27 (written without a device; for the next session that has one): the sampler's slice draw
# (set_sampler_slice_draw, default off) on its first GPU run. The sampler and loop tests (the new slice-draw cases
# among them), the draw's cost by mode with the slice draw off and on, and the app's token loop.
#   MONORAIL_COMMIT=<sha> bash bench/calls/device_s27_call1.sh     (carry .whl; ~5 minutes)
# If every test passes and the slice draw is no slower on any row, turn it on by default (sampler.cu g_slice_draw).
set -uo pipefail
source bench/device_setup.sh
timeout 300 python3 -m pytest -q -p no:cacheprovider -rfE --timeout 120 tests/test_native_sampler.py \
  tests/test_native_ops.py tests/test_native_model.py -k "sampl or memory or draw or loop or broken" > $out/tests.log 2>&1
echo "tests rc=$?"; grep -E "^(FAILED|ERROR)|passed|failed|Error|assert" $out/tests.log | head -20
timeout 120 python3 bench/sampler_time.py --slice-draw 0,1 --json $out/sampler-time.json 2>&1 | tail -40
timeout 120 python3 bench/token_loop.py --tokens 64 --json $out/token-loop.json 2>&1 | tail -4
echo "total $(( $(date +%s) - t0 )) s"
