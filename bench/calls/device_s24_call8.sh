#!/usr/bin/env bash
# Session 24, call 8: the GDN decode step's conv windows read as whole rings before the PDL wait and the position after
# it (set_gdn_conv_ring, default on; bench/sass_prewait.py found the window loads' addresses and the write slot waiting
# for the position before the wait). Tests (ring = windows bit for bit; the GDN step ops; the tiny model's decode
# steps and the engine), then whole steps alternating ring on / off.
#   bash bench/calls/device_s24_call8.sh     (carry .whl; ~3 minutes)
set -uo pipefail
source bench/device_setup.sh
timeout 120 python3 -m pytest -q -p no:cacheprovider -rfE --timeout 100 tests/test_native_ops.py tests/test_native_model.py \
  tests/test_native_engine.py -k "gdn or decode or teacher or engine" > $out/tests.log 2>&1
echo "tests rc=$?"; grep -E "^(FAILED|ERROR)|passed|failed" $out/tests.log | head -12
timeout 100 python3 bench/step_probe.py --kv int8 --depths 0,131072 --conv-ring 1,0,1,0,1 2>&1 \
  | grep -E "recipe|step|ring|Error|error" | tee $out/steps.txt
echo "total $(( $(date +%s) - t0 )) s"
