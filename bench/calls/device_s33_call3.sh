#!/usr/bin/env bash
# Session 33, call 3: on a fresh machine (a clean build of main, so no object from call 1's patched sampler), the
# sampler module and the token-loop tests: with call 2 (every GPU module, most likely on the patched sampler's
# object) this covers main's own code in this session.
#   bash bench/calls/device_s33_call3.sh     (carry .whl; ~3 minutes on a fresh machine)
set -uo pipefail
source bench/device_setup.sh
sha1sum csrc/cuda/sampler.cu
timeout 300 python3 -m pytest -q -p no:cacheprovider -rfE --timeout 120 tests/test_native_sampler.py \
  tests/test_native_ops.py tests/test_native_model.py -k "sampl or memory or draw or loop or broken or wide" \
  > $out/tests.log 2>&1
echo "tests rc=$?"; grep -E "^(FAILED|ERROR)|passed|failed" $out/tests.log | tail -12
echo "total $(( $(date +%s) - t0 )) s"
