#!/usr/bin/env bash
# Session 3, final call: the checks of what changed since call 3 (token-parallel conv, GEMV width route and
# test fix, 4-bit KV), then the prefill and decode benchmarks (24 GiB plans) and, with the time left, the
# llama.cpp prefill peer (pp2048, q8_0 KV, depths 0 and 8K). Every step has its own time cap so that the
# whole call stays inside the device tool's 600 s.
#   MONORAIL_COMMIT=<sha> bash bench/calls/device_s3_final.sh
set -uo pipefail
start=$(date +%s)
left() { echo $(( 585 - ($(date +%s) - start) )); }
source bench/device_setup.sh
timeout 100 python3 -m pytest -q -p no:cacheprovider -rfE --timeout 60 -k "int4 or cache_matches_decode or variant1_refuses" \
  tests/test_native_attn_decode.py tests/test_native_attn_prefill.py tests/test_native_model.py tests/test_native_prefill.py \
  > $out/tests.log 2>&1
echo "int4 tests rc=$? ($(left) s left)"; grep -E "^(FAILED|ERROR)|passed|failed|rel err|checked" $out/tests.log | head -20
timeout 45 python3 -m pytest -q -p no:cacheprovider -rfE --timeout 40 -k "conv or widths_t1 or gdn" tests/test_native_ops.py \
  > $out/tests_ops.log 2>&1
echo "ops tests rc=$? ($(left) s left)"; grep -E "^(FAILED|ERROR)|passed|failed" $out/tests_ops.log | head -10
timeout 200 python3 bench/prefill.py --out $out/prefill-h200.json --shared-peer .peer/llamacpp-h200.json \
  > $out/prefill.log 2>&1
echo "prefill rc=$? ($(left) s left)"; grep -E "chunk|GEMMs|tok_s|peak" $out/prefill.log
timeout 170 python3 bench/decode.py --out $out/decode-h200.json --quick > $out/decode.log 2>&1
echo "decode rc=$? ($(left) s left)"; grep -E "copy bandwidth|\"depth\"|leave-one-out" $out/decode.log | head -14
if [[ -n "${INT4_PROBE:-}" && $(left) -gt 60 ]]; then
  timeout 45 python3 bench/step_probe.py --kv int4 --depths 0,131072 > $out/step-int4.log 2>&1
  echo "int4 step rc=$? ($(left) s left)"; grep step $out/step-int4.log
fi
if [[ -d .peer && $(left) -gt 50 ]]; then
  timeout $(( $(left) - 10 )) bash .peer/llamacpp-peer.sh -fa on -p 2048 -ub 1024 -n 0 -d 0,8192 -r 1 -ctk q8_0 -ctv q8_0 \
    > "$out/llamacpp-pp-q8.json" 2>> "$out/peer.log"
  echo "peer pp q8_0 rc=$? ($(left) s left)"
  python3 bench/prefill.py --out "$out/prefill-h200.json" --fill-peers-only --llamacpp "$out/llamacpp-pp-q8.json" \
    --shared-peer .peer/llamacpp-h200.json | head -c 600; echo
fi
