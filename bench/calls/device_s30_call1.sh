#!/usr/bin/env bash
# Session 30, call 1: session 29's call at HEAD (the draw's cost with the wide select and top-k narrowing off / on,
# the sampler and loop tests, the token loop) plus each sampler kernel's own duration under Nsight Compute on the
# wide select's row (flat, top-p 0.9) and on the narrowed broad row, to see where the wide select's ~325 us go.
#   MONORAIL_COMMIT=<sha> bash bench/calls/device_s30_call1.sh     (carry .whl; ~5 minutes)
set -uo pipefail
source bench/device_setup.sh
for row in flat broad; do
  timeout 90 ncu --clock-control none -k regex:sample_ --metrics gpu__time_duration.sum \
    python3 bench/ncu_sampler.py "$row" "no top-k, top-p 0.9" 3 > "$out/ncu-sampler-$row.txt" 2>&1
  echo "ncu $row rc=$?"
  grep -E "sample_[a-z_]+kernel|gpu__time_duration" "$out/ncu-sampler-$row.txt" | sed 's/  */ /g' | paste - - | tail -12
done
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
