#!/usr/bin/env bash
# Session 29, the short form of device_s29.sh for a nearly spent budget: the tests of the narrowing paths (wide
# select, top-k narrowing, slice draw, signed zeros) with the wide select forced on by the tests, then the draw's cost
# with both switches off and on back to back.
#   MONORAIL_COMMIT=<sha> bash bench/calls/device_s29_min.sh     (carry .whl; ~2.5 minutes)
set -uo pipefail
source bench/device_setup.sh
timeout 120 python3 -m pytest -q -p no:cacheprovider -rfE --timeout 60 tests/test_native_sampler.py \
  -k "wide or narrowing or signed or slice_draw" > $out/tests.log 2>&1
echo "tests rc=$?"; grep -E "^(FAILED|ERROR)|passed|failed" $out/tests.log | tail -12
timeout 90 python3 bench/sampler_time.py --wide-select 0,1 --top-k-narrowing 0,1 --reps 100 \
  --json $out/sampler-time.json > $out/sampler-time.log 2>&1
echo "sampler_time rc=$?"; grep -E "top-p 0.9\"|top-k 100\"" $out/sampler-time.log | cut -c1-200
echo "total $(( $(date +%s) - t0 )) s"
