#!/usr/bin/env bash
# Session 8, call 4: the attention combine rewritten (one round of loads, 8 dim slices per head); GEMV variants 34 / 35
# (29 / 30 with 22 / 14 warps per SM: whole rounds); the GDN conv inside the one-token GDN step (conv state as a ring);
# their tests and the engine-level ones, then whole steps at depth 0 and 128K.
set -uo pipefail
source bench/device_setup.sh
timeout 300 python3 -m pytest -q -p no:cacheprovider -rfE --timeout 120 tests/test_native_ops.py tests/test_native_attn_decode.py \
  tests/test_native_gdn_chunk.py tests/test_native_model.py tests/test_native_engine.py tests/test_native_lanes.py \
  tests/test_native_prefill.py -k "not timing_probe" 2>&1 | tail -4
echo "tests $(( $(date +%s) - t0 )) s"
G=34816x5120; Q=14336x5120; I=16480x5120; L=248320x5120
timeout 120 python3 bench/step_probe.py --kv int8 --depths 0,131072 2>&1 | grep step | tee $out/steps.txt
timeout 120 python3 bench/step_probe.py --kv int8 --depths 0 --routes "$G=34;$Q=35;$G=34,$Q=35;$G=34,$Q=35,$I=35;$G=34,$L=34" 2>&1 | grep route | tee -a $out/steps.txt
echo "total $(( $(date +%s) - t0 )) s"
