#!/usr/bin/env bash
# Session 4, call 2: single-LOP3 magic decode (every 4/5/6-bit GEMV, int4 KV, dequant) and the reworked
# tensor-core GEMV (x through L1, one tile per block, K split over W warps: variants 20..27): oracle tests,
# GEMV table, decode step.
set -uo pipefail
# Kept as the record of that call (bench/NOTES.md). What it exercised first was removed afterwards (the
# tensor-core GEMV variants, or the GEMV L2 prefetch), so it no longer runs as written: it stops here.
echo "$0: record of a session 4 call; its subject was removed since (bench/NOTES.md)"; exit 2
source bench/device_setup.sh
timeout 240 python3 -m pytest -q -p no:cacheprovider -rfE --timeout 60 tests/test_native_ops.py \
  tests/test_native_attn_decode.py tests/test_native_prefill.py -x > $out/tests.log 2>&1
echo "tests rc=$?"; grep -E "^(FAILED|ERROR)|passed|failed" $out/tests.log | head -12
timeout 60 python3 -m pytest -q -p no:cacheprovider -rfE --timeout 60 tests/test_native_attn_prefill.py -k "int4" > $out/attn_prefill.log 2>&1
echo "attn prefill int4 rc=$?"; grep -E "^(FAILED|ERROR)|passed|failed" $out/attn_prefill.log | head -5
timeout 90 python3 bench/gemv_probe.py --bits 4 --variants 0,1,4,6,10,20,21,22,23,24,25,26,27 --reps 30 2>&1 | tail -16
timeout 60 python3 bench/gemv_probe.py --bits 5,6 --variants 0,17,18,19 --reps 30 2>&1 | grep -v "^$" | tail -14
timeout 100 python3 bench/step_probe.py --kv int8 --depths 0 --gemv-variants 0 2>&1 | tail -3
timeout 100 python3 bench/step_timeline.py --kv int8 --depth 0 --steps 5 --json $out/timeline-d0.json 2>&1 | tail -30
echo "total $(( $(date +%s) - t0 )) s"
