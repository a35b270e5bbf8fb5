#!/usr/bin/env bash
# Session 8, call 4: the attention combine rewritten (one round of loads, 8 dim slices per head); GEMV variants 34 / 35
# (29 / 30 with 22 / 14 warps per SM: whole rounds); their tests, then whole steps at depth 0 and 128K.
set -uo pipefail
source bench/device_setup.sh
timeout 150 python3 -m pytest -q -p no:cacheprovider -rfE --timeout 90 tests/test_native_ops.py -k "qgemv or attention or attn" 2>&1 | tail -3
timeout 200 python3 -m pytest -q -p no:cacheprovider -rfE --timeout 120 -s tests/test_native_attn_decode.py 2>&1 | grep -E "attention decode int8|attention decode bf16|passed|failed|FAILED|ERROR" | head -20
G=34816x5120; Q=14336x5120; I=16480x5120; L=248320x5120
timeout 200 python3 bench/step_probe.py --kv int8,bf16 --depths 0,131072 --routes "$G=34;$Q=35;$G=34,$Q=35;$G=34,$Q=35,$I=35;$G=34,$Q=35,$L=34" 2>&1 | grep step | tee $out/steps.txt
echo "total $(( $(date +%s) - t0 )) s"
