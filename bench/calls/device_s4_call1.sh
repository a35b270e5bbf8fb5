#!/usr/bin/env bash
# Session 4, call 1: the tensor-core 4-bit GEMV variants 20/21 (first run) against the fp64 oracle and
# timed beside the route; the attention prefill tests (ldsm_offsets refactor, first run); a CUPTI
# timeline of one decode step (kernel busy time against the gaps between kernels).
set -uo pipefail
# Kept as the record of that call (bench/NOTES.md). What it exercised first was removed afterwards (the
# tensor-core GEMV variants, or the GEMV L2 prefetch), so it no longer runs as written: it stops here.
echo "$0: record of a session 4 call; its subject was removed since (bench/NOTES.md)"; exit 2
source bench/device_setup.sh
ids=$(python3 -m pytest --collect-only -q -p no:cacheprovider tests/test_native_ops.py 2>/dev/null | grep qgemv \
  | grep -E "(-20|-21)\]")
timeout 60 python3 -m pytest -q -p no:cacheprovider -rfE --timeout 20 $ids > $out/tc_tests.log 2>&1
echo "tc tests rc=$?"; grep -E "^(FAILED|ERROR)|passed|failed" $out/tc_tests.log | head -12
timeout 60 python3 bench/gemv_probe.py --bits 4 --variants 0,1,4,6,10,20,21 --reps 30 2>&1 | tail -12
timeout 120 python3 bench/step_timeline.py --kv int8 --depth 0 --steps 5 --json $out/timeline-d0.json 2>&1 | tail -40
timeout 150 python3 -m pytest -q -p no:cacheprovider -rfE --timeout 60 tests/test_native_attn_prefill.py > $out/attn_prefill.log 2>&1
echo "attn prefill tests rc=$?"; grep -E "^(FAILED|ERROR)|passed|failed" $out/attn_prefill.log | head -12
echo "total $(( $(date +%s) - t0 )) s"
