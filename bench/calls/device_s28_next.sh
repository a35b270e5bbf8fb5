#!/usr/bin/env bash
# Written at the end of session 28 (its device time spent): the first GPU run of the wide select
# (set_sampler_wide_select) and top-k's narrowing (set_sampler_top_k_narrowing), both default off, and of collect
# computing each id's float64 mass once (for Z and the bins; on the default path). The sampler and loop tests (the
# wide-select and top-k-narrowing cases among them), the draw's cost with both switches off and on (the slice draw
# on, the default), and the app's token loop.
#   MONORAIL_COMMIT=<sha> bash bench/calls/device_s28_next.sh     (carry .whl; ~4 minutes)
# If every test passes and no mode is slower, turn them on by default (sampler.cu g_wide_select, g_top_k_narrowing).
set -uo pipefail
source bench/device_setup.sh
timeout 300 python3 -m pytest -q -p no:cacheprovider -rfE --timeout 120 tests/test_native_sampler.py \
  tests/test_native_ops.py tests/test_native_model.py -k "sampl or memory or draw or loop or broken or wide" \
  > $out/tests.log 2>&1
echo "tests rc=$?"; grep -E "^(FAILED|ERROR)|passed|failed|Error|assert" $out/tests.log | head -20
for on in 0 1; do
  timeout 150 python3 bench/sampler_time.py --wide-select $on --top-k-narrowing $on \
    --json $out/sampler-time-extensions$on.json 2>&1 | grep -E "top-p|top-k 100|greedy"
done
timeout 120 python3 bench/token_loop.py --tokens 64 --json $out/token-loop.json 2>&1 | tail -4
echo "total $(( $(date +%s) - t0 )) s"
