#!/usr/bin/env bash
# Session 25, call 9: the one-block fallback's draw with a float32 filter before the float64 noise: the sampler
# tests and the draw's cost by mode.   bash bench/calls/device_s25_call9.sh     (carry .whl; ~2.5 minutes)
set -uo pipefail
source bench/device_setup.sh
timeout 120 python3 -m pytest -q -p no:cacheprovider -rfE --timeout 100 tests/test_native_sampler.py > $out/tests.log 2>&1
echo "tests rc=$?"; grep -E "^(FAILED|ERROR)|passed|failed|Error|assert" $out/tests.log | head -20
timeout 40 python3 bench/sampler_time.py --reps 100 --json $out/sampler-time.json 2>&1 | tail -14
echo "total $(( $(date +%s) - t0 )) s"
