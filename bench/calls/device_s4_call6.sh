#!/usr/bin/env bash
# Session 4, call 6 (last device time): the GEMVs' L2 prefetch of their next batch (first run): its bit-identity
# tests, the GEMV and model tests, the route's GEMV times with the prefetch on and off, then the decode benchmark
# (prefetch on unless its tests failed here) and the llama.cpp decode peer at 0 / 8K / 32K in the same call.
#   MONORAIL_COMMIT=<sha> bash bench/calls/device_s4_call6.sh
set -uo pipefail
# Kept as the record of that call (bench/NOTES.md). What it exercised first was removed afterwards (the
# tensor-core GEMV variants, or the GEMV L2 prefetch), so it no longer runs as written: it stops here.
echo "$0: record of a session 4 call; its subject was removed since (bench/NOTES.md)"; exit 2
start=$(date +%s)
left() { echo $(( 285 - ($(date +%s) - start) )); }
source bench/device_setup.sh
timeout 40 python3 -m pytest -q -p no:cacheprovider -rfE --timeout 30 tests/test_native_ops.py -k "prefetch" > $out/tests_pf.log 2>&1
pf_rc=$?
echo "prefetch tests rc=$pf_rc ($(left) s left)"; grep -E "^(FAILED|ERROR)|passed|failed" $out/tests_pf.log | head -6
if [[ $pf_rc -ne 0 ]]; then export MONORAIL_GEMV_PREFETCH=0; echo "prefetch OFF for the benchmark"; fi
timeout 90 python3 -m pytest -q -p no:cacheprovider -rfE --timeout 60 tests/test_native_ops.py tests/test_native_model.py \
  -k "(qgemv and not prefetch) or full_width or programmatic or 64_teacher" > $out/tests.log 2>&1
echo "qgemv + model tests rc=$? ($(left) s left)"; grep -E "^(FAILED|ERROR)|passed|failed" $out/tests.log | head -8
timeout 45 python3 bench/gemv_probe.py --bits 4 --variants 0,4,6,10 --prefetch 1,2,0 --reps 30 2>&1 | tee $out/gemv-probe.txt | grep -v "^$" | tail -22
timeout 100 python3 bench/decode.py --out $out/decode-h200.json --quick > $out/decode.log 2>&1
echo "decode rc=$? ($(left) s left)"; grep -E "copy bandwidth|\"depth\"|PDL|prefetch|leave-one-out" $out/decode.log | head -16
if [[ -d .peer && $(left) -gt 70 ]]; then
  timeout 45 bash .peer/llamacpp-peer.sh -fa on -p 0 -n 64 -d 0,8192,32768 -r 1 > "$out/llamacpp-f16.json" 2>> "$out/peer.log"
  echo "peer f16 rc=$? ($(left) s left)"
  timeout $(( $(left) > 45 ? 40 : $(left) - 5 )) bash .peer/llamacpp-peer.sh -fa on -p 0 -n 64 -d 0,8192,32768 -r 1 \
    -ctk q8_0 -ctv q8_0 > "$out/llamacpp-q8.json" 2>> "$out/peer.log"
  echo "peer q8_0 rc=$? ($(left) s left)"
fi
echo "total $(( $(date +%s) - start )) s"
