#!/usr/bin/env bash
# Session 25, call 7: the step at HEAD against 7b67343 (session 24 call 8: the conv ring, before this session) on one
# machine (carry .whl, and old_7b67343.tgz = git archive 7b67343 minus bench/results, untracked), then every GPU test module.
set -uo pipefail
source bench/device_setup.sh; cur=$PWD
p() { timeout 100 python3 bench/step_probe.py --depths 0,131072 --steps 200 2>&1 | grep 'step kv' ; }
inst() { (cd $1 && MONORAIL_CUDA_ARCHS=90 python3 -m pip install -q --no-build-isolation --no-deps -e . > /tmp/b.log 2>&1) || grep -iE "error" /tmp/b.log | head -8; echo "installed $1 ($(( $(date +%s) - t0 )) s)"; }
mkdir -p /tmp/old && tar xzf old_7b67343.tgz -C /tmp/old
inst /tmp/old; echo "7b67343"; p
inst $cur; echo "HEAD"; p
inst /tmp/old; echo "7b67343"; p
inst $cur; echo "HEAD"; p
timeout 330 python3 -m pytest -q -p no:cacheprovider -rfE --timeout 120 tests/test_native*.py -k "not timing_probe" > $out/tests.log 2>&1
echo "tests rc=$?"; grep -E "^(FAILED|ERROR)|passed|failed" $out/tests.log | tail -12
echo "total $(( $(date +%s) - t0 )) s"
