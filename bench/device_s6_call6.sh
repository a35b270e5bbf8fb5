#!/usr/bin/env bash
# Session 6, call 6: RMSNorm fused into the integer-dot GEMVs that read it (qgemv_normed: gdn_in, attention qkv,
# gate_up, lm_head at T = 1): every GPU test module, then decode steps (int8 KV, depth 0 and 128K, PDL on and off).
set -uo pipefail
source bench/device_setup.sh
timeout 330 python3 -m pytest -q -p no:cacheprovider -rfE --timeout 90 tests/test_native_*.py > $out/tests.log 2>&1
echo "all native tests rc=$?"; grep -E "^(FAILED|ERROR)|passed|failed" $out/tests.log | head -16
timeout 90 python3 bench/step_probe.py --kv int8 --depths 0,131072 --pdl 1,0 2>&1 | grep step
echo "total $(( $(date +%s) - t0 )) s"
