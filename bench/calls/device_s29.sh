#!/usr/bin/env bash
# Session 29, call 2: the wide select with each candidate's mass stored by sample_narrow and warp-aggregated
# histograms in finish_wide, and both extensions (wide select, top-k narrowing) on by default. The draw's cost with
# both switches off and on back to back in one process, the sampler and loop tests (session 28's subset; device starts
# were scarce and the budget short, so not every module), and the app's token loop.
#   MONORAIL_COMMIT=<sha> bash bench/calls/device_s29.sh     (carry .whl; ~4 minutes)
set -uo pipefail
source bench/device_setup.sh
timeout 120 python3 bench/sampler_time.py --wide-select 0,1 --top-k-narrowing 0,1 \
  --json $out/sampler-time.json > $out/sampler-time.log 2>&1
echo "sampler_time rc=$?"
python3 - "$out/sampler-time.json" <<'P'
import json, sys
rows = json.load(open(sys.argv[1]))["rows"]
by = {}
for r in rows:
    by.setdefault((r["row"], r["mode"]), {})[(r["wide_select"], r["top_k_narrowing"])] = r["us_per_draw_with_sync"]
for (row, mode), t in by.items():
    print(f"{row:10s} {mode:36s} " + " ".join(f"{k[0]:d}{k[1]:d}:{v:7.1f}" for k, v in sorted(t.items())))
P
timeout 300 python3 -m pytest -q -p no:cacheprovider -rfE --timeout 120 tests/test_native_sampler.py \
  tests/test_native_ops.py tests/test_native_model.py -k "sampl or memory or draw or loop or broken or wide" \
  > $out/tests.log 2>&1
echo "tests rc=$?"; grep -E "^(FAILED|ERROR)|passed|failed" $out/tests.log | tail -12
timeout 60 python3 bench/token_loop.py --tokens 64 --json $out/token-loop.json 2>&1 | tail -4
echo "total $(( $(date +%s) - t0 )) s"
