#!/usr/bin/env bash
# Session 26, call 2: the fallback's exact tie rule (top-k over penalised logits, ties at the k-th logit and at the
# top-p boundary cut in id order, as the host cuts them): the sampler / loop tests, the draw's cost by mode, and the
# app's token loop.
#   bash bench/calls/device_s26_call2.sh     (carry .whl; ~4 minutes)
set -uo pipefail
source bench/device_setup.sh
timeout 240 python3 -m pytest -q -p no:cacheprovider -rfE --timeout 120 tests/test_native_sampler.py \
  tests/test_native_ops.py tests/test_native_model.py -k "sampl or memory or draw or loop" > $out/tests.log 2>&1
echo "tests rc=$?"; grep -E "^(FAILED|ERROR)|passed|failed|Error|assert" $out/tests.log | head -20
timeout 60 python3 bench/sampler_time.py --json $out/sampler-time.json 2>&1 | tail -14
timeout 120 python3 bench/token_loop.py --tokens 64 --json $out/token-loop.json 2>&1 | tail -4
echo "total $(( $(date +%s) - t0 )) s"
