#!/usr/bin/env bash
# Session 2, call 4 (final): the llama.cpp peer (prefill pp2048 and decode), the prefill benchmark,
# the multi-token-step diagnostic, and the tests fixed after call 3.
set -uo pipefail
source bench/device_setup.sh
echo "=== diag"; timeout 60 python3 bench/diag_steps.py 2>&1 | tail -22
timeout 90 python3 -m pytest -q -p no:cacheprovider -s -rfE --timeout 80 "tests/test_native_ops.py::test_attention_decode" \
  tests/test_native_artifact.py > $out/tests.log 2>&1
echo "tests rc=$?"; grep -E "^(FAILED|ERROR)|passed|failed|rel err" $out/tests.log | head -12
echo "=== peer $(( $(date +%s) - t0 )) s"
timeout 100 bash .peer/llamacpp-peer.sh -fa on -p 2048 -ub 1024 -n 0 -d 0,8192 -r 1 -ctk q8_0 -ctv q8_0 \
  > $out/llamacpp-pp-q8.json 2>> $out/peer.log; echo "peer pp q8_0 rc=$?"
timeout 60 bash .peer/llamacpp-peer.sh -fa on -p 0 -n 64 -d 0,8192 -r 1 > $out/llamacpp-f16.json 2>> $out/peer.log
echo "peer tg f16 rc=$?"
timeout 70 bash .peer/llamacpp-peer.sh -fa on -p 0 -n 64 -d 0,8192,32768 -r 1 -ctk q8_0 -ctv q8_0 \
  > $out/llamacpp-q8.json 2>> $out/peer.log; echo "peer tg q8_0 rc=$?"
echo "=== prefill $(( $(date +%s) - t0 )) s"
python3 bench/prefill.py --out $out/prefill-h200.json --llamacpp $out/llamacpp-pp-q8.json \
  --shared-peer .peer/llamacpp-h200.json 2>&1 | tee $out/prefill.log | tail -8
echo "done $(( $(date +%s) - t0 )) s"
