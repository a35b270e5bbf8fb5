#!/usr/bin/env bash
# Session 31, short form of device_s31_call1.sh for a nearly spent budget: bench/patches/finish-wide-batch.patch
# applied, each sampler kernel's duration on the flat row under Nsight Compute (top-p 0.9; session 30: finish 279 us,
# H100), the sampler and token-loop tests, sampler_time at the defaults.
#   bash bench/calls/device_s31_min.sh     (carry .whl; ~5 minutes)
set -uo pipefail
git apply bench/patches/finish-wide-batch.patch || { echo "PATCH DID NOT APPLY"; exit 1; }
source bench/device_setup.sh
bash bench/ncu_sampler_durations.sh "$out" flat
timeout 200 python3 -m pytest -q -p no:cacheprovider -rfE --timeout 120 tests/test_native_sampler.py \
  tests/test_native_model.py -k "sampl or draw or loop or wide" > $out/tests.log 2>&1
echo "tests rc=$?"; grep -E "^(FAILED|ERROR)|passed|failed" $out/tests.log | tail -12
timeout 45 python3 bench/sampler_time.py --reps 100 --json $out/sampler-time.json > $out/sampler-time.log 2>&1
echo "sampler_time rc=$?"
python3 -c "
import json,sys
for r in json.load(open('$out/sampler-time.json'))['rows']: print(f\"{r['row']:10s} {r['mode']:36s} {r['us_per_draw_with_sync']:7.1f}\")" 2>&1 | head -40
echo "total $(( $(date +%s) - t0 )) s"
