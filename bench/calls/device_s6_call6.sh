#!/usr/bin/env bash
# Session 6, calls 6 and 7: RMSNorm fused into the integer-dot GEMVs that read it (qgemv_normed: gdn_in, attention qkv,
# gate_up, lm_head at T = 1). The tests that cover it (the op against fp64; the model, engine, lanes and prefill
# modules: decode and prefill against the reference, PDL bit-identity); only if they pass, the final benchmark of
# bench/calls/device_s4_final.sh (decode.py --quick and the llama.cpp peer in the same call). Device time was short
# (709 s), hence one call for both.
#   MONORAIL_COMMIT=<sha> bash bench/calls/device_s6_call6.sh
set -uo pipefail
start=$(date +%s)
left() { echo $(( 585 - ($(date +%s) - start) )); }
source bench/device_setup.sh
source bench/device_decode_peers.sh
timeout 150 python3 -m pytest -q -p no:cacheprovider -rfE --timeout 90 tests/test_native_model.py tests/test_native_engine.py \
  tests/test_native_lanes.py tests/test_native_prefill.py > $out/tests.log 2>&1
rc1=$?
timeout 60 python3 -m pytest -q -p no:cacheprovider -rfE --timeout 60 tests/test_native_ops.py -k "normed or rmsnorm" > $out/tests-ops.log 2>&1
rc2=$?
echo "model/engine/lanes/prefill tests rc=$rc1, normed op tests rc=$rc2 ($(left) s left)"
grep -hE "^(FAILED|ERROR)|passed|failed" $out/tests.log $out/tests-ops.log | head -16
if [[ $rc1 -ne 0 || $rc2 -ne 0 ]]; then echo "tests failed: no benchmark"; exit 1; fi
decode_and_peers 120
echo "total $(( $(date +%s) - start )) s"
