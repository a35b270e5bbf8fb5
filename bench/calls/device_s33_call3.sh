#!/usr/bin/env bash
# Session 33, call 3: on a fresh machine (a clean build of main, so no object from call 1's patched sampler), the whole
# sampler test module: with call 2 (every GPU module, most likely on the patched sampler's object) it covers main's
# own code in this session. Kept short to fit the session's last ~360 s of device budget.
#   bash bench/calls/device_s33_call3.sh     (carry .whl; ~2.5 minutes on a fresh machine)
set -uo pipefail
source bench/device_setup.sh
sha1sum csrc/cuda/sampler.cu
timeout 150 python3 -m pytest -q -p no:cacheprovider -rfE --timeout 60 tests/test_native_sampler.py > $out/tests.log 2>&1
echo "tests rc=$?"; grep -E "^(FAILED|ERROR)|passed|failed" $out/tests.log | tail -12
echo "total $(( $(date +%s) - t0 )) s"
